"""The reference target: scheduler-level operations over the pool, as the harness drives them.

Each operation either completes or raises `Refused` and leaves every record, row, slot and tree node as it
was: it checks the scheduler's preconditions and the capacity it needs (counting what the tree could evict)
before it changes anything. `Refused` carries the reason: a scheduler precondition (the request is not
running), a capacity check (admission control would not schedule it), or one of the pool's own contract
asserts. One operation is one scheduling round of one request: a chunk is scheduled, computed and its result
processed within the call, so `inflight_middle_chunks` is back to 0 when the call returns.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable
from typing import ClassVar, TypeVar

import torch

from impl.alloc_kernels import BACKENDS
from impl.allocation import (
    Allocator,
    OutOfMemory,
    Pools,
    alloc_for_decode,
    alloc_for_decode_prealloc,
    alloc_for_extend,
    alloc_for_spec_decode,
    evict_from_tree_cache,
    free_new_pages,
)
from impl.allocator import TokenToKVPoolAllocator
from impl.chunk_cache import ChunkCache
from impl.decode_pool import DecodeReqToTokenPool
from impl.fault_points import FaultPoints, install
from impl.faults import NO_FAULTS, FaultSet
from impl.field_copy import FieldCopy
from impl.paged_allocator import PagedTokenToKVPoolAllocator
from impl.prefill_adder import plan_round
from impl.prefix_cache import PrefixCache
from impl.radix_cache import RadixCache, TreeNode
from impl.records import Req, ReqStatus, output_token
from impl.release import (
    SENTINEL_ROW,
    pp_release_manual,
    release_kv_cache,
    release_offloaded,
    reset_for_retract,
)
from impl.req_pool import ContractViolation, ReqToTokenPool
from impl.scheduler import BatchPlan, ExtendPlan, SchedulerGlue, tokens_needed
from impl.target import (
    OFFLOAD_FROM_ZERO,
    Admitted,
    Cause,
    Eviction,
    PoolConfig,
    PoolSnapshot,
    RecordView,
    Refused,
    Retracted,
    Round,
    check_finish_by,
)
from properties.interning import Interned
from properties.vocabulary import KIND_NORMAL, PROFILE_REQUESTS, ceil_align

T = TypeVar("T")

# SGLANG_RETRACT_DECODE_STEPS: a retraction evicts this many tree tokens per request still running.
RETRACT_DECODE_STEPS = 20
# A row table of at most this many entries is read into the snapshot in one `tolist` (else row by row).
WHOLE_TABLE_LIMIT = 1 << 16


class ReferencePool(SchedulerGlue[Req], FieldCopy):
    """The reference pool: row pool + token or page allocator + chunk cache or radix tree, driven as a scheduler
    would drive them for one request at a time."""

    short_alloc_crashes = False
    offload_frees: str | None = OFFLOAD_FROM_ZERO  # 0.5.19's `_release_finished_req`, as the model reads it
    OPS: ClassVar[frozenset[str]] = frozenset(
        {
            "admit",
            "extend",
            "decode",
            "batch",
            "spec_prepare",
            "spec_commit",
            "finish",
            "decode_finish",
            "spec_finish",
            "pp_release",
            "pp_release_manual",
            "pp_profile",
            "retract",
            "retract_decode",
            "decode_round",
            "pause_retract",
            "queue",
            "prefill_round",
            "abort",
            "offload_release",
            "evict",
            "flush",
            "group_begin",
            "group_end",
            "pd_prealloc",
            "reuse_released",
            "release_again",
            "free_row",
        }
    )

    def __init__(self, config: PoolConfig, faults: FaultSet = NO_FAULTS):
        if config.device == "cuda" and not torch.cuda.is_available():
            raise ValueError("device 'cuda' asked for, but no CUDA device is available")
        self.config = config
        self.faults = faults
        self.req_to_token_pool = _row_pool(config, faults)
        self.allocator = _allocator(config)
        self.tree: RadixCache | None = None
        if config.cache == "radix":
            self.tree = RadixCache(self.req_to_token_pool, self.allocator, config.page_size, faults)
        self.cache: PrefixCache = self.tree or ChunkCache(self.req_to_token_pool, self.allocator, faults)
        self.pools = Pools(self.cache, self.allocator, config.evict_on_demand)
        self.fault_points = install(FaultPoints(), self.req_to_token_pool, self.allocator)
        self.reqs: dict[int, Req] = {}

    # -- prefill ---------------------------------------------------------------------------------------------

    def admit(
        self, rid: int, extend_len: int, *, prompt_len: int | None = None, family: int = 0, kind: int = KIND_NORMAL
    ) -> int:
        """A new request's first extend: prefix match (radix), a fresh row, slots for up to `extend_len` tokens.

        With `prompt_len` the prompt is that many tokens of `family` and the extend stops at its end; without,
        it is open-ended and exactly `extend_len` tokens are computed. `kind` is the request's kind (`KIND_*`).
        """
        args = {"req": rid, "n": extend_len, "family": family, "kind": kind}
        return self.batch([("admit", args if prompt_len is None else {**args, "prompt": prompt_len})])[0]

    def extend(self, rid: int, extend_len: int) -> int:
        """The next extend: a chunk continuation keeps its row; a dLLM block after `dllm_stash` takes a fresh
        one; a retracted or released request is re-admitted with a new prefix match on a fresh row."""
        return self.batch([("extend", {"req": rid, "n": extend_len})])[0]

    # -- decode ----------------------------------------------------------------------------------------------

    def decode(self, rid: int) -> None:
        """One non-speculative decode step: one slot (a new page when it starts one) at `kv_committed_len`."""
        self.batch([("decode", {"req": rid})])

    # -- batches -----------------------------------------------------------------------------------------

    def batch(self, entries: list[tuple[str, dict[str, int]]], unchecked: bool = False) -> list[int]:
        """One scheduling round of up to `MAX_BATCH` requests: admissions and extends (`admit` / `extend`
        arguments) allocated together (rows, then every slot at once), then the decodes of a mixed batch, then
        the result pass's stash of each prefill entry in order. Returns each entry's row, in the order given.
        `unchecked` leaves the budget to the allocation paths (`SchedulerGlue._plan_batch`)."""
        plan = self._plan_batch(entries, checked=not unchecked)
        rows = self._contract(lambda: self._run_batch(plan))
        return [rows[rid] for rid in plan.rids]

    def queue(self, rid: int, prompt_len: int, family: int = 0, kind: int = KIND_NORMAL, priority: int = 0) -> None:
        """A new request in the waiting queue, holding nothing; a prefill round (or an extend) admits it. The
        reference adder serves the queue in order and never preempts, so it keeps no priority."""
        self._queued_entry(rid, prompt_len, family, kind)

    def prefill_round(self) -> Round:
        """The scheduler's prefill round with the reference adder (`impl.prefill_adder`): the batch it picks, run
        as a batch is (rows, then slots, then each entry's stash in the result pass); what ran, in order."""
        chunked = [rid for rid, _ in self._round_chunked()]
        plan = plan_round(self, chunked)
        if plan is None:
            return Round([], [])
        rows = self._contract(lambda: self._run_batch(plan))
        return Round([], [Admitted(rid, extend.start, extend.seq_len, rows[rid]) for rid, _, extend in plan.prefill])

    def _run_batch(self, plan: BatchPlan[Req]) -> dict[int, int]:
        """The batch's pool steps; each request's row, as the allocation handed it out."""
        rows: dict[int, int] = {}
        undo = self._allocate_prefill(plan, rows)
        if plan.decode:
            try:
                alloc_for_decode(self.pools, [req for _, req, _ in plan.decode])
            except OutOfMemory as exc:
                undo()  # the round failed half way: what its prefill took goes back
                raise Refused(f"refused by the allocation path: {exc}", _oom_cause(exc)) from exc
            rows.update((rid, req.kv.req_pool_idx or 0) for rid, req, _ in plan.decode)
        for rid, req, view in plan.decode:
            req.fill_ids = [*req.fill_ids[: view.committed_len], output_token(rid, view.committed_len)]
            req.status = ReqStatus.DECODING
        own_group = self.allocator.free_group is None  # the result pass frees what it stashes in one group
        if own_group:
            self.allocator.free_group_begin()
        for rid, req, extend in plan.prefill:
            self._extend_result(req, extend)
            self.reqs[rid] = req
        if own_group:
            self.allocator.free_group_end()
        return rows

    def _allocate_prefill(self, plan: BatchPlan[Req], rows: dict[int, int]) -> Callable[[], None]:
        """The prefill entries' matches and locks, then their rows and slots; an allocation that does not fit
        gives the matches and locks back (the scheduler's, taken before it called) and refuses. Returns what
        undoes the whole prefill allocation, for a round that fails after it."""
        if not plan.prefill:
            return lambda: None
        saved = [(req, req.prefix_indices, req.last_node, req.kv.cache_protected_len) for _, req, _ in plan.prefill]
        before = [(req.kv.holds_kv, req.kv.kv_committed_len, req.kv.kv_allocated_len) for _, req, _ in plan.prefill]
        for _, req, extend in plan.prefill:
            self._open_extend(req, extend)
        reqs = [req for _, req, _ in plan.prefill]
        starts = [req.prefix_indices.numel() for req in reqs]

        def give_matches_back() -> None:
            for (_, req, extend), (_, prefix, node, protected) in zip(plan.prefill, saved, strict=True):
                if extend.match_limit is not None and isinstance(req.last_node, TreeNode) and self.tree is not None:
                    self.tree.dec_lock_ref(req.last_node)
                req.prefix_indices, req.last_node, req.kv.cache_protected_len = prefix, node, protected

        def undo() -> None:
            for req, start, (held, committed, allocated) in zip(reqs, starts, before, strict=True):
                free_new_pages(self.pools, req, start, req.kv.kv_allocated_len)
                if not held:
                    self.req_to_token_pool.free(req)
                req.kv.kv_committed_len, req.kv.kv_allocated_len = committed, allocated
            give_matches_back()

        try:
            taken = alloc_for_extend(self.pools, reqs, [extend.seq_len for _, _, extend in plan.prefill])
        except OutOfMemory as exc:
            give_matches_back()
            raise Refused(f"refused by the allocation path: {exc}", _oom_cause(exc)) from exc
        rows.update((rid, row) for (rid, _, _), row in zip(plan.prefill, taken, strict=True))
        return undo

    def spec_prepare(self, rid: int, reserve: int) -> None:
        """Speculative prepare: `A = max(A, ceil_align(C + reserve))`, the new draft slots written to the row."""
        if not self.config.speculative:
            raise Refused("speculative decoding is off in this pool")
        if reserve < 1:
            raise Refused(f"reserve must be positive, got {reserve}")
        req = self._ready_to_decode(rid)
        kv = req.kv
        want = kv.kv_committed_len + reserve
        if not self.faults.on("unaligned_spec_alloc_len"):
            want = ceil_align(want, self.config.page_size)
        next_len = max(kv.kv_allocated_len, want)
        if next_len > self.config.width:
            raise Refused(f"request {rid} would reserve past the row width {self.config.width}")
        self._check_capacity(0, tokens_needed(self.config.page_size, kv.kv_allocated_len, next_len))
        if next_len > kv.kv_allocated_len:
            self._contract(lambda: alloc_for_spec_decode(self.pools, req, next_len))
        req.status = ReqStatus.DECODING

    def spec_commit(self, rid: int, accepted: int) -> None:
        """Speculative verify result: `C += accepted` (drafts plus bonus), all inside the reserved `[C, A)`."""
        req = self._get(rid)
        kv = req.kv
        if req.status is not ReqStatus.DECODING or not kv.holds_kv:
            raise Refused(f"request {rid} is not decoding on a row")
        if not 1 <= accepted <= kv.kv_allocated_len - kv.kv_committed_len:
            raise Refused(
                f"{accepted} accepted tokens do not fit the {kv.kv_allocated_len - kv.kv_committed_len} reserved"
            )
        start = kv.kv_committed_len
        kv.kv_committed_len += accepted
        req.fill_ids = req.fill_ids[:start] + [output_token(rid, p) for p in range(start, kv.kv_committed_len)]

    # -- release ---------------------------------------------------------------------------------------------

    def finish(self, rid: int) -> None:
        """The request finished: `release_kv_cache(req, cache, is_insert=True)` inside a result free group."""
        req = self._running(rid)
        if req.status is ReqStatus.RUNNING and req.prompt_len is not None:
            raise Refused(f"request {rid} is mid-prefill; only an abort ends it there")
        self._release(req, is_insert=True, grouped=True)
        req.status = ReqStatus.FINISHED

    def decode_finish(self, rid: int, by: int) -> None:
        """A decode whose sampled token ends the request (`by`, what the check matched: `FINISH_BY`): the step's
        slot, then the finish release of its result pass."""
        check_finish_by(by)
        self.decode(rid)
        self.finish(rid)

    def spec_finish(self, rid: int, accepted: int, stop: int, by: int) -> None:
        """A verified run of `accepted` tokens whose `stop`-th ends the request: all of it committed, then the
        finish release, which owns the KV only through the stop (`Req.owned_kv_len`)."""
        check_finish_by(by)
        if not 1 <= stop <= accepted:
            raise Refused(f"the stop at {stop} lies outside the {accepted} accepted tokens")
        start = self._get(rid).kv.kv_committed_len
        self.spec_commit(rid, accepted)
        req = self._get(rid)
        req.stop_len = start + stop
        self.finish(rid)

    def retract(self, rid: int, remaining: int | None = None) -> None:
        """Retraction (`release_req`): release without insert, evict for the `remaining` requests (by default those
        still running), then `reset_for_retract`; the request waits to be re-admitted with its outputs as prompt."""
        # #18694: preemption without its not-finished filter also picks requests that already finished.
        req = self._get(rid) if self.faults.on("preempt_finished_double_free") else self._running(rid)
        self._release(req, is_insert=False, grouped=False)
        if remaining is None:
            remaining = sum(1 for r in self.reqs.values() if r.kv.holds_kv and r.status is not ReqStatus.FINISHED)
        evict_from_tree_cache(self.pools, remaining * RETRACT_DECODE_STEPS)
        self._contract(lambda: reset_for_retract(req))
        if req.prompt_len is not None:
            req.prompt_len = len(req.fill_ids)  # re-admission recomputes the outputs as prompt
        req.status = ReqStatus.WAITING

    def retract_decode(self) -> Retracted:
        """`ScheduleBatch.retract_decode` over the running batch (every decoding request, ascending id): pop the
        least preferred to keep (fewest outputs, then longest original prompt, then the later in the batch) while
        the rest do not fit the next decode, at least one and keeping one; the last one that still does not fit
        is aborted after its retraction's release."""
        batch = sorted(rid for rid, req in self.reqs.items() if req.status is ReqStatus.DECODING)
        if not batch:
            raise Refused("no request is decoding")
        keep = sorted(batch, key=self._keep_key, reverse=True)
        retracted: list[int] = []
        while len(keep) > 1 and (not retracted or not self._decode_fits(keep)):
            retracted.append(keep.pop())
            self.retract(retracted[-1])
        aborted = None
        if not self._decode_fits(keep):
            aborted = keep.pop()
            self.retract(aborted)
            self.reqs[aborted].status = ReqStatus.FINISHED
        return Retracted(retracted, aborted)

    def decode_round(self) -> Retracted:
        """The scheduler's decode round (`update_running_batch`, then the result pass): where the next decode of
        the running batch does not fit (`check_decode_mem`), the decode retraction; then every request left
        decodes one token."""
        batch = [rid for rid, _ in self._running_batch()]
        done = Retracted([], None) if self._decode_fits(batch) else self.retract_decode()
        for rid in batch:
            if rid not in done.retracted and rid != done.aborted:
                self.decode(rid)
        return done

    def pause_retract(self) -> None:
        """The retract-mode pause (`pause_generation(mode="retract")`): `retract_all` over the running batch, then
        the chunked request, each release evicting for the requests left to retract with it
        (`remaing_req_count`), each then re-queued."""
        order = self._pause_order()
        for index, (rid, _) in enumerate(order):
            self.retract(rid, len(order) - index)

    def _keep_key(self, rid: int) -> tuple[int, int]:
        req = self.reqs[rid]
        return req.kv.kv_committed_len - req.origin_len, -req.origin_len

    def _decode_fits(self, rids: list[int]) -> bool:
        """`check_decode_mem`: a page per request whose committed length is page-aligned, after evicting for it."""
        page, lengths = self.config.page_size, (self.reqs[rid].kv.kv_committed_len for rid in rids)
        need = sum(tokens_needed(page, committed, committed + 1) for committed in lengths)
        evict_from_tree_cache(self.pools, need)
        return self.allocator.available_size() >= need

    def abort(self, rid: int) -> None:
        """Abort: a waiting request is dropped; a decoding one is released as a normal finish; one mid-prefill
        takes the pending chunked abort (`release_kv_cache(is_insert=False)`); a dLLM block without its row
        takes the dLLM abort path, which releases only a record that holds a row (the 0.5.19 hazard)."""
        req = self._get(rid)
        if req.status is ReqStatus.FINISHED:
            raise Refused(f"request {rid} already finished")
        kv = req.kv
        # sglang-jax #1400: the chunked request was dropped from the scheduler without its release.
        dropped = self.faults.on("drop_chunked_without_release")
        if req.status is ReqStatus.RUNNING and kv.holds_kv and not dropped:
            self._release(req, is_insert=False, grouped=False)
        elif req.status is ReqStatus.DECODING:
            self._release(req, is_insert=True, grouped=True)
        req.status = ReqStatus.FINISHED

    def pp_release(self, rid: int) -> None:
        """PP-profiling release after PR #37167: `release_kv_cache(req, cache, is_insert=False)`."""
        req = self._running(rid)
        if self.faults.on("pp_manual_release"):
            # Before PR #37167 the profiling loop released by hand.
            self._contract(lambda: pp_release_manual(req, self.cache, req.extend_range_end))
        else:
            self._release(req, is_insert=False, grouped=False)
        req.status = ReqStatus.FINISHED

    def pp_profile(self, quarter: int) -> None:
        """PP dynamic-chunk profiling (0.5.23's `DynamicChunkSizer._profile_prefill_latency`): synthetic requests of
        the longest profiled prompt down, each given a row and its slots alone (no match, no stash), then released
        by `release_kv_cache(is_insert=False)`; none is a request of the pool's."""
        longest = self._check_profile(quarter, self.allocator.free_group is not None)
        step = max(1, longest // PROFILE_REQUESTS)
        for length in range(longest, 0, -step)[:PROFILE_REQUESTS]:
            req = Req(rid=-1, prompt_len=length, origin_len=length, status=ReqStatus.RUNNING)
            self._contract(functools.partial(alloc_for_extend, self.pools, [req], [length]))
            req.extend_range_end = length
            self._release(req, is_insert=False, grouped=False)

    def pp_release_manual(self, rid: int) -> None:
        """PP-profiling release as hand-written before PR #37167: frees `[0, seq_len)` raw, `seq_len` being the
        profiling extend's end (`extend_range.end`)."""
        req = self._running(rid)
        self._contract(lambda: pp_release_manual(req, self.cache, req.extend_range_end))
        req.status = ReqStatus.FINISHED

    def offload_release(self, rid: int, sentinel: int = 0) -> None:
        """PD-decode KV offloading's release once the request finished and its offload writes are acked
        (`_release_finished_req`), beside `release_kv_cache`. With `sentinel` 1 a record that holds no row
        carries `req_pool_idx == -1`, as older frees and pool fakes leave it; the guard must return early on it
        as on None, and an early return is a refusal here."""
        req = self._get(rid)
        if req.status not in (ReqStatus.DECODING, ReqStatus.FINISHED):
            raise Refused(f"request {rid} is {req.status.value}; the offload manager releases finished requests")
        if sentinel not in (0, 1):
            raise Refused(f"sentinel must be 0 or 1, got {sentinel}")
        if sentinel and req.kv.holds_kv:
            raise Refused(f"request {rid} holds a row; only a record without one carries the sentinel")
        # Upstream subtracts len(prefix_indices), on the decode side the matched prefix its lock protects; here
        # prefix_indices also carries a stashed unaligned tail, so the protected part is cache_protected_len.
        before, protected_len = req.kv.req_pool_idx, req.kv.cache_protected_len
        req.kv.req_pool_idx = SENTINEL_ROW if sentinel else before
        try:
            released = self._contract(lambda: release_offloaded(req, self.cache))
        finally:
            if req.kv.req_pool_idx == SENTINEL_ROW:
                req.kv.req_pool_idx = before
        if not released:
            raise Refused(
                f"request {rid}: req_pool_idx is {SENTINEL_ROW if sentinel else before}; "
                "the offload release returns early"
            )
        if self.tree is not None:
            self.tree.protected_size_ -= protected_len  # directly, without dec_lock_ref, as upstream
        req.status = ReqStatus.FINISHED

    # -- tree and pool maintenance ---------------------------------------------------------------------------

    def evict(self, num_tokens: int) -> int:
        """Evict unlocked tree leaves until `num_tokens` are freed or none is left; returns the tokens freed."""
        if num_tokens < 0:
            raise Refused(f"cannot evict a negative number of tokens ({num_tokens})")
        return self.cache.evict(num_tokens)

    def group_begin(self) -> None:
        """The result pass opens the allocator's free group: what it releases comes back at the group's end."""
        self._contract(self.allocator.free_group_begin)

    def group_end(self) -> None:
        """The result pass ends: the group's frees come back (nothing happens without an open group)."""
        self.allocator.free_group_end()

    def flush(self) -> None:
        """`flush_cache`, only when idle: reset the tree, clear the allocator and the row pool."""
        busy = sorted(rid for rid, r in self.reqs.items() if r.status is not ReqStatus.FINISHED or r.kv.holds_kv)
        if busy:
            raise Refused(f"flush needs an idle pool; requests {busy} are waiting, running or hold a row")
        if self.tree is not None:
            self.tree.reset()
        self.allocator.clear()
        self.req_to_token_pool.clear()

    # -- PD decode and dLLM ----------------------------------------------------------------------------------

    def pd_prealloc(self, rid: int, fill_len: int, *, family: int = 0) -> int:
        """PD-decode pre-allocation (no prefix hit): a row and slots for `[0, fill_len)`, `C = A = fill_len`;
        the transfer is taken to succeed, so the request decodes next."""
        if rid in self.reqs:
            raise Refused(f"request {rid} already exists")
        if not 1 <= fill_len <= self.config.width:
            raise Refused(f"fill length {fill_len} is not in [1, row width {self.config.width}]")
        req = self._new_entry(rid, fill_len, family)
        self._check_capacity(1, tokens_needed(self.config.page_size, 0, fill_len))
        row = self._contract(lambda: alloc_for_decode_prealloc(self.pools, req, fill_len))
        req.extend_range_end = fill_len
        req.status = ReqStatus.DECODING
        self.reqs[rid] = req
        return row

    def dllm_stash(self, rid: int) -> None:
        """A resolved dLLM block: stash it (`cache_unfinished_req`), then `ReqToTokenPool.free` without
        `mark_kv_released`, leaving `holds_kv` False with `kv_allocated_len > 0`, as 0.5.19 does."""
        req = self._get(rid)
        if req.status is not ReqStatus.RUNNING or not req.kv.holds_kv:
            raise Refused(f"request {rid} is not in prefill on a row")

        def stash_and_free_row() -> None:
            self.cache.cache_unfinished_req(req)
            self.req_to_token_pool.free(req)

        self._contract(stash_and_free_row)

    # -- calls the contract forbids (the harness's negative steps) ---------------------------------------

    def release_again(self, rid: int) -> None:
        """Call `release_kv_cache` directly, whatever the scheduler thinks of the request."""
        self._release(self._get(rid), is_insert=False, grouped=False)

    def free_row(self, rid: int) -> None:
        """Call `ReqToTokenPool.free` directly (a second free of a released record must be refused)."""
        req = self._get(rid)
        self._contract(lambda: self.req_to_token_pool.free(req))

    def reuse_released(self, rid: int, stale_row: int, extend_len: int) -> int:
        """A released record re-enters `alloc` still naming its old row, as a bypassed free leaves it."""
        req = self._get(rid)
        if req.kv.holds_kv:
            raise Refused(f"request {rid} still holds a row; nothing stale to reuse")
        if not 1 <= stale_row <= self.req_to_token_pool.req_to_token.shape[0] - 1:
            raise Refused(f"row {stale_row} is not a row of this pool")
        req.kv.req_pool_idx = stale_row
        try:
            return self.extend(rid, extend_len)
        except Refused:
            req.kv.req_pool_idx = None
            raise

    # -- observation ------------------------------------------------------------------------------------

    def clone(self) -> ReferencePool:
        """An independent copy of the whole pool (the release-path differential runs each path on one).

        `copy.deepcopy` of the object graph with the config and fault set shared (both immutable) and every
        tensor shared but the row table, which is copied once (a view of it becomes the same view of the copy):
        the row table is the only tensor the pool writes in place; every other one is replaced, never written,
        when the pool changes (`torch.cat`, slices, `.to`), so sharing it is as good as a copy and costs nothing.
        `tests/impl/test_clone.py` holds the pool to that, on every op."""
        table = self.req_to_token_pool.req_to_token
        copied = table.clone()
        memo: dict[int, object] = {id(self.config): self.config, id(self.faults): self.faults, id(table): copied}
        dispatch = copy._deepcopy_dispatch  # type: ignore[attr-defined]
        saved = dispatch.get(torch.Tensor)
        dispatch[torch.Tensor] = functools.partial(_share_tensor, table, copied)
        try:
            return copy.deepcopy(self, memo)
        finally:
            if saved is None:
                del dispatch[torch.Tensor]
            else:
                dispatch[torch.Tensor] = saved

    def take_evictions(self) -> list[Eviction]:
        """The on-demand evictions made since the last take (the explicit `evict` step is not one)."""
        taken = [Eviction(asked, evicted) for asked, evicted in self.pools.evictions]
        self.pools.evictions.clear()
        return taken

    def snapshot(self) -> PoolSnapshot:
        """The pool's observable state now; later steps do not change it. The row table is copied (the pool writes
        it in place); the allocator's page lists are shared, since the pool replaces them and never writes into
        one (`tests/impl/test_clone.py`, which lets `clone` share them too)."""
        pool, tree = self.req_to_token_pool, self.tree
        table = pool.req_to_token.clone()
        rows_total = table.shape[0] - 1
        census = tree.census() if tree is not None else None
        empty = _empty_on(self.config.device)
        return PoolSnapshot(
            rows_total=rows_total,
            width=pool.max_context_len,
            tokens_total=self.allocator.size,
            page_size=self.allocator.page_size,
            free_rows=list(pool.free_slots),
            row_generation=list(pool.req_generation),
            records={rid: self._record_view(req) for rid, req in self.reqs.items()},
            row_slots=_row_slots(table, self.reqs),
            free_slots=self.allocator.free_pages,
            release_slots=self.allocator.release_pages,
            evictable_size=self.cache.evictable_size(),
            protected_size=self.cache.protected_size(),
            cache=self.config.cache,
            speculative=self.config.speculative,
            num_pages=self.config.tokens // self.config.page_size,
            tree_slots=census.slots if census is not None else empty,
            evictable_slots=census.unlocked_slots if census is not None else empty,
            evictable_recount=census.evictable if census is not None else 0,
            group_open=self.allocator.free_group is not None,
            pending_pages=self.allocator.pending_pages(),
            protected_recount=census.protected if census is not None else 0,
            req_to_token=table,
        )

    # -- internals --------------------------------------------------------------------------------------

    def _contract(self, call: Callable[[], T]) -> T:
        try:
            return call()
        except ContractViolation as exc:
            raise Refused(f"contract assert: {exc}", Cause.CONTRACT_ASSERT) from exc
        except OutOfMemory as exc:  # an allocation path's fail-loud refusal (a wrong budget, or a fault point's)
            raise Refused(f"refused by the allocation path: {exc}", _oom_cause(exc)) from exc

    def _release(self, req: Req, is_insert: bool, grouped: bool) -> None:
        """`release_kv_cache`, inside a free group when it runs in a result-processing pass as upstream's does."""
        own_group = grouped and self.allocator.free_group is None  # else it joins the result pass's open group
        if own_group:
            self.allocator.free_group_begin()
        try:
            self._contract(lambda: release_kv_cache(req, self.cache, is_insert, self.config.speculative))
        finally:
            if own_group:
                self.allocator.free_group_end()
        if not self.faults.on("stale_last_node_after_reset"):
            req.last_node = None  # the lock went back with the release; the scheduler drops the handle

    def _open_extend(self, req: Req, plan: ExtendPlan) -> None:
        """`init_next_round_input` and the admission's lock (a fresh match only), before the batch allocates; a
        re-admitted request starts with no stop (its finish state went with its last round)."""
        req.stop_len = None
        if plan.match_limit is not None:
            self._match_and_lock(req, plan.match_limit)
        elif self.faults.on("chunk_rematch_lock_leak") and self.tree is not None:
            # #1858: the continuing chunk re-matched its stashed prefix and locked it again, never unlocking.
            self.tree.inc_lock_ref(self.tree.match_prefix(req.fill_ids[: req.kv.cache_protected_len])[1])

    def _extend_result(self, req: Req, plan: ExtendPlan) -> None:
        """The result pass of one prefill entry: its tokens, status and the stash of what it computed."""
        req.fill_ids = req.tokens(max(plan.seq_len, len(req.fill_ids)))
        req.extend_range_end = plan.seq_len
        req.prompt_len = plan.prompt_len
        prefill_done = plan.seq_len == plan.prompt_len
        if self.faults.on("skip_continuing_chunk_count") and not plan.new_row:
            prefill_done = True  # sglang-jax #971: an uncounted continuing chunk's result takes the normal branch
        req.status = ReqStatus.DECODING if prefill_done else ReqStatus.RUNNING
        # After a middle chunk this is the chunk stash; after the last one, the prompt's insert (§5.1 step 4).
        self.cache.cache_unfinished_req(req)
        if self.faults.on("chunk_row_free_between_chunks") and not prefill_done:
            self.req_to_token_pool.free(req)  # before #17850 the row went back at the stash, retaken next chunk

    def _match_and_lock(self, req: Req, limit: int) -> None:
        """The admission's prefix match: `prefix_indices`, `last_node`, `cache_protected_len`, and the lock."""
        req.prefix_indices = torch.empty(0, dtype=torch.int64, device=self.config.device)
        req.last_node = None
        req.kv.cache_protected_len = 0
        if self.tree is None:
            return
        prefix, node = self.tree.match_prefix(req.tokens(limit))
        self.tree.inc_lock_ref(node)
        if self.faults.on("double_lock_on_chunk_retry"):
            self.tree.inc_lock_ref(node)  # #20476: a rejected attempt's lock was kept and taken again on retry
        req.prefix_indices, req.last_node = prefix, node
        req.kv.cache_protected_len = prefix.numel()

    def _peek_tokens(self, token_ids: list[int]) -> tuple[int, frozenset[int]]:
        """The length `match_prefix` would return and the slots of those tokens on unlocked nodes, read without
        splitting a node or touching access times, so that a refused admission leaves the tree as it was."""
        if self.tree is None:
            return 0, frozenset()
        return _peek_prefix(self.tree, token_ids)

    # -- what the scheduler glue asks --------------------------------------------------------------------

    def _view(self, entry: Req) -> RecordView:
        return self._record_view(entry)

    def _known_len(self, entry: Req) -> int:
        return len(entry.fill_ids)

    def _peek_match(self, entry: Req, limit: int) -> tuple[int, frozenset[int]]:
        return self._peek_tokens(entry.tokens(limit))

    def _free_row_count(self) -> int:
        return self.req_to_token_pool.available_size()

    def _free_slot_count(self) -> int:
        return self.allocator.available_size()

    def _evictable_slot_count(self) -> int:
        return self.cache.evictable_size()

    def _group_open(self) -> bool:
        return self.allocator.free_group is not None

    def _new_entry(self, rid: int, prompt_len: int | None, family: int, kind: int = KIND_NORMAL) -> Req:
        """A request of `kind` not yet admitted, its prompt tokens known (an open-ended prompt has none yet)."""
        if family < 0:
            raise Refused(f"family must be non-negative, got {family}")
        req = Req(rid, prompt_len=prompt_len, family=family, kind=kind)
        req.fill_ids = req.tokens(prompt_len or 0)
        req.origin_len = prompt_len or 0
        return req

    def _record_view(self, req: Req) -> RecordView:
        kv, node = req.kv, req.last_node
        # A lock is held on a node below a root; a handle on a root (of this tree or a reset one) locks nothing.
        fields = (
            kv.req_pool_idx,
            kv.cache_protected_len,
            kv.kv_committed_len,
            kv.kv_allocated_len,
            req.inflight_middle_chunks,
            req.status._value_,  # `.value`, without the enum property's lookup
            req.prefix_indices.numel(),
            isinstance(node, TreeNode) and node.parent is not None,
            req.extend_range_end,
            req.prompt_len,
        )
        return _VIEWS[fields]


def _row_slots(table: torch.Tensor, reqs: dict[int, Req]) -> dict[int, list[int]]:
    """Each holding record's row `[0, A)` of `table` (a copy of the row table), read in one transfer where the
    table is small (most pools the harness steps), else row by row."""
    rows_total = table.shape[0] - 1
    held = [
        (rid, req.kv.req_pool_idx, req.kv.kv_allocated_len)
        for rid, req in reqs.items()
        if req.kv.req_pool_idx is not None and 1 <= req.kv.req_pool_idx <= rows_total
    ]
    if table.numel() <= WHOLE_TABLE_LIMIT:
        rows = table.tolist()
        return {rid: rows[row][:allocated] for rid, row, allocated in held}
    return {rid: table[row, :allocated].tolist() for rid, row, allocated in held}


@functools.cache
def _empty_on(device: str) -> torch.Tensor:
    """One empty int64 tensor per device, shared by every snapshot (nothing writes into an empty tensor)."""
    return torch.empty(0, dtype=torch.int64, device=device)


# The record view of each tuple of field values, in `RecordView`'s order: one object serves every snapshot of a
# record that did not change.
_VIEWS = Interned(RecordView, limit=4096)


def _peek_prefix(tree: RadixCache, token_ids: list[int]) -> tuple[int, frozenset[int]]:
    """(matched length, slots of the matched path on unlocked nodes) of `token_ids` cut to whole pages."""
    ps = tree.page_size
    key = token_ids[: len(token_ids) - len(token_ids) % ps]
    node: TreeNode = tree.root
    matched, unlocked = 0, set[int]()
    while matched < len(key):
        child = node.children.get(tuple(key[matched : matched + ps]))
        if child is None:
            break
        common = 0
        for a, b in zip(child.key, key[matched:], strict=False):
            if a != b:
                break
            common += 1
        common -= common % ps  # a page matches only in full
        if child.lock_ref == 0:
            unlocked.update(child.value[:common].tolist())
        matched += common
        if common < len(child.key):
            break
        node = child
    return matched, frozenset(unlocked)


def _row_pool(config: PoolConfig, faults: FaultSet) -> ReqToTokenPool:
    if config.row_pool == "decode":
        return DecodeReqToTokenPool(config.rows, config.width, config.pre_alloc_size, config.device, faults)
    return ReqToTokenPool(config.rows, config.width, config.device, faults)


def _allocator(config: PoolConfig) -> Allocator:
    if config.page_size == 1:
        return TokenToKVPoolAllocator(config.tokens, config.device, config.need_sort)
    backend = config.kernel_backend
    assert backend in BACKENDS
    return PagedTokenToKVPoolAllocator(config.tokens, config.page_size, config.device, config.need_sort, backend)


def _share_tensor(table: torch.Tensor, copied: torch.Tensor, tensor: torch.Tensor, memo: dict[int, object]) -> object:
    """deepcopy's copier for tensors while `ReferencePool.clone` runs: a view of the row table becomes the same
    view of its copy; any other tensor is shared (the pool never writes one in place)."""
    if tensor._base is table:
        return memo.setdefault(id(tensor), copied.as_strided(tensor.size(), tensor.stride(), tensor.storage_offset()))
    return tensor


def _oom_cause(exc: OutOfMemory) -> Cause:
    return Cause.ALLOC_ROWS if exc.rows else Cause.ALLOC_SLOTS
