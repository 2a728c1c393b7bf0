"""The scheduler glue both targets share: request lookup, status checks, extend planning and capacity checks.

A target keeps one entry per request (its own request object with `status`, `prompt_len` and `family`) and
answers a few questions about it (`_view`, `_known_len`, `_peek_match`) and about its pool (free rows, free
and evictable slots). The glue decides what the scheduler would schedule from those answers alone, so the
reference pool and the upstream adapter refuse exactly the same calls before their pools are touched. Each
check names where upstream's scheduler makes it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from impl.records import ReqStatus
from impl.target import Cause, PoolConfig, RecordView, Refused
from properties.vocabulary import (
    BATCH_OPS,
    KIND_NAMES,
    KIND_NORMAL,
    MAX_BATCH,
    PROFILE_TOKENS_PER_QUARTER,
    ceil_align,
    num_new_pages,
)


class Entry(Protocol):
    """What the glue reads of a target's request object."""

    status: ReqStatus
    prompt_len: int | None
    family: int


E = TypeVar("E", bound=Entry)


BatchEntry = tuple[str, dict[str, int]]


@dataclass(frozen=True)
class BatchPlan(Generic[E]):
    """One batch, planned: its prefill entries `(rid, entry, plan)` and decode entries `(rid, entry, view)`, in
    the order given (a new request's entry is not registered yet); `rids` in the batch's own order."""

    prefill: list[tuple[int, E, ExtendPlan]]
    decode: list[tuple[int, E, RecordView]]
    rids: list[int]


@dataclass(frozen=True)
class ExtendPlan:
    """One extend, worked out before anything changes: positions `[start, seq_len)` are computed, towards
    `prompt_len`. `match_limit` is set for an admission (a fresh prefix match capped there); `locking` holds
    the evictable slots that match will lock; `new_row` says whether a row is taken.
    """

    start: int
    seq_len: int
    prompt_len: int | None
    match_limit: int | None
    locking: frozenset[int]
    new_row: bool


def tokens_needed(page_size: int, start: int, end: int) -> int:
    """Slots the allocator hands out for positions `[start, end)`: whole pages past the page `start` is on."""
    return num_new_pages(start, end, page_size) * page_size


def _locking(plan: BatchPlan[Any]) -> frozenset[int]:
    """The evictable slots the batch's matches lock, each once."""
    return frozenset[int]().union(*(p.locking for _, _, p in plan.prefill))


def match_limit(width: int, prompt_len: int | None, extend_len: int) -> int:
    """How far an admission may match: one prompt token short of the prompt's end, so one is computed
    (`Req._compute_max_prefix_len`); on an open-ended prompt, room for the chunk in the row."""
    limit = width - extend_len if prompt_len is None else prompt_len - 1
    return max(limit, 0)


