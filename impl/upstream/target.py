"""The upstream target: SGLang's own row pool, token allocator, chunk cache and release path, driven as its
scheduler drives them, behind the same interface as `impl.engine.ReferencePool`.

The adapter translates calls and observations; the pool behaviour is upstream's. Each extend runs upstream's
`Req.init_next_round_input` and `ScheduleBatch.prepare_for_extend` (row, slots, row write, record lengths)
and its stash, each decode `ScheduleBatch.prepare_for_decode`, each release `release_kv_cache`, and the
negative steps call `ReqToTokenPool.free` and `release_kv_cache` directly. The glue is what the scheduler does
around those calls, worked out as the reference does it: admission checks (capacity, row width, prompt end),
the extend range, the sampled token, the finish reason, the result pass's free group and the request status.
An upstream assert on a call becomes `Refused`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from impl.allocation import tokens_needed
from impl.engine import PoolConfig, PoolSnapshot, Refused
from impl.faults import NO_FAULTS, FaultSet
from impl.records import ReqStatus, output_token, prompt_token
from impl.upstream.dialects import PAGED_NAIVE_PATH, Dialect, installed_version_or_none, load_dialect

# The upstream kernel behind each `PoolConfig.kernel_backend` the target can honour: the paged allocator's
# naive torch path or its Triton kernels (interpreted on CPU). The reference's pure-Python oracle has no
# upstream counterpart.
KERNEL_BACKENDS = ("torch", "triton")


@dataclass
class _Request:
    """An upstream `Req` with the scheduler state the adapter keeps for it."""

    req: Any
    prompt_len: int | None
    family: int
    status: ReqStatus = ReqStatus.WAITING
    batch: Any = None  # the ScheduleBatch of its last extend or decode, which the next decode continues


@dataclass(frozen=True)
class _Plan:
    """One extend, worked out before anything changes: positions `[start, seq_len)`, towards `prompt_len`;
    `rematch` says the prefix is matched afresh (a new or released request), which takes a new row."""

    start: int
    seq_len: int
    prompt_len: int | None
    rematch: bool


def _unsupported(config: PoolConfig, faults: FaultSet) -> str | None:
    """Why the upstream target cannot build this pool, or None. Reads the installed sglang version from package
    metadata only (no import); without sglang the version-specific check is left to `load_dialect`."""
    version = installed_version_or_none()
    naive = PAGED_NAIVE_PATH.get(version or "", True)
    checks = [
        (not faults.names, f"faults are not supported on the upstream target (asked for {', '.join(faults.sorted())})"),
        (config.device == "cpu", f"the upstream target runs on 'cpu' only, got {config.device!r}"),
        (
            config.kernel_backend in KERNEL_BACKENDS,
            f"the upstream target has no {config.kernel_backend!r} kernel backend; use one of {KERNEL_BACKENDS}",
        ),
        (config.cache == "chunk", f"the upstream target drives the chunk cache only, got {config.cache!r}"),
        (not config.speculative, "the upstream target does not drive speculative decoding"),
        (config.row_pool == "req", f"the upstream target drives ReqToTokenPool only, got {config.row_pool!r}"),
        # Last: `fuzz.lockstep.retarget` switches to Triton when this is the only problem.
        (
            config.page_size == 1 or config.kernel_backend == "triton" or naive,
            f"sglang {version}'s paged allocator always launches its Triton kernels; use kernel_backend 'triton'",
        ),
    ]
    return next((message for ok, message in checks if not ok), None)


class SglangPool:
    """Upstream SGLang's `ReqToTokenPool` + `TokenToKVPoolAllocator` (page size 1) or
    `PagedTokenToKVPoolAllocator` + chunk cache, for the installed version."""

    # The lockstep ops this target implements (`fuzz.lockstep` names); configs it cannot build: `_unsupported`.
    OPS: frozenset[str] = frozenset(
        {
            "admit",
            "extend",
            "decode",
            "finish",
            "pp_release",
            "pp_release_manual",
            "retract",
            "abort",
            "flush",
            "reuse_released",
            "release_again",
            "free_row",
        }
    )

    def __init__(self, config: PoolConfig, faults: FaultSet = NO_FAULTS):
        problem = _unsupported(config, faults)
        if problem:
            raise ValueError(problem)
        self.config = config
        self.dialect: Dialect = load_dialect()
        self.version = self.dialect.version
        self.req_to_token_pool = self.dialect.new_pool(config.rows, config.width)
        kernels = config.kernel_backend == "triton"
        self.allocator = self.dialect.new_allocator(config.tokens, config.need_sort, config.page_size, kernels)
        self.cache = self.dialect.new_cache(self.req_to_token_pool, self.allocator, config.page_size)
        self.reqs: dict[int, _Request] = {}

    # -- prefill ---------------------------------------------------------------------------------------------

    def admit(self, rid: int, extend_len: int, *, prompt_len: int | None = None, family: int = 0) -> int:
        """A new request's first extend; with `prompt_len` the whole prompt is known and the extend stops at it."""
        if rid in self.reqs:
            raise Refused(f"request {rid} already exists")
        if prompt_len is not None and not 1 <= prompt_len <= self.config.width:
            raise Refused(f"prompt length {prompt_len} is not in [1, row width {self.config.width}]")
        entry = self._new_request(rid, prompt_len, family)
        row = self._extend(entry, extend_len)
        self.reqs[rid] = entry
        return row

    def extend(self, rid: int, extend_len: int) -> int:
        """The next extend: a chunk continuation keeps its row; a released request is re-admitted on a new one."""
        entry = self._get(rid)
        if entry.status is ReqStatus.DECODING:
            raise Refused(f"request {rid} is decoding; only a retraction returns it to prefill")
        return self._extend(entry, extend_len)

    # -- decode ----------------------------------------------------------------------------------------------

    def decode(self, rid: int) -> None:
        """One non-speculative decode step: upstream's `prepare_for_decode`, then the sampled token appended."""
        entry = self._ready_to_decode(rid)
        view = self.dialect.record_view(entry.req, entry.status.value, entry.prompt_len)
        if view.committed_len != view.allocated_len:
            raise Refused(f"request {rid} has draft slots [C, A); a speculative commit consumes them")
        if view.committed_len + 1 > self.config.width:
            raise Refused(f"request {rid} would decode past the row width {self.config.width}")
        self._check_slots(view.committed_len, view.committed_len + 1)
        self._upstream(entry.batch.prepare_for_decode)
        entry.req.output_ids.append(output_token(rid, view.committed_len))
        entry.status = ReqStatus.DECODING

    # -- release ---------------------------------------------------------------------------------------------

    def finish(self, rid: int) -> None:
        """The request finished: its finish reason, then `release_kv_cache` with insertion in a free group."""
        entry = self._running(rid)
        if entry.status is ReqStatus.RUNNING and entry.prompt_len is not None:
            raise Refused(f"request {rid} is mid-prefill; only an abort ends it there")
        self.dialect.mark_finished(entry.req)
        try:
            self._release(entry.req, insert=True, grouped=True)
        except Refused:
            entry.req.finished_reason = None
            raise
        self._retire(entry)

    def pp_release(self, rid: int) -> None:
        """PP-profiling release after PR #37167: `release_kv_cache` without insertion."""
        entry = self._running(rid)
        self._release(entry.req, insert=False, grouped=False)
        self._retire(entry)

    def pp_release_manual(self, rid: int) -> None:
        """PP-profiling release as hand-written before PR #37167 (the dialects give the exact steps)."""
        entry = self._running(rid)
        self._upstream(lambda: self.dialect.pp_release_manual(entry.req, self.cache))
        self._retire(entry)

    def retract(self, rid: int) -> None:
        """Retraction: the scheduler's `release_req` (release without insert, eviction for the requests still
        running, `reset_for_retract`); the request waits to be re-admitted with its outputs as prompt."""
        entry = self._running(rid)
        others = sum(1 for other, e in self.reqs.items() if other != rid and self._holds_live_row(e))
        self._upstream(
            lambda: self.dialect.retract(entry.req, self.req_to_token_pool, self.allocator, self.cache, others)
        )
        if entry.prompt_len is not None:
            entry.prompt_len = len(entry.req.origin_input_ids) + len(entry.req.output_ids)
        entry.status, entry.batch = ReqStatus.WAITING, None

    def abort(self, rid: int) -> None:
        """Abort, as the scheduler takes it where the request is: a waiting one leaves the queue without a
        release; one mid-prefill on a row takes the pending chunked abort (`prepare_abort`, `release_kv_cache`
        without insert); a decoding one finishes with `FINISH_ABORT` through the result pass's release."""
        entry = self._get(rid)
        if entry.status is ReqStatus.FINISHED:
            raise Refused(f"request {rid} already finished")
        reason = entry.req.finished_reason
        self.dialect.mark_aborted(entry.req)
        try:
            if entry.status is ReqStatus.RUNNING and self.dialect.row(entry.req) is not None:
                self._release(entry.req, insert=False, grouped=False)
            elif entry.status is ReqStatus.DECODING:
                self._release(entry.req, insert=True, grouped=True)
        except Refused:
            entry.req.finished_reason = reason
            raise
        self._retire(entry)

    # -- pool maintenance --------------------------------------------------------------------------------

    def flush(self) -> None:
        """The scheduler's idle `flush_cache`: `tree_cache.reset()`, `req_to_token_pool.clear()`, the
        allocator's `clear()`; refused unless every request finished and holds no row (`is_fully_idle`)."""
        busy = sorted(rid for rid, e in self.reqs.items() if e.status is not ReqStatus.FINISHED or self._holds(e))
        if busy:
            raise Refused(f"flush needs an idle pool; requests {busy} are waiting, running or hold a row")
        self.dialect.flush(self.req_to_token_pool, self.allocator, self.cache)

    # -- calls the contract forbids (the harness's negative steps) ---------------------------------------

    def release_again(self, rid: int) -> None:
        """Call `release_kv_cache` directly, whatever the scheduler thinks of the request."""
        self._release(self._get(rid).req, insert=False, grouped=False)

    def free_row(self, rid: int) -> None:
        """Call `ReqToTokenPool.free` directly (a second free of a released record must be refused)."""
        req = self._get(rid).req
        self._upstream(lambda: self.req_to_token_pool.free(req))

    def reuse_released(self, rid: int, stale_row: int, extend_len: int) -> int:
        """A released record re-enters `alloc` still naming its old row, as a bypassed free leaves it."""
        req = self._get(rid).req
        if self.dialect.row(req) is not None:
            raise Refused(f"request {rid} still holds a row; nothing stale to reuse")
        if not 1 <= stale_row <= self.config.rows:
            raise Refused(f"row {stale_row} is not a row of this pool")
        self.dialect.set_row(req, stale_row)
        try:
            return self.extend(rid, extend_len)
        except Refused:
            self.dialect.set_row(req, None)
            raise

    # -- observation ------------------------------------------------------------------------------------

    def admission_prefix(self, rid: int, extend_len: int, *, prompt_len: int | None = None, family: int = 0) -> int:
        """The position the next `admit` (unknown `rid`) or `extend` would start computing at. Read-only;
        refused as the call would be for its lengths."""
        entry = self.reqs.get(rid) or self._new_request(rid, prompt_len, family)
        return self._plan_extend(entry, extend_len).start

    def peek_prefix(self, family: int, prompt_len: int) -> int:
        """The prefix an admission of a `prompt_len`-token prompt of `family` would match now: none, since the
        chunk cache (a disabled tree) matches nothing."""
        return 0

    def peek_prefix_of(self, rid: int, extend_len: int = 1) -> int:
        """Where `extend(rid, extend_len)` would start computing: a continuation's stashed prefix, or 0 for a
        re-admission (the chunk cache matches nothing). Read-only."""
        entry = self._get(rid)
        view = self.dialect.record_view(entry.req, entry.status.value, entry.prompt_len)
        return view.prefix_len if view.row is not None or view.allocated_len > 0 else 0

    def snapshot(self) -> PoolSnapshot:
        pool = self.req_to_token_pool
        records = {rid: self.dialect.record_view(e.req, e.status.value, e.prompt_len) for rid, e in self.reqs.items()}
        row_slots = {
            rid: pool.req_to_token[view.row, : view.allocated_len].tolist()
            for rid, view in records.items()
            if view.row is not None and 1 <= view.row <= pool.size
        }
        return PoolSnapshot(
            rows_total=pool.size,
            width=pool.max_context_len,
            tokens_total=self.allocator.size,
            page_size=self.allocator.page_size,
            free_rows=list(pool.free_slots),
            row_generation=pool.req_generation.tolist(),
            records=records,
            row_slots=row_slots,
            free_slots=self.allocator.free_pages.clone(),
            release_slots=self.dialect.release_slots(self.allocator),
            evictable_size=self.cache.evictable_size(),
            protected_size=self.cache.protected_size(),
            cache=self.config.cache,
            num_pages=self.config.tokens // self.config.page_size,
            tree_slots=torch.empty(0, dtype=torch.int64),
            req_to_token=pool.req_to_token.clone(),
        )

    # -- internals --------------------------------------------------------------------------------------

    def _get(self, rid: int) -> _Request:
        entry = self.reqs.get(rid)
        if entry is None:
            raise Refused(f"no request {rid}")
        return entry

    def _running(self, rid: int) -> _Request:
        entry = self._get(rid)
        if entry.status not in (ReqStatus.RUNNING, ReqStatus.DECODING):
            raise Refused(f"request {rid} is {entry.status.value}, not running")
        return entry

    def _ready_to_decode(self, rid: int) -> _Request:
        """A running request on a row whose prompt is all in KV (an open-ended prompt ends here)."""
        entry = self._running(rid)
        if self.dialect.row(entry.req) is None:
            raise Refused(f"request {rid} holds no row to decode into")
        committed_len = self.dialect.committed_len(entry.req)
        if entry.prompt_len is not None and committed_len < entry.prompt_len:
            raise Refused(f"request {rid} is mid-prefill ({committed_len} of {entry.prompt_len} tokens)")
        return entry

    def _new_request(self, rid: int, prompt_len: int | None, family: int) -> _Request:
        """An upstream `Req` not yet admitted, its prompt tokens known (an open-ended prompt has none yet)."""
        if family < 0:
            raise Refused(f"family must be non-negative, got {family}")
        entry = _Request(self.dialect.new_req(rid, max_new_tokens=self.config.width), prompt_len, family)
        entry.req.origin_input_ids.extend(prompt_token(family, p) for p in range(prompt_len or 0))
        return entry

    def _holds(self, entry: _Request) -> bool:
        return self.dialect.row(entry.req) is not None

    def _holds_live_row(self, entry: _Request) -> bool:
        return self._holds(entry) and entry.status is not ReqStatus.FINISHED

    def _check_slots(self, start: int, end: int) -> None:
        """Refuse unless the allocator can hand out the slots of positions `[start, end)` (whole new pages)."""
        need, free = tokens_needed(self.config.page_size, start, end), self.allocator.available_size()
        if need > free:
            raise Refused(f"{need} slots asked for, {free} free and 0 evictable")

    def _retire(self, entry: _Request) -> None:
        entry.status = ReqStatus.FINISHED
        entry.batch = None

    def _upstream(self, call: Callable[[], object]) -> None:
        try:
            call()
        except AssertionError as exc:
            raise Refused(f"upstream assert: {exc}") from exc

    def _release(self, req: Any, insert: bool, grouped: bool) -> None:
        """`release_kv_cache`, inside a free group where it runs in a result-processing pass, as the scheduler."""
        if grouped:
            self.allocator.free_group_begin()
        try:
            self._upstream(lambda: self.dialect.release(req, self.cache, insert))
        finally:
            if grouped:
                self.allocator.free_group_end()

    def _extend(self, entry: _Request, extend_len: int) -> int:
        """Plan the extend (refusing what the scheduler would not schedule), then run upstream's extend path."""
        plan = self._plan_extend(entry, extend_len)
        req = entry.req
        restore = self.dialect.save_request(req)
        try:
            batch = self._prepare_for_extend(entry, plan)
        except Refused:
            restore()  # upstream refused before it allocated; the glue's writes go back too
            raise
        self.dialect.stash(req, self.cache)
        entry.batch, entry.prompt_len = batch, plan.prompt_len
        entry.status = ReqStatus.DECODING if plan.seq_len == plan.prompt_len else ReqStatus.RUNNING
        row = self.dialect.row(req)
        assert row is not None, "prepare_for_extend returned without a row"
        return row

    def _prepare_for_extend(self, entry: _Request, plan: _Plan) -> Any:
        """The prompt the extend needs, the scheduler's round input and extend range, then upstream's batch."""
        req = entry.req
        if plan.prompt_len is None:
            start = len(req.origin_input_ids)
            grow = max(plan.seq_len - start - len(req.output_ids), 0)
            req.origin_input_ids.extend(prompt_token(entry.family, p) for p in range(start, start + grow))
        if entry.status is ReqStatus.FINISHED:
            req.finished_reason = None  # re-admitted; upstream's stash refuses a finished request
        self.dialect.open_extend(req, self.cache, plan.rematch, plan.seq_len)
        batch = self.dialect.new_batch(req, self.req_to_token_pool, self.allocator, self.cache)
        self._upstream(batch.prepare_for_extend)
        return batch

    def _plan_extend(self, entry: _Request, extend_len: int) -> _Plan:
        """Where the extend starts and ends, as the reference plans it; refuses what the scheduler would not
        schedule (row width, prompt end, free rows and slots)."""
        width, req = self.config.width, entry.req
        if not 1 <= extend_len <= width:
            raise Refused(f"extend length {extend_len} is not in [1, row width {width}]")
        view = self.dialect.record_view(req, entry.status.value, entry.prompt_len)
        target, rematch = entry.prompt_len, view.row is None and view.allocated_len == 0
        if rematch and target is not None:
            target = len(req.origin_input_ids) + len(req.output_ids)  # a re-admission recomputes its outputs
        start = 0 if rematch else view.prefix_len  # the chunk cache matches nothing on admission
        if target is not None and start >= target:
            raise Refused(f"request {req.rid} has its whole prompt in KV; it decodes next")
        seq_len = start + extend_len if target is None else min(start + extend_len, target)
        if seq_len > width:
            raise Refused(f"request {req.rid} would extend past the row width {width}")
        if view.row is None and self.req_to_token_pool.available_size() == 0:
            raise Refused("no free row")
        self._check_slots(start, seq_len)
        return _Plan(start, seq_len, target, rematch)
