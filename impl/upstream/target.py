"""The upstream target: SGLang's own row pool, token allocator, prefix cache (the chunk cache or the radix tree)
and release path, driven as its scheduler drives them, behind `impl.target.Target`.

The adapter translates calls and observations; the pool behaviour is upstream's. Each extend runs upstream's
`Req.init_next_round_input` (with the tree: the prefix match) and the admission lock, then
`ScheduleBatch.prepare_for_extend` (row, slots, row write, record lengths) and its stash; each decode
`ScheduleBatch.prepare_for_decode`; each release `release_kv_cache`; eviction the tree's own `evict`, and, with
on-demand eviction, whatever allocation evicts through upstream's hooks. The negative steps call
`ReqToTokenPool.free` and `release_kv_cache` directly. The glue is what the scheduler does around those calls
(`impl.scheduler`: admission checks, the extend range), plus the sampled token, the finish reason, the result
pass's free group and the request status. An upstream assert on a call becomes `Refused`.
"""

from __future__ import annotations

import contextlib
import functools
import io
import logging
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from impl.fault_points import FaultPlan, FaultPoints, InjectedFailure, install
from impl.faults import NO_FAULTS, FaultSet
from impl.records import ReqStatus, output_token, prompt_token
from impl.scheduler import BatchPlan, ExtendPlan, SchedulerGlue
from impl.target import (
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
from impl.upstream import pd, pp_profile, spec, stops
from impl.upstream.dialects import Dialect, capabilities, load_dialect, paged_naive_path
from impl.upstream.scheduler_host import SchedulerHost
from properties.vocabulary import KIND_NORMAL, KIND_SKIP_INSERT


@contextlib.contextmanager
def quiet_stdout() -> Iterator[None]:
    """Standard output dropped for the block, Python's and the process's file descriptor 1 both: an out-of-memory
    refusal prints the tree, and from 0.5.21 the Rust tree core prints it straight to the descriptor, past
    `sys.stdout`. Where the descriptor cannot be duplicated (no descriptor 1), only Python's is redirected."""
    sys.stdout.flush()
    try:
        saved = os.dup(1)
    except OSError:
        saved = -1
    try:
        if saved >= 0:
            os.dup2(_devnull(), 1)
        with contextlib.redirect_stdout(io.StringIO()):
            yield
    finally:
        if saved >= 0:
            os.dup2(saved, 1)
            os.close(saved)


@functools.cache
def _devnull() -> int:
    """A descriptor on the null device, opened once per process (every upstream call silences its output)."""
    return os.open(os.devnull, os.O_WRONLY)


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
    # Finished in a result pass, it stays in the running batch (this, its batch) until the next filter: the
    # decode round's and the pause's (the two-phase finish). None once filtered, or never finished so.
    unfiltered: Any = None


def _unsupported(config: PoolConfig, faults: FaultSet) -> str | None:
    """Why the upstream target cannot build this pool, or None. Reads the installed sglang's capabilities (probed
    once per process, for the config's device) only once every other check passed; without sglang the check of
    its API is left to `load_dialect`."""
    checks = [
        (not faults.names, f"faults are not supported on the upstream target (asked for {', '.join(faults.sorted())})"),
        (
            config.device == "cpu" or (config.device == "cuda" and torch.cuda.is_available()),
            f"the upstream target runs on 'cpu', or on 'cuda' where a CUDA device is present; got {config.device!r}",
        ),
        (
            config.kernel_backend in KERNEL_BACKENDS,
            f"the upstream target has no {config.kernel_backend!r} kernel backend; use one of {KERNEL_BACKENDS}",
        ),
    ]
    problem = next((message for ok, message in checks if not ok), None)
    if problem or config.page_size == 1 or config.kernel_backend == "triton" or paged_naive_path(config.device):
        return problem
    # Last: `fuzz.targets.retarget` switches to Triton when this is the only problem.
    version = capabilities(config.device).version
    return f"sglang {version}'s paged allocator always launches its Triton kernels; use kernel_backend 'triton'"


def _logged(method: Callable[..., Any]) -> Callable[..., Any]:
    """Record each outermost call of an op (refused or not) so that `clone` can replay it on a fresh pool; an op
    that calls another (`reuse_released` runs an extend batch) is recorded once."""

    def call(self: SglangPool, *args: Any, **kwargs: Any) -> Any:
        if self._depth == 0:
            shot = self.fault_points.shot
            self._calls.append((method.__name__, args, kwargs, shot.plan if shot else None))
        self._depth += 1
        try:
            with spec.overrides(self.config):  # a speculative pool's every call sees the EAGLE config
                return method(self, *args, **kwargs)
        finally:
            self._depth -= 1

    call.__name__, call.__doc__ = method.__name__, method.__doc__
    return call


class SglangPool(SchedulerGlue[_Request]):
    """Upstream SGLang's `ReqToTokenPool` + `TokenToKVPoolAllocator` (page size 1) or
    `PagedTokenToKVPoolAllocator` + the chunk cache or radix tree of the installed version."""

    # The lockstep ops this target implements; configs it cannot build: `_unsupported`.
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
            "evict",
            "flush",
            "pd_prealloc",
            "offload_release",
            "group_begin",
            "group_end",
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
        self.dialect: Dialect = load_dialect(config.device)
        self.version = self.dialect.version
        # The allocation paths log their out-of-memory refusal as an error before they raise it; the refusal's
        # first line travels in the Refused reason, and the lockstep judges it.
        allocation_log = logging.getLogger("sglang.srt.mem_cache.allocation")
        if allocation_log.level != logging.CRITICAL:  # setLevel clears every logger's cache: 0.5 ms a pool
            allocation_log.setLevel(logging.CRITICAL)
        self.short_alloc_crashes = config.page_size > 1 and not self.dialect.paged_checks_before_kernel
        self.offload_frees = pd.offload_frees(self.version)
        if config.row_pool == "decode":
            self.req_to_token_pool = pd.new_decode_pool(config)
        else:
            self.req_to_token_pool = self.dialect.new_pool(config.rows, config.width)
        kernels = config.kernel_backend == "triton"
        self.allocator = self.dialect.new_allocator(config.tokens, config.need_sort, config.page_size, kernels)
        self.cache = self.dialect.new_cache(self.req_to_token_pool, self.allocator, config)
        self.evictions = self.dialect.watch_evictions(self.cache, self.allocator, config.evict_on_demand)
        self.host = SchedulerHost(self.dialect, self.req_to_token_pool, self.allocator, self.cache)
        self.fault_points = install(FaultPoints(), self.req_to_token_pool, self.allocator)
        self.reqs: dict[int, _Request] = {}
        # Each outermost call, with the fault plan armed for it, for `clone` to replay.
        self._calls: list[tuple[str, tuple[Any, ...], dict[str, Any], FaultPlan | None]] = []
        self._depth = 0

    # -- prefill ---------------------------------------------------------------------------------------------

    def admit(
        self, rid: int, extend_len: int, *, prompt_len: int | None = None, family: int = 0, kind: int = KIND_NORMAL
    ) -> int:
        """A new request's first extend; with `prompt_len` the whole prompt is known and the extend stops at it.
        A skip-insert `kind` is a request sglang bars from the tree: a PD bootstrap warm-up
        (`bootstrap_host=FAKE_BOOTSTRAP_HOST`, which sets `Req.skip_radix_cache_insert`)."""
        args = {"req": rid, "n": extend_len, "family": family, "kind": kind}
        return self.batch([("admit", args if prompt_len is None else {**args, "prompt": prompt_len})])[0]

    def extend(self, rid: int, extend_len: int) -> int:
        """The next extend: a chunk continuation keeps its row; a released request is re-admitted on a new one."""
        return self.batch([("extend", {"req": rid, "n": extend_len})])[0]

    # -- decode ----------------------------------------------------------------------------------------------

    def decode(self, rid: int) -> None:
        """One non-speculative decode step: upstream's `prepare_for_decode`, then the sampled token appended."""
        self.batch([("decode", {"req": rid})])

    # -- batches -----------------------------------------------------------------------------------------

    @_logged
    def batch(self, entries: list[tuple[str, dict[str, int]]], unchecked: bool = False) -> list[int]:
        """One scheduling round of up to `MAX_BATCH` requests, as the scheduler runs it: one `ScheduleBatch` of
        every admission and extend (`prepare_for_extend`: their rows, then all their slots), then a mixed batch's
        decodes merged into one running batch (`merge_batch`, `prepare_for_decode`), then the result pass's
        stash of each prefill entry in order. Returns each entry's row, in the order given. `unchecked` leaves
        the budget to upstream's allocation paths, whose out-of-memory RuntimeError is their refusal."""
        plan = self._plan_batch(entries, checked=not unchecked)
        if self.config.cache == "radix" and any(e.prompt_len is None for _, e, _ in plan.prefill):
            # Upstream matches the tokens a request has; an open-ended prompt has them only once extended.
            raise Refused("an open-ended prompt cannot be extended on the radix tree")
        extend_batch = self._prepare_prefill(plan)
        if plan.decode:
            self._decode_all(plan)
        if plan.prefill and not self._group_open():
            self._prefill_result(extend_batch, plan)  # upstream's result pass, in its own free group
        else:
            # Inside the harness's own open group (the scheduler never runs a pass inside one: the pass opens its
            # own): each prefill entry's stash, the pass's body for it.
            for index, (rid, entry, extend) in enumerate(plan.prefill):
                self._extend_result(entry, extend, self.dialect.split_batch(extend_batch, index))
                self.reqs[rid] = entry
        return [int(self.dialect.row(self._get(rid).req) or 0) for rid in plan.rids]

    @_logged
    def spec_prepare(self, rid: int, reserve: int) -> None:
        """Speculative prepare: `A = max(A, ceil_align(C + reserve))` through upstream's EAGLE prepare
        (`impl.upstream.spec`)."""
        spec.spec_prepare(self, rid, reserve)

    @_logged
    def spec_commit(self, rid: int, accepted: int) -> None:
        """Speculative verify result: `C += accepted`, the accepted tokens appended."""
        spec.spec_commit(self, rid, accepted)

    # -- release ---------------------------------------------------------------------------------------------

    @_logged
    def finish(self, rid: int) -> None:
        """The request reached its length cap: the result pass's finish check and finish release
        (`SchedulerHost.finish_check`) in the pass's free group."""
        entry = self._running(rid)
        if entry.status is ReqStatus.RUNNING and entry.prompt_len is not None:
            raise Refused(f"request {rid} is mid-prefill; only an abort ends it there")
        params = entry.req.sampling_params
        cap, params.max_new_tokens = params.max_new_tokens, len(entry.req.output_ids)
        try:
            self._finish_pass(entry)
        finally:
            params.max_new_tokens = cap

    @_logged
    def decode_finish(self, rid: int, by: int) -> None:
        """A decode whose sampled token ends the request: the stop `by` names is armed on the request
        (`impl.upstream.stops`) for one decode step, whose result pass (`process_batch_result_decode`) checks,
        finishes and releases it as upstream does."""
        check_finish_by(by)
        entry = self._ready_to_decode(rid)
        token = output_token(rid, self._view(entry).committed_len)
        with stops.armed(entry.req, by, token, len(entry.req.output_ids) + 1):
            self.decode(rid)  # a finish there is the result pass's (`_finished_in_pass`)

    @_logged
    def spec_finish(self, rid: int, accepted: int, stop: int, by: int) -> None:
        """A verified run of `accepted` tokens whose `stop`-th ends the request: the commit (`spec_commit`), then
        the result pass's body for the run (`update_finish_state(accepted)`, the finish release) with the stop
        armed (`impl.upstream.stops`); upstream's `finished_len` and `owned_kv_len()` decide what it keeps."""
        check_finish_by(by)
        if not 1 <= stop <= accepted:
            raise Refused(f"the stop at {stop} lies outside the {accepted} accepted tokens")
        entry = self._get(rid)
        start, outputs = self._view(entry).committed_len, len(entry.req.output_ids)
        with stops.armed(entry.req, by, output_token(rid, start + stop - 1), outputs + stop):
            spec.spec_commit(self, rid, accepted)
            self._result_body(entry, accepted)

    @_logged
    def pp_profile(self, quarter: int) -> None:
        """PP dynamic-chunk profiling by upstream's own code (`impl.upstream.pp_profile`) at a chunked prefill size
        of `4 * quarter`: its synthetic requests admitted and released by upstream over the pools."""
        self._check_profile(quarter, self._group_open())
        self._upstream(lambda: pp_profile.profile(self, 4 * quarter))

    @_logged
    def pp_release(self, rid: int) -> None:
        """PP-profiling release after PR #37167: `release_kv_cache` without insertion."""
        entry = self._running(rid)
        self._release(entry.req, insert=False, grouped=False)
        self._retire(entry)

    @_logged
    def pp_release_manual(self, rid: int) -> None:
        """PP-profiling release as hand-written before PR #37167 (the dialects give the exact steps)."""
        entry = self._running(rid)
        self._upstream(lambda: self.dialect.pp_release_manual(entry.req, self.cache))
        self._retire(entry)

    @_logged
    def retract(self, rid: int) -> None:
        """Retraction: the scheduler's `release_req` (release without insert, eviction for the requests still
        running, `reset_for_retract`); the request waits to be re-admitted with its outputs as prompt."""
        entry = self._running(rid)
        others = sum(1 for other, e in self.reqs.items() if other != rid and self._holds_live_row(e))
        self._upstream(
            lambda: self.dialect.retract(entry.req, self.req_to_token_pool, self.allocator, self.cache, others)
        )
        self._requeue(entry)

    @_logged
    def retract_decode(self) -> Retracted:
        """Upstream's `ScheduleBatch.retract_decode` on the running batch (every decoding request's own batch, in
        ascending id, merged as the scheduler's `merge_batch` builds it): the requests it retracted wait to be
        re-admitted with their outputs as prompt, the last one it aborted is finished."""
        decoding = sorted((rid, e) for rid, e in self.reqs.items() if e.status is ReqStatus.DECODING)
        if not decoding:
            raise Refused("no request is decoding")
        running = self.dialect.merge_batches([entry.batch for _, entry in decoding])
        answer: list[tuple[list[Any], list[Any]]] = []
        self._upstream(lambda: answer.append(self.dialect.retract_decode(running)))
        retracted, to_abort = answer[0]
        rid_of = {id(entry.req): rid for rid, entry in decoding}
        for req in retracted:
            self._requeue(self.reqs[rid_of[id(req)]])
        aborted = [rid_of[id(req)] for req in to_abort]
        if len(aborted) > 1:
            raise RuntimeError(f"retract_decode aborted {len(aborted)} requests; without PD it aborts one at most")
        for rid in aborted:
            self._retire(self.reqs[rid])
        return Retracted([rid_of[id(req)] for req in retracted], aborted[0] if aborted else None)

    @_logged
    def decode_round(self) -> Retracted:
        """The scheduler's decode round: upstream's `update_running_batch` on the running batch (every decoding
        request's own batch, in ascending id, merged), which filters it, checks the next decode's memory, and only
        where it does not fit retracts (`retract_decode`), re-queues the retracted and aborts the last one; then
        it prepares the decode of the rest, whose result pass (`process_batch_result_decode`) takes the fuzzer's
        tokens. Where each request ends is read off upstream (`_placed`)."""
        decoding = self._running_batch()
        committed = {rid: self._view(entry).committed_len for rid, entry in decoding}
        self._show(None)
        pop_order = [decoding[i][0] for i in reversed(self.dialect.retraction_order([e.req for _, e in decoding]))]
        finished = self._unfiltered()
        shown = sorted([*decoding, *finished])
        self.host.scheduler.running_batch = self.dialect.merge_batches([_batch_of(e) for _, e in shown])
        answer: list[Any] = []
        self._upstream(lambda: answer.append(self.host.update_running_batch()))
        kept, retracted = self._placed(decoding, finished, answer[0], pop_order)
        if kept:
            lengths = {rid: committed.get(rid, self._view(self.reqs[rid]).committed_len) for rid in kept}
            self._decode_result(answer[0], [(rid, self.reqs[rid], lengths[rid]) for rid in kept])
        return retracted

    def _unfiltered(self) -> list[tuple[int, _Request]]:
        """The requests that finished in a result pass since the last filter: still in the running batch."""
        return [(rid, e) for rid, e in self.reqs.items() if e.status is ReqStatus.FINISHED and e.unfiltered is not None]

    def _placed(
        self,
        decoding: list[tuple[int, _Request]],
        finished: list[tuple[int, _Request]],
        batch: Any,
        pop_order: list[int],
    ) -> tuple[list[int], Retracted]:
        """Where upstream's round left each request of `decoding`: the ones `batch` still holds (to decode), the
        ones in the waiting queue (retracted, in the order it queued them), the one it aborted (`to_finish` set, or
        finished). One it put nowhere is lost, never to run again: it counts as finished and is reported among
        the retracted (in upstream's own `pop_order`), which the model's waiting request shows as a mismatch. The
        `finished` ones the filter should have dropped: one it kept is decoded again, one it queued waits."""
        everyone = [*decoding, *finished]
        rid_of = {id(entry.req): rid for rid, entry in everyone}
        kept = [] if batch is None else [rid_of[id(req)] for req in batch.reqs]
        queued = [rid_of[id(req)] for req in self.host.scheduler.waiting_queue if id(req) in rid_of]
        aborted = [rid for rid, e in decoding if rid not in {*kept, *queued} and _aborted(e.req)]
        lost = [rid for rid in pop_order if rid not in {*kept, *queued, *aborted}]
        if len(aborted) > 1:
            raise RuntimeError(f"update_running_batch aborted {len(aborted)} requests; without PD it aborts one")
        for rid, entry in everyone:
            if rid in queued:
                self._requeue(entry)
            elif rid not in kept:
                self._retire(entry)
        return kept, Retracted([*queued, *lost], aborted[0] if aborted else None)

    @_logged
    def pause_retract(self) -> None:
        """A weight update's pause by upstream's own `pause_generation(mode="retract")` and `continue_generation`:
        the scheduler shown its running batch (every decoding request and those finished since the last filter,
        ascending id), its waiting queue and its chunked request, it retracts the live ones (`retract_all`) and
        re-queues them. Where each ends is read off upstream: still running or chunked (its status kept), queued
        (retracted), or nowhere (lost: it counts as finished, which the model's waiting request shows as a
        mismatch); a finished one it queued waits, which the model's finished request shows."""
        order = self._pause_order()
        waiting = [e.req for e in self.reqs.values() if e.status is ReqStatus.WAITING]
        chunked = [e.req for _, e in order if e.status is ReqStatus.RUNNING]
        finished = self._unfiltered()
        running = [e.req for _, e in sorted([*order, *finished]) if e.status is not ReqStatus.RUNNING]
        self.host.show(running, waiting, next(iter(chunked), None))
        self._upstream(self.host.pause_retract)
        s = self.host.scheduler
        kept = {id(req) for req in s.running_batch.reqs} | {id(s.chunked_req)}
        queued = {id(req) for req in s.waiting_queue}
        for _, entry in [*order, *finished]:
            if id(entry.req) in kept:
                continue
            if id(entry.req) in queued:
                self._requeue(entry)
            else:
                self._retire(entry)

    @_logged
    def queue(self, rid: int, prompt_len: int, family: int = 0, kind: int = KIND_NORMAL, priority: int = 0) -> None:
        """A new request in the waiting queue (an upstream `Req` holding nothing, of `priority`); a prefill round
        admits it, and may preempt running requests of a lower priority for it."""
        if priority < 0:
            raise Refused(f"priority must be non-negative, got {priority}")
        self._queued_entry(rid, prompt_len, family, kind).req.priority = priority

    @_logged
    def prefill_round(self) -> Round:
        """The prefill half of the scheduler's `get_next_batch_to_run` by upstream's own code: the scheduler shown
        its running batch (every decoding request and those a result pass finished and no filter dropped yet,
        merged as the scheduler merges them), its waiting queue and its chunked request, `get_new_batch_prefill`
        picks with its `PrefillAdder` (the chunked request first, then the queue, within its budgets, preempting
        for a higher priority), marks the chunked request's middle chunk, builds the batch and prepares its extend;
        the batch's result pass is `process_batch_result_prefill` (`_prefill_result`). What ran is read
        off upstream's batch: each request, where its extend started and ended, its row."""
        chunked = self._round_chunked()
        waiting = [(rid, e) for rid, e in self.reqs.items() if e.status is ReqStatus.WAITING]
        decoding = [(rid, e) for rid, e in self.reqs.items() if e.status is ReqStatus.DECODING]
        running = sorted([*decoding, *self._unfiltered()])  # finished in a result pass, not yet filtered: shown
        chunked_req = chunked[0][1].req if chunked else None
        self.host.show([], [e.req for _, e in waiting], chunked_req)
        if running:  # the running batch as the scheduler merged it, which a preemption filters
            self.host.scheduler.running_batch = self.dialect.merge_batches([_batch_of(e) for _, e in running])
        answer: list[Any] = []
        self._upstream(lambda: answer.append(self.host.prefill_round()))
        batch = answer[0]
        ran: list[tuple[int, RecordView]] = []
        if batch is not None and batch.reqs:
            rid_of = {id(entry.req): rid for rid, entry in self.reqs.items()}
            ran = [(rid_of[id(req)], self._view(self.reqs[rid_of[id(req)]])) for req in batch.reqs]
            plan = BatchPlan(
                [(rid, self.reqs[rid], self._round_extend(rid, view)) for rid, view in ran], [], [r for r, _ in ran]
            )
            self._prefill_result(batch, plan, marked=True)
        self._placed_after_round(waiting, {rid for rid, _ in ran})
        preempted = self._preempted(running)
        return Round(
            preempted, [Admitted(rid, view.prefix_len, view.extend_end, int(view.row or 0)) for rid, view in ran]
        )

    def _preempted(self, running: list[tuple[int, _Request]]) -> list[int]:
        """The running requests upstream's round preempted, read off its queues: each one it took out of the running
        batch and re-queued waits (in the order queued); one it dropped from the running batch without queueing it
        is lost (finished, which the model's decoding request shows); one it left in the running batch runs on,
        whatever else it did to it."""
        s = self.host.scheduler
        queued = [id(req) for req in s.waiting_queue]
        kept = {id(req) for req in s.running_batch.reqs}
        taken = [(rid, e) for rid, e in running if id(e.req) in queued and id(e.req) not in kept]
        preempted = sorted((queued.index(id(e.req)), rid) for rid, e in taken)
        for _, entry in running:
            if id(entry.req) in kept:
                continue  # still running (one upstream also queued is still decoding to the checks)
            if id(entry.req) in queued:
                self._requeue(entry)
            elif entry.status is ReqStatus.DECODING:
                self._retire(entry)
        return [rid for _, rid in preempted]

    def _placed_after_round(self, waiting: list[tuple[int, _Request]], ran: set[int]) -> None:
        """Where upstream's round left each request that waited before it, read off its waiting queue: one it ran
        and still queues waits (with the row it took, which the invariants see); one it neither ran nor queues is
        lost, never to run again (it counts as finished, which the model's waiting request shows)."""
        queued = {id(req) for req in self.host.scheduler.waiting_queue}
        for rid, entry in waiting:
            if rid in ran and id(entry.req) in queued:
                entry.status = ReqStatus.WAITING
            elif rid not in ran and id(entry.req) not in queued:
                self._retire(entry)

    def _round_extend(self, rid: int, view: RecordView) -> ExtendPlan:
        """The extend upstream's round planned for `rid`, as the glue would have written it: from its prefix to
        its extend's end, towards everything it knows (a queued or retracted request) or its prompt."""
        entry = self.reqs[rid]
        target = self._known_len(entry) if entry.status is ReqStatus.WAITING else entry.prompt_len
        return ExtendPlan(
            view.prefix_len, view.extend_end, target, None, frozenset(), entry.status is ReqStatus.WAITING
        )

    @_logged
    def abort(self, rid: int) -> None:
        """Abort, as the scheduler takes it where the request is: a waiting one leaves the queue without a
        release; one mid-prefill on a row takes the pending chunked abort (`prepare_abort`, `release_kv_cache`
        without insert); a decoding one finishes with `FINISH_ABORT` through the result pass's release."""
        entry = self._get(rid)
        if entry.status is ReqStatus.FINISHED:
            raise Refused(f"request {rid} already finished")
        self._show(entry)
        self._upstream(lambda: self.host.abort(rid))
        if entry.status is ReqStatus.DECODING:
            self._finish_pass(entry)  # the next result pass finds `to_finish` set
        elif entry.req in self.host.scheduler.waiting_queue:
            raise Refused(f"upstream's abort_request left request {rid} in the waiting queue")
        elif entry.status is ReqStatus.RUNNING and self.host.scheduler.chunked_req is entry.req:
            raise Refused(f"upstream's abort left request {rid} as the chunked request")
        else:
            self._retire(entry)

    @_logged
    def offload_release(self, rid: int, sentinel: int = 0) -> None:
        """The decode-offload release of a finished request, behind its raw-row guard (`impl.upstream.pd`)."""
        pd.offload_release(self, rid, sentinel)

    # -- pool maintenance --------------------------------------------------------------------------------

    @_logged
    def evict(self, num_tokens: int) -> int:
        """The tree's own eviction of `num_tokens` (`evict(EvictParams)`); the chunk cache evicts nothing."""
        if num_tokens < 0:
            raise Refused(f"cannot evict a negative number of tokens ({num_tokens})")
        return self.dialect.evict(self.cache, num_tokens)

    @_logged
    def group_begin(self) -> None:
        """The result pass opens the allocator's free group (`free_group_begin`)."""
        self._upstream(self.allocator.free_group_begin)

    @_logged
    def group_end(self) -> None:
        """The result pass ends: `free_group_end` gives the group's frees back."""
        self._upstream(self.allocator.free_group_end)

    @_logged
    def flush(self) -> None:
        """The scheduler's idle `flush_cache`: `tree_cache.reset()`, `req_to_token_pool.clear()`, the
        allocator's `clear()`; refused unless every request finished and holds no row (`is_fully_idle`)."""
        if self._group_open():
            raise Refused("flush runs between scheduling rounds; a result pass's free group is open")
        self._show(None)
        flushed = False

        def flush() -> None:
            nonlocal flushed
            flushed = self.host.flush_cache()

        self._upstream(flush)
        if not flushed:
            raise Refused(f"upstream flush_cache: not fully idle (requests {self._busy()} are in its queues)")

    @_logged
    def pd_prealloc(self, rid: int, fill_len: int, *, family: int = 0) -> int:
        """PD-decode pre-allocation through `DecodePreallocQueue._pre_alloc` (`impl.upstream.pd`)."""
        return pd.pd_prealloc(self, rid, fill_len, family)

    # -- calls the contract forbids (the harness's negative steps) ---------------------------------------

    @_logged
    def release_again(self, rid: int) -> None:
        """Call `release_kv_cache` directly, whatever the scheduler thinks of the request."""
        self._release(self._get(rid).req, insert=False, grouped=False)

    @_logged
    def free_row(self, rid: int) -> None:
        """Call `ReqToTokenPool.free` directly (a second free of a released record must be refused)."""
        req = self._get(rid).req
        self._upstream(lambda: self.req_to_token_pool.free(req))

    @_logged
    def reuse_released(self, rid: int, stale_row: int, extend_len: int) -> int:
        """A released record re-enters `alloc` still naming its old row, as a bypassed free leaves it."""
        entry = self._get(rid)
        if self.dialect.row(entry.req) is not None:
            raise Refused(f"request {rid} still holds a row; nothing stale to reuse")
        if not 1 <= stale_row <= self.config.rows:
            raise Refused(f"row {stale_row} is not a row of this pool")
        self.dialect.set_row(entry.req, stale_row)
        try:
            if entry.status is ReqStatus.DECODING:
                raise Refused(f"request {rid} is decoding; only a retraction returns it to prefill")
            return self.batch([("extend", {"req": rid, "n": extend_len})])[0]
        except Refused:
            self.dialect.set_row(entry.req, None)
            raise

    # -- observation ------------------------------------------------------------------------------------

    def take_evictions(self) -> list[Eviction]:
        """The on-demand evictions upstream made since the last take (the explicit `evict` step is not one)."""
        return [Eviction(asked, evicted) for asked, evicted in self.evictions.take()]

    def clone(self) -> SglangPool:
        """A fresh pool that has taken the same calls (sglang's objects cannot be deep-copied; the pool is
        deterministic, so a replay reaches the same state)."""
        clone = SglangPool(self.config)
        for name, args, kwargs, plan in self._calls:
            with contextlib.suppress(Refused), clone.fault_points.armed(plan):  # refused again, as it was
                getattr(clone, name)(*args, **kwargs)
        clone.take_evictions()
        return clone

    def snapshot(self) -> PoolSnapshot:
        pool = self.req_to_token_pool
        rows_total = pool.req_to_token.shape[0] - 1  # a decode pool's pre-allocation rows are rows too
        records = {rid: self._view(e) for rid, e in self.reqs.items()}
        row_slots = {
            rid: pool.req_to_token[view.row, : view.allocated_len].tolist()
            for rid, view in records.items()
            if view.row is not None and 1 <= view.row <= rows_total
        }
        tree = self.dialect.tree_view(self.cache)
        group_open, pending = self.dialect.free_group(self.allocator)
        return PoolSnapshot(
            rows_total=rows_total,
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
            speculative=self.config.speculative,
            num_pages=self.config.tokens // self.config.page_size,
            tree_slots=tree.slots,
            evictable_slots=tree.evictable_slots,
            evictable_recount=tree.evictable_recount,
            protected_recount=tree.protected_recount,
            tree_problem=tree.problem,
            allocator_problem=self.dialect.allocator_problem(self.allocator),
            group_open=group_open,
            pending_pages=pending,
            req_to_token=pool.req_to_token.clone(),
        )

    # -- what the scheduler glue asks --------------------------------------------------------------------

    def _view(self, entry: _Request) -> RecordView:
        return self.dialect.record_view(entry.req, self.cache, entry.status.value, entry.prompt_len)

    def _known_len(self, entry: _Request) -> int:
        return len(entry.req.origin_input_ids) + len(entry.req.output_ids)

    def _peek_match(self, entry: _Request, limit: int) -> tuple[int, frozenset[int]]:
        tokens = (list(entry.req.origin_input_ids) + list(entry.req.output_ids))[:limit]
        return self.dialect.peek(self.cache, tokens)

    def _free_row_count(self) -> int:
        return int(self.req_to_token_pool.available_size())

    def _free_slot_count(self) -> int:
        return int(self.allocator.available_size())

    def _evictable_slot_count(self) -> int:
        return int(self.cache.evictable_size())

    def _group_open(self) -> bool:
        return self.dialect.free_group(self.allocator)[0]

    def _new_entry(self, rid: int, prompt_len: int | None, family: int, kind: int = KIND_NORMAL) -> _Request:
        """An upstream `Req` not yet admitted, its prompt tokens known (an open-ended prompt has none yet)."""
        if family < 0:
            raise Refused(f"family must be non-negative, got {family}")
        # Past any length its row holds: no result pass finishes a request by length unless a step arms the cap (the
        # prefill pass's appended token included, `_prefill_result`). A known prompt leaves `width - prompt` outputs
        # at most (a retraction keeps them); one more is the pass's. The cap is also what the prefill adder
        # reserves for the request's decodes, so it is no larger than that.
        cap = self.config.width + 2 - (prompt_len or 0)
        req = self.dialect.new_req(rid, max_new_tokens=cap, skip_insert=kind == KIND_SKIP_INSERT)
        req.priority = 0  # what a priority-scheduling server gives a request that names none
        entry = _Request(req, prompt_len, family)
        entry.req.origin_input_ids.extend(prompt_token(family, p) for p in range(prompt_len or 0))
        return entry

    # -- internals --------------------------------------------------------------------------------------

    def _show(self, focus: _Request | None) -> None:
        """Show the scheduler host where every request is: decoding ones in the running batch, retracted ones in
        the waiting queue, and `focus` (else the first) of those mid-prefill as the chunked request, each with its
        row or without one (a request whose row was freed under it is still in upstream's queues)."""
        entries = list(self.reqs.values())
        running = [e.req for e in entries if e.status is ReqStatus.DECODING]
        waiting = [e.req for e in entries if e.status is ReqStatus.WAITING]
        chunked = [e.req for e in entries if e.status is ReqStatus.RUNNING]
        if focus is not None and focus.req in chunked:
            chunked.insert(0, focus.req)
        self.host.show(running, waiting, chunked[0] if chunked else None)

    def _finish_pass(self, entry: _Request) -> None:
        """The result pass's finish check and finish release for a request that samples nothing more; the request
        is finished where upstream says so."""
        self._result_body(entry, 0)
        if not entry.req.finished():
            raise Refused(f"upstream's finish check left request {entry.req.rid} unfinished")

    def _result_body(self, entry: _Request, accepted: int) -> None:
        """The result pass's body for one request whose step accepted `accepted` tokens, in the pass's free group
        (its own unless one is open): upstream's finish check and, if it finished, its release."""
        own_group = not self._group_open()
        if own_group:
            self.allocator.free_group_begin()
        try:
            self._upstream(lambda: self.host.finish_check(entry.req, entry.batch, accepted))
        finally:
            if own_group:
                self.allocator.free_group_end()
        if entry.req.finished():
            self._finished_in_pass(entry)

    def _holds_live_row(self, entry: _Request) -> bool:
        return self.dialect.row(entry.req) is not None and entry.status is not ReqStatus.FINISHED

    def _requeue(self, entry: _Request) -> None:
        """A retracted request waits to be re-admitted, its outputs now part of its known prompt."""
        if entry.prompt_len is not None:
            entry.prompt_len = self._known_len(entry)
        entry.status, entry.batch, entry.unfiltered = ReqStatus.WAITING, None, None

    def _finished_in_pass(self, entry: _Request) -> None:
        """A request a result pass finished: done, but in the running batch until the next filter."""
        batch = entry.batch
        self._retire(entry)
        entry.unfiltered = batch

    def _retire(self, entry: _Request) -> None:
        entry.status = ReqStatus.FINISHED
        entry.batch = entry.unfiltered = None

    def _upstream(self, call: Callable[[], object]) -> None:
        try:
            with quiet_stdout():  # an out-of-memory refusal prints the whole tree
                call()
        except AssertionError as exc:
            raise Refused(f"upstream assert: {exc}", Cause.UPSTREAM_ASSERT) from exc
        except InjectedFailure as exc:  # a raising fault point's failure, through upstream's handlers
            raise Refused(f"upstream raised {exc}", Cause.INJECTED) from exc
        except RuntimeError as exc:
            # alloc_req_slots / alloc_token_slots fail loud when a batch does not fit (allocation.py): that is
            # upstream's refusal; any other RuntimeError is a crash for the harness to report. A RuntimeError is
            # all upstream raises there, so its words are the only sign of which ran out.
            said = str(exc)
            if "out of memory" not in said.lower():
                raise
            cause = Cause.ALLOC_ROWS if "alloc_req_slots" in said else Cause.ALLOC_SLOTS
            raise Refused(f"upstream out of memory: {said.splitlines()[0]}", cause) from exc

    def _release(self, req: Any, insert: bool, grouped: bool) -> None:
        """`release_kv_cache`, inside a free group where it runs in a result-processing pass, as the scheduler (in
        the pass's group if one is open, else in its own)."""
        own_group = grouped and not self._group_open()
        if own_group:
            self.allocator.free_group_begin()
        try:
            self._upstream(lambda: self.dialect.release(req, self.cache, insert))
        finally:
            if own_group:
                self.allocator.free_group_end()

    def _prepare_prefill(self, plan: BatchPlan[_Request]) -> Any:
        """The prompts the extends need, the scheduler's round input and extend range for each, then upstream's
        batch (None without prefill entries); refused by upstream, every entry's glue goes back."""
        if not plan.prefill:
            return None
        restores = [self.dialect.save_request(entry.req, self.cache) for _, entry, _ in plan.prefill]
        try:
            for _, entry, extend in plan.prefill:
                self._open_extend(entry, extend)
            reqs = [entry.req for _, entry, _ in plan.prefill]
            batch = self.dialect.new_batch(reqs, self.req_to_token_pool, self.allocator, self.cache)
            self._upstream(batch.prepare_for_extend)
        except Refused:
            for restore in restores:
                restore()  # upstream refused before it allocated; the glue's writes and locks go back too
            raise
        return batch

    def _open_extend(self, entry: _Request, plan: ExtendPlan) -> None:
        req = entry.req
        if plan.prompt_len is None:
            start = len(req.origin_input_ids)
            grow = max(plan.seq_len - start - len(req.output_ids), 0)
            req.origin_input_ids.extend(prompt_token(entry.family, p) for p in range(start, start + grow))
        if entry.status is ReqStatus.FINISHED:
            # Re-admitted: its finish state as a new `Req` has it (upstream's stash refuses a finished request,
            # and a stale `finished_len` would cap what the next release frees); it left the running batch.
            req.finished_reason = req.finished_len = req.to_finish = None
            entry.unfiltered = None
        self.dialect.open_extend(req, self.cache, plan.match_limit is not None, plan.seq_len)

    def _decode_all(self, plan: BatchPlan[_Request]) -> None:
        """The decode entries as one running batch: merged from each request's own, decoded, split back."""
        running = self.dialect.merge_batches([entry.batch for _, entry, _ in plan.decode])
        self._upstream(running.prepare_for_decode)
        self._decode_result(running, [(rid, entry, view.committed_len) for rid, entry, view in plan.decode])

    def _decode_result(self, running: Any, decoded: list[tuple[int, _Request, int]]) -> None:
        """The result pass of a prepared decode batch, `decoded` its requests in order (each with its committed
        length before the step), then each request's own batch split back and its status as upstream left it."""
        tokens = [output_token(rid, committed) for rid, _, committed in decoded]
        if self._group_open():
            # The harness's own open group (the scheduler never decodes inside one, and its result pass opens its
            # own): the tokens appended as sampled, then each request's body of that pass (`finish_check`).
            for (_, entry, _), token in zip(decoded, tokens, strict=True):
                entry.req.output_ids.append(token)
                self._upstream(functools.partial(self.host.finish_check, entry.req, running, 1))
        else:
            self._upstream(lambda: self.host.decode_result(running, tokens))
        for index, (_, entry, _) in enumerate(decoded):
            entry.batch = self.dialect.split_batch(running, index)
            entry.status = ReqStatus.DECODING
            if entry.req.finished():
                self._finished_in_pass(entry)

    def _prefill_result(self, batch: Any, plan: BatchPlan[_Request], marked: bool = False) -> None:
        """`process_batch_result_prefill` over the prefill entries, the model worker having sampled each one's next
        token; an entry whose extend ends short of its prompt is a middle chunk (`inflight_middle_chunks`, as the
        scheduler marks its chunked request when it plans the batch), stashed by `stash_chunked_request` as the
        next round's `get_next_batch_to_run` does. The pass appends a finished prefill's first sampled token to
        `output_ids`; the harness's outputs carry one token per KV position, and that token's KV is the next
        decode's, which appends it: the token is taken back off after the pass."""
        entries = plan.prefill
        middle = [extend.seq_len != extend.prompt_len for _, _, extend in entries]
        outputs = [len(entry.req.output_ids) for _, entry, _ in entries]
        for (_, entry, _), chunk in zip(entries, middle, strict=True):
            entry.req.inflight_middle_chunks += chunk and not marked
        tokens = [output_token(rid, extend.seq_len) for rid, _, extend in entries]
        self._upstream(functools.partial(self.host.prefill_result, batch, tokens))
        for index, ((rid, entry, extend), chunk, before) in enumerate(zip(entries, middle, outputs, strict=True)):
            req = entry.req
            if chunk:
                self._upstream(functools.partial(self.host.stash_chunked, req))
            elif len(req.output_ids) == before + 1 and not req.finished():
                req.output_ids.pop()
            entry.batch, entry.prompt_len = self.dialect.split_batch(batch, index), extend.prompt_len
            entry.status = ReqStatus.RUNNING if chunk else ReqStatus.DECODING
            self.reqs[rid] = entry

    def _extend_result(self, entry: _Request, plan: ExtendPlan, batch: Any) -> None:
        """The result pass of one prefill entry: the stash, its status, and its own batch for the next decode."""
        self.dialect.stash(entry.req, self.cache)
        entry.batch, entry.prompt_len = batch, plan.prompt_len
        entry.status = ReqStatus.DECODING if plan.seq_len == plan.prompt_len else ReqStatus.RUNNING


def _aborted(req: Any) -> bool:
    """Whether upstream ended `req`: finished, or marked to finish (an abort the next result pass would report)."""
    return bool(req.finished() or req.to_finish is not None)


def _batch_of(entry: _Request) -> Any:
    """The batch a request sits in within the running batch: its own, or, finished and not yet filtered, the one
    it finished in."""
    return entry.batch if entry.status is not ReqStatus.FINISHED else entry.unfiltered