class SchedulerGlue(ABC, Generic[E]):
    """The checks a scheduler makes around the pool calls; subclasses answer the questions below."""

    config: PoolConfig
    reqs: dict[int, E]

    # -- what a target answers ------------------------------------------------------------------------------

    @abstractmethod
    def _view(self, entry: E) -> RecordView:
        """The entry's record, prefix and status as plain values."""

    @abstractmethod
    def _known_len(self, entry: E) -> int:
        """Tokens the request knows: its prompt and its outputs (what a re-admission recomputes)."""

    @abstractmethod
    def _peek_match(self, entry: E, limit: int) -> tuple[int, frozenset[int]]:
        """(length, slots on unlocked nodes of the path) of the prefix a fresh match of the entry's first
        `limit` tokens would find now, read without changing the tree."""

    @abstractmethod
    def _new_entry(self, rid: int, prompt_len: int | None, family: int, kind: int = KIND_NORMAL) -> E:
        """A request of `kind` not yet admitted, its prompt tokens known (an open-ended prompt has none yet)."""

    @abstractmethod
    def _free_row_count(self) -> int:
        """Rows the row pool can hand out now (`req_to_token_pool.available_size()`)."""

    @abstractmethod
    def _free_slot_count(self) -> int:
        """Slots the allocator can hand out now (`available_size()`)."""

    @abstractmethod
    def _evictable_slot_count(self) -> int:
        """Slots the tree could free by eviction now (`evictable_size()`)."""

    @abstractmethod
    def _group_open(self) -> bool:
        """Whether the allocator's free group is open (a result pass under way)."""

    # -- lookup and status ---------------------------------------------------------------------------------

    def _get(self, rid: int) -> E:
        entry = self.reqs.get(rid)
        if entry is None:
            raise Refused(f"no request {rid}")
        return entry

    def _running(self, rid: int) -> E:
        entry = self._get(rid)
        if entry.status not in (ReqStatus.RUNNING, ReqStatus.DECODING):
            raise Refused(f"request {rid} is {entry.status.value}, not running")
        return entry

    def _ready_to_decode(self, rid: int) -> E:
        """A running request on a row whose prompt is all in KV (an open-ended prompt ends here)."""
        entry = self._running(rid)
        view = self._view(entry)
        if view.row is None:
            raise Refused(f"request {rid} holds no row to decode into")
        if entry.prompt_len is not None and view.committed_len < entry.prompt_len:
            raise Refused(f"request {rid} is mid-prefill ({view.committed_len} of {entry.prompt_len} tokens)")
        return entry

    def _decode_view(self, rid: int) -> tuple[E, RecordView]:
        """A request ready for one non-speculative decode step, and its record; refuses as the scheduler's
        decode path would (draft slots pending, the row full)."""
        entry = self._ready_to_decode(rid)
        view = self._view(entry)
        if view.committed_len != view.allocated_len:
            raise Refused(f"request {rid} has draft slots [C, A); a speculative commit consumes them")
        if view.committed_len + 1 > self.config.width:
            raise Refused(f"request {rid} would decode past the row width {self.config.width}")
        return entry, view

    def _running_batch(self) -> list[tuple[int, E]]:
        """The scheduler's running batch for a decode round: every decoding request, in ascending id, each ready
        for its next decode step (refused as `_decode_view` refuses, before anything runs)."""
        batch = sorted((rid, e) for rid, e in self.reqs.items() if e.status is ReqStatus.DECODING)
        if not batch:
            raise Refused("no request is decoding")
        for rid, _ in batch:
            self._decode_view(rid)
        return batch

    def _pause_order(self) -> list[tuple[int, E]]:
        """What a retract-mode pause retracts, in its order: the running batch (every decoding request, ascending
        id), then the chunked request (the one mid-prefill); refused before anything runs where none is live, a
        live one holds no row, or more than one is mid-prefill (the scheduler has one chunked request)."""
        live = sorted((rid, e) for rid, e in self.reqs.items() if e.status in (ReqStatus.DECODING, ReqStatus.RUNNING))
        chunked = [(rid, e) for rid, e in live if e.status is ReqStatus.RUNNING]
        if not live:
            raise Refused("no request is running")
        if len(chunked) > 1:
            raise Refused(f"{len(chunked)} requests are mid-prefill; the scheduler has one chunked request")
        if any(self._view(e).row is None for _, e in live):
            raise Refused("a running request holds no row")
        return [(rid, e) for rid, e in live if e.status is ReqStatus.DECODING] + chunked

    def _check_admission(self, rid: int, prompt_len: int | None, kind: int) -> None:
        """What the tokenizer and the scheduler's queue guarantee a new request: a new id, a prompt that fits a
        row, a known kind."""
        if rid in self.reqs:
            raise Refused(f"request {rid} already exists")
        if prompt_len is not None and not 1 <= prompt_len <= self.config.width:
            raise Refused(f"prompt length {prompt_len} is not in [1, row width {self.config.width}]")
        if kind not in KIND_NAMES:
            raise Refused(f"kind must be one of {sorted(KIND_NAMES)} ({', '.join(KIND_NAMES.values())}), got {kind}")

    def _queued_entry(self, rid: int, prompt_len: int, family: int, kind: int) -> E:
        """A new request in the waiting queue (`_add_request_to_queue`), holding nothing, registered; refused as
        an admission is, an open-ended prompt included (the adder needs the whole prompt)."""
        if prompt_len is None:
            raise Refused("a queued request needs its whole prompt")
        self._check_admission(rid, prompt_len, kind)
        entry = self._new_entry(rid, prompt_len, family, kind)
        entry.status = ReqStatus.WAITING
        self.reqs[rid] = entry
        return entry

    def _round_chunked(self) -> list[tuple[int, E]]:
        """The chunked request a prefill round continues (none or one), refused before anything runs where a free
        group is open (the scheduler plans between result passes), more than one request is mid-prefill (the
        scheduler has one chunked request) or nothing waits and nothing is mid-prefill."""
        if self._group_open():
            raise Refused("a prefill round is planned between result passes, with no free group open")
        chunked = [(rid, e) for rid, e in self.reqs.items() if e.status is ReqStatus.RUNNING]
        if len(chunked) > 1:
            raise Refused(f"{len(chunked)} requests are mid-prefill; the scheduler has one chunked request")
        if not chunked and not any(e.status is ReqStatus.WAITING for e in self.reqs.values()):
            raise Refused("no request waits and none is mid-prefill")
        return chunked

    def _busy(self) -> list[int]:
        """Requests that keep the scheduler from being idle (`is_fully_idle`): not finished, or holding a row."""
        return sorted(
            rid for rid, e in self.reqs.items() if e.status is not ReqStatus.FINISHED or self._view(e).row is not None
        )

    # -- extend planning and capacity ----------------------------------------------------------------------

    def _plan_extend(self, entry: E, extend_len: int, rid: int) -> ExtendPlan:
        """Where the extend starts and ends (PrefillAdder's extend range); refuses what the scheduler would not
        schedule (row width, prompt end)."""
        width = self.config.width
        if not 1 <= extend_len <= width:
            raise Refused(f"extend length {extend_len} is not in [1, row width {width}]")
        view = self._view(entry)
        target, limit, locking = entry.prompt_len, None, frozenset[int]()
        if view.row is not None or view.allocated_len > 0:
            start = view.prefix_len  # a continuation extends its stashed prefix
        else:
            target = None if target is None else self._known_len(entry)  # a re-admission recomputes outputs
            limit = match_limit(width, target, extend_len)
            start, locking = self._peek_match(entry, limit)
        if target is not None and start >= target:
            raise Refused(f"request {rid} has its whole prompt in KV; it decodes next")
        seq_len = start + extend_len if target is None else min(start + extend_len, target)
        if seq_len > width:
            raise Refused(f"request {rid} would extend past the row width {width}")
        return ExtendPlan(start, seq_len, target, limit, locking, new_row=view.row is None)

    def _check_capacity(self, rows: int, slots: int, locking: int = 0) -> None:
        """Refuse unless `rows` rows are free (the scheduler's `get_num_allocatable_reqs`) and `slots` slots fit
        in the free ones plus what the tree could evict on demand once `locking` more of its tokens are locked
        (PrefillAdder's token budget, `check_decode_mem` for a decode)."""
        if rows > self._free_row_count():
            raise Refused("no free row", Cause.NO_ROW)
        free = self._free_slot_count()
        evictable = self._evictable_slot_count() - locking if self.config.evict_on_demand else 0
        if slots > free + evictable:
            raise Refused(f"{slots} slots asked for, {free} free and {evictable} evictable", Cause.NO_SLOTS)

    def _check_profile(self, quarter: int, group_open: bool) -> int:
        """PP profiling's longest synthetic prompt (`quarter` a quarter of its chunked prefill size), refused as the
        model refuses it: a server profiles at start, on an idle pool with no open free group, so a profiling that
        would have to evict, outgrow a row or stage its frees is outside the flow; and only a prefill server profiles
        (the PD decode side's row pool never does, and hands its rows out in turn, where the model has the requests
        take one row)."""
        longest = quarter * PROFILE_TOKENS_PER_QUARTER
        if self.config.row_pool == "decode":
            raise Refused("a PD decode server profiles no prefill chunks")
        if quarter < 1 or longest > self.config.width:
            raise Refused(f"a profiled prompt of {longest} tokens does not fit a row of {self.config.width}")
        if group_open:
            raise Refused("profiling runs with no free group open")
        free = self._free_slot_count()
        if self._free_row_count() < 1 or ceil_align(longest, self.config.page_size) > free:
            raise Refused(f"profiling needs a row and {longest} slots free; {free} are")
        return longest

    def _check_extend_capacity(self, plan: ExtendPlan) -> None:
        need = tokens_needed(self.config.page_size, plan.start, plan.seq_len)
        self._check_capacity(int(plan.new_row), need, len(plan.locking))

    # -- batches ----------------------------------------------------------------------------------------

    def _plan_batch(self, entries: list[BatchEntry], checked: bool = True, limit: int = MAX_BATCH) -> BatchPlan[E]:
        """Plan every entry as its own call would be planned, then check the batch fits as a whole: upstream's
        scheduler admits a batch whose rows and slots (prefill and decode, less what the tree could evict once
        the batch's matches are locked) it can cover, and allocates it all at once. Unchecked, the budget is
        left to the allocation paths, which must refuse a batch that does not fit (upstream's fail-loud
        RuntimeError) as a caller that skipped or misjudged the budget meets them."""
        plan = self._plan_entries(entries, limit)
        if not checked:
            return plan
        ps = self.config.page_size
        slots = sum(tokens_needed(ps, p.start, p.seq_len) for _, _, p in plan.prefill)
        slots += sum(tokens_needed(ps, view.committed_len, view.committed_len + 1) for _, _, view in plan.decode)
        rows = sum(p.new_row for _, _, p in plan.prefill)
        self._check_capacity(rows, slots, len(_locking(plan)))
        return plan

    def _plan_entries(self, entries: list[BatchEntry], limit: int = MAX_BATCH) -> BatchPlan[E]:
        """Each entry planned as its own call would be (refusing what the scheduler would not schedule), the
        batch's capacity not yet checked."""
        rids = [args.get("req", -1) for _, args in entries]
        if not 1 <= len(entries) <= limit:
            raise Refused(f"a batch has 1 to {limit} entries, got {len(entries)}")
        if len(set(rids)) != len(rids):
            raise Refused(f"a batch schedules each request once, got {rids}")
        prefill: list[tuple[int, E, ExtendPlan]] = []
        decode: list[tuple[int, E, RecordView]] = []
        for op, args in entries:
            if op == "decode":
                decode.append((args["req"], *self._decode_view(args["req"])))
            elif op in ("admit", "extend"):
                entry = self._batch_entry(op, args)
                prefill.append((args["req"], entry, self._plan_extend(entry, args["n"], args["req"])))
            else:
                raise Refused(f"a batch entry is one of {BATCH_OPS}, got {op!r}")
        return BatchPlan(prefill, decode, rids)

    def peek_batch_evictable(self, entries: list[BatchEntry]) -> int:
        """What the batch could evict on demand now: the tree's evictable tokens less those its matches lock
        (each locked once); 0 without on-demand eviction. Read-only."""
        if not self.config.evict_on_demand:
            return 0
        try:
            plan = self._plan_entries(entries)
        except Refused:
            return self._evictable_slot_count()  # the batch is refused as well
        return self._evictable_slot_count() - len(_locking(plan))

    def _batch_entry(self, op: str, args: dict[str, int]) -> E:
        rid = args["req"]
        if op == "admit":
            prompt_len, kind = args.get("prompt"), args.get("kind", KIND_NORMAL)
            self._check_admission(rid, prompt_len, kind)
            return self._new_entry(rid, prompt_len, args.get("family", 0), kind)
        entry = self._get(rid)
        if entry.status is ReqStatus.DECODING:
            raise Refused(f"request {rid} is decoding; only a retraction returns it to prefill")
        return entry

    # -- read-only peeks -------------------------------------------------------------------------------

    def peek_evictable(
        self, rid: int, extend_len: int | None = None, *, prompt_len: int | None = None, family: int = 0
    ) -> int:
        """What an allocation for `rid` could evict on demand now: the tree's evictable tokens, less those an
        extend of `extend_len` (an admission where `rid` is unknown) would lock first; 0 without on-demand
        eviction. Read-only."""
        if not self.config.evict_on_demand:
            return 0
        evictable = self._evictable_slot_count()
        if extend_len is None:
            return evictable
        try:
            entry = self.reqs.get(rid) or self._new_entry(rid, prompt_len, family)
            plan = self._plan_extend(entry, extend_len, rid)
        except Refused:
            return evictable  # the call is refused as well; the model says so without this number
        return evictable - len(plan.locking)

    def peek_prefix(self, family: int, prompt_len: int) -> int:
        """The prefix an admission of a `prompt_len`-token prompt of `family` would match now (read-only)."""
        entry = self._new_entry(-1, prompt_len, family)
        return self._peek_match(entry, match_limit(self.config.width, prompt_len, 1))[0]

    def peek_prefix_of(self, rid: int, extend_len: int = 1) -> int:
        """Where `extend(rid, extend_len)` would start computing: a continuation's stashed prefix, or the prefix a
        re-admission would match now (read-only; an open-ended prompt's match depends on `extend_len`)."""
        entry = self._get(rid)
        view = self._view(entry)
        if view.row is not None or view.allocated_len > 0:
            return view.prefix_len
        target = None if entry.prompt_len is None else self._known_len(entry)
        return self._peek_match(entry, match_limit(self.config.width, target, extend_len))[0]
