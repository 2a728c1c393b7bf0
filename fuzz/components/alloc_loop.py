"""One token-allocator event at a time, on the real unit and on `PageModel`, judged by the unit's `AllocContract`.

Each `apply` calls the unit, judges its answer (slots, None, an assert) against the model's verdict, checks the
page layout of what it handed out and updates the model; `observe` then compares the free pages, the staged
pages, the available size, the free-group state and what an open group holds with the model. Page size 1 has no
`alloc_extend` / `alloc_decode`: an extend or decode batch goes through one `alloc`, as the scheduler's
`alloc_token_slots` does.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from fuzz.components.contract import AllocContract
from fuzz.components.events import (
    Alloc,
    BadSegment,
    BadSplit,
    Clear,
    Decode,
    Event,
    Extend,
    Fill,
    Free,
    FreeEmpty,
    FreeSplit,
    GroupBegin,
    GroupEnd,
    Merge,
    Query,
    Resize,
)
from fuzz.components.layout import extend_layout, judge_pages
from fuzz.components.models import PageModel, cdiv
from fuzz.components.refusal import Problem, attempt

FREE_VIAS = ("free", "free_full", "free_segment", "free_full_segment", "free_page_ids")
SEGMENT_VIAS = ("free_segment", "free_full_segment")
SPLIT_VIAS = ("free_segments", "free_full_segments")

# What each read-only question must answer, from the model and the question's argument `n`.
ANSWERS: dict[str, Callable[[PageModel, int], object]] = {
    "check_decode_capacity": lambda m, n: m.available_pages() * m.page_size >= n,
    "request_slot_reserve": lambda m, n: 0,
    "get_extend_allocation_demand": lambda m, n: n,
    "evict_to_free_tokens": lambda m, n: None,
    "verify_byte_accounting": lambda m, n: [],
    "mamba_full_cache_donor": lambda m, n: None,
    "debug_print": lambda m, n: "",
    "size_full": lambda m, n: m.num_pages * m.page_size,
    "get_kvcache": lambda m, n: None,
    "translate_kv_indices_for_transfer": lambda m, n: [n, n + 1],
    "get_all_free_pages": lambda m, n: sorted(m.free | m.staged),
    "prealloc_fits_assumes_reclaim": lambda m, n: False,
    "prealloc_ceiling_fits": lambda m, n: None,
    "prealloc_fits": lambda m, n: n <= m.available_pages() * m.page_size,
    "set_hicache_transfer_done_event": lambda m, n: None,
}
Request = tuple[int | None, int, int, int]  # (holder or None for a new one, prefix_len, seq_len, last_loc)


def _diff(actual: list[int], expected: set[int]) -> str:
    extra = sorted((Counter(actual) - Counter(expected)).elements())
    missing = sorted((Counter(expected) - Counter(actual)).elements())
    return f"extra {extra}, missing {missing}"


class AllocRun:
    """A token-allocator unit and its model, stepped together."""

    def __init__(self, unit: Any, contract: AllocContract, coverage: Counter[str]) -> None:
        self.unit, self.contract, self.coverage = unit, contract, coverage
        self.model = PageModel.fresh(unit.page_size, unit.num_pages, unit.need_sort)
        self.initial_pages = unit.num_pages
        self.free_vias = [via for via in FREE_VIAS if via in unit.features]
        self.split_vias = [via for via in SPLIT_VIAS if via in unit.features]
        self._handlers: dict[type[Event], Callable[[Any], Problem | None]] = {
            Alloc: self._alloc,
            Fill: self._fill,
            Extend: self._extend,
            Decode: self._decode,
            Free: self._free,
            FreeSplit: self._free_split,
            FreeEmpty: self._free_empty,
            BadSegment: self._bad_segment,
            BadSplit: self._bad_split,
            GroupBegin: self._group_begin,
            GroupEnd: self._group_end,
            Merge: self._merge,
            Clear: self._clear,
            Resize: self._resize,
            Query: self._query,
        }

    def apply(self, event: Event) -> Problem | None:
        return self._handlers[type(event)](event)

    # -- state ------------------------------------------------------------------------------------------------

    def state(self, split: bool) -> tuple[object, ...]:
        """What the unit shows, for a refusal's before/after comparison; without `split`, free and staged pages
        count as one multiset (an allocation may merge them before it refuses)."""
        free, staged = sorted(self.unit.free_pages()), sorted(self.unit.staged_pages())
        pages: tuple[object, ...] = (free, staged) if split else (sorted(free + staged),)
        return *pages, self.unit.available_size(), self.unit.in_group(), sorted(self.unit.pending_pages())

    def observe(self) -> Problem | None:
        m, unit = self.model, self.unit
        free, staged = unit.free_pages(), unit.staged_pages()
        if Counter(free) != Counter(m.free):
            return "mismatch", f"free pages differ from the model: {_diff(free, m.free)}"
        if Counter(staged) != Counter(m.staged):
            return "mismatch", f"staged pages differ from the model: {_diff(staged, m.staged)}"
        expected_size = m.available_pages() * m.page_size
        if unit.available_size() != expected_size:
            return "mismatch", f"available_size {unit.available_size()} != {expected_size}"
        if unit.in_group() != (m.pending is not None):
            return "mismatch", f"in a free group: unit {unit.in_group()}, model {m.pending is not None}"
        pending = unit.pending_pages()
        if m.pending is not None and Counter(pending) != Counter(m.pending):
            return "mismatch", f"the open group's pages differ from the model: {_diff(pending, m.pending)}"
        problem = m.self_check()
        return None if problem is None else ("model", problem)

    def _sync_merge(self) -> None:
        """An allocation may merge the staged pages first; the model follows when the unit's staged list emptied."""
        if self.model.staged and not self.unit.staged_pages():
            self.model.merge()
            self.coverage["merge:by-allocation"] += 1

    def _refused(self, before: tuple[object, ...], split: bool, what: str, path: str) -> Problem | None:
        if self.state(split) != before:
            return "refusal-changed-state", f"{what} was refused but changed the allocator"
        self.coverage[path] += 1
        return None

    # -- allocations ------------------------------------------------------------------------------------------

    def _allocate(
        self, requests: list[Request], call: Callable[[], list[int] | None], what: str, kernel: bool = False
    ) -> Problem | None:
        """Run one allocation for `requests` and judge it: None exactly when the model is short of pages (and
        then nothing changed), else every request's slots in page layout on pages free in the model. A `kernel`
        call short of pages is not made where the contract says the kernel would read past the free list."""
        m, ps = self.model, self.model.page_size
        needed = sum(cdiv(seq, ps) - cdiv(prefix, ps) for _, prefix, seq, _ in requests)
        if kernel and needed > m.available_pages() and not self.contract.kernel_reads_within_free_list:
            self.coverage["skipped:short-kernel-call"] += 1
            return None
        before = self.state(split=False)
        out, refusal = attempt(call)
        self._sync_merge()
        if refusal is not None:
            return "refused-legal", f"{what} asserted: {refusal}"
        if out is None:
            if needed <= m.available_pages():
                return "refused-legal", f"{what} returned None needing {needed} pages of {m.available_pages()}"
            return self._refused(before, False, what, f"{what.split('(')[0]}:None")
        return self._bind(requests, out, what)

    def _bind(self, requests: list[Request], out: list[int], what: str) -> Problem | None:
        m = self.model
        total = sum(seq - prefix for _, prefix, seq, _ in requests)
        if len(out) != total:
            return "mismatch", f"{what} returned {len(out)} slots for {total} positions"
        segments, offset, new_pages = [], 0, []
        for index, (_, prefix, seq, last_loc) in enumerate(requests):
            segment = out[offset : offset + seq - prefix]
            pages, problem = extend_layout(m.page_size, prefix, last_loc, segment)
            if problem:
                return "illegal-choice", f"{what}, request {index}: {problem}"
            segments.append(segment)
            new_pages += pages
            offset += seq - prefix
        problem = judge_pages(m, new_pages)
        if problem:
            return "illegal-choice", f"{what}: {problem}"
        m.free -= set(new_pages)
        for (ref, *_), segment in zip(requests, segments, strict=True):
            if ref is not None:
                m.holders[ref] = m.holders[ref] + segment
            elif segment:
                m.holders[m.new_ref()] = segment
        self.coverage[f"{what.split('(')[0]}:batch={len(requests)}"] += 1
        return None

    def _alloc(self, event: Alloc) -> Problem | None:
        need = event.pages * self.model.page_size
        return self._allocate([(None, 0, need, -1)], lambda: self.unit.alloc(need), f"alloc({need})")

    def _fill(self, event: Fill) -> Problem | None:
        return self._alloc(Alloc(max(0, self.model.available_pages() - event.leave)))

    def _extend(self, event: Extend) -> Problem | None:
        requests: list[Request] = []
        holders = list(self.model.holders)
        for pick, extend_len in event.items:
            ref = None if pick is None or not holders else holders[pick % len(holders)]
            if ref is not None and any(ref == other for other, *_ in requests):
                continue
            slots = [] if ref is None else self.model.holders[ref]
            last_loc = slots[-1] if slots else -1
            requests.append((ref, len(slots), len(slots) + extend_len, last_loc))
        prefix_lens = [prefix for _, prefix, _, _ in requests]
        seq_lens = [seq for _, _, seq, _ in requests]
        last_locs = [last_loc for *_, last_loc in requests]
        if self.model.page_size == 1:
            total = sum(seq_lens) - sum(prefix_lens)
            return self._allocate(requests, lambda: self.unit.alloc(total), f"alloc_extend-as-alloc({total})")
        call = lambda: self.unit.alloc_extend(prefix_lens, seq_lens, last_locs, event.pass_count)  # noqa: E731
        return self._allocate(requests, call, f"alloc_extend({prefix_lens}, {seq_lens})", kernel=True)

    def _decode(self, event: Decode) -> Problem | None:
        holders = [ref for ref, slots in self.model.holders.items() if slots]
        if not holders:
            return None
        refs = list(dict.fromkeys(holders[pick % len(holders)] for pick in event.picks))
        slots = [self.model.holders[ref] for ref in refs]
        requests: list[Request] = [(ref, len(s), len(s) + 1, s[-1]) for ref, s in zip(refs, slots, strict=True)]
        seq_lens, last_locs = [r[2] for r in requests], [r[3] for r in requests]
        if self.model.page_size == 1:
            return self._allocate(requests, lambda: self.unit.alloc(len(refs)), f"alloc_decode-as-alloc({len(refs)})")
        call = lambda: self.unit.alloc_decode(seq_lens, last_locs)  # noqa: E731
        return self._allocate(requests, call, f"alloc_decode({seq_lens})", kernel=True)

    # -- frees ------------------------------------------------------------------------------------------------

    def _holder(self, pick: int, min_len: int) -> int | None:
        holders = [ref for ref, slots in self.model.holders.items() if len(slots) >= min_len]
        return holders[pick % len(holders)] if holders else None

    def _aligned(self, start: int) -> int:
        return start // self.model.page_size * self.model.page_size

    def _release(self, ref: int, start: int, what: str) -> None:
        self.model.release(self.model.truncate(ref, start))
        self.coverage[f"free:{what}"] += 1
        if self.model.pending is not None:
            self.coverage["free:in-group"] += 1

    def _free(self, event: Free) -> Problem | None:
        ref = self._holder(event.pick, 1)
        if ref is None or not self.free_vias:
            return None
        via = self.free_vias[event.via % len(self.free_vias)]
        slots = self.model.holders[ref]
        start = event.keep % len(slots)
        if via in SEGMENT_VIAS and self.contract.segment_starts == "aligned":
            start = self._aligned(start)
        piece = slots[start:]
        if via == "free_page_ids":
            pages = sorted({slot // self.model.page_size for slot in piece})
            _, refusal = attempt(lambda: self.unit.free_page_ids(pages))
        else:
            _, refusal = attempt(lambda: self.unit.free_slots(via, piece, start))
        if refusal is not None:
            return "refused-legal", f"{via} of h{ref}'s positions from {start} asserted: {refusal}"
        self._release(ref, start, via)
        return None

    def _split_points(self, ref: int, keep: int, split: int) -> tuple[int, int]:
        slots = self.model.holders[ref]
        start = keep % len(slots)
        if self.contract.segment_starts == "aligned":
            start = self._aligned(start)
        mid = start + split % (len(slots) - start + 1)
        if self.contract.shared_page_segments == "refused":
            mid = max(start, self._aligned(mid))
        return start, mid

    def _free_split(self, event: FreeSplit) -> Problem | None:
        ref = self._holder(event.pick, 1)
        if ref is None or not self.split_vias:
            return None
        via = self.split_vias[event.via % len(self.split_vias)]
        start, mid = self._split_points(ref, event.keep, event.split)
        slots = self.model.holders[ref]
        segments = [(slots[start:mid], start), (slots[mid:], mid)]
        _, refusal = attempt(lambda: self.unit.free_segments(via, segments))
        if refusal is not None:
            return "refused-legal", f"{via} of h{ref} at {start} and {mid} asserted: {refusal}"
        self._release(ref, start, via)
        return None

    def _free_empty(self, event: FreeEmpty) -> Problem | None:
        vias = self.free_vias + self.split_vias
        if not vias:
            return None
        via = vias[event.via % len(vias)]
        before = self.state(split=True)
        if via in SPLIT_VIAS:
            _, refusal = attempt(lambda: self.unit.free_segments(via, []))
        elif via == "free_page_ids":
            _, refusal = attempt(lambda: self.unit.free_page_ids([]))
        else:
            _, refusal = attempt(lambda: self.unit.free_slots(via, [], 0))
        if refusal is not None:
            return "refused-legal", f"{via} of nothing asserted: {refusal}"
        if self.state(split=True) != before:
            return "mismatch", f"{via} of nothing changed the allocator"
        self.coverage["free:empty"] += 1
        return None

    def _forbidden(self, call: Callable[[], None], what: str) -> Problem | None:
        """A call the contract forbids: it must assert and change nothing."""
        before = self.state(split=True)
        _, refusal = attempt(call)
        if refusal is None:
            return "accepted-forbidden", f"{what} was accepted"
        return self._refused(before, True, what, f"forbidden:{what.split(' ')[0]}:refused")

    def _bad_segment(self, event: BadSegment) -> Problem | None:
        vias = [via for via in SEGMENT_VIAS if via in self.unit.features]
        ref = self._holder(event.pick, 2)
        if ref is None or not vias or self.model.page_size == 1:
            return None
        slots = self.model.holders[ref]
        starts = [pos for pos in range(len(slots)) if pos % self.model.page_size]
        start = starts[event.keep % len(starts)]
        return self._forbidden(
            lambda: self.unit.free_slots(vias[0], slots[start:], start), f"{vias[0]} from mid-page position {start}"
        )

    def _bad_split(self, event: BadSplit) -> Problem | None:
        ref = self._holder(event.pick, 2)
        if ref is None or not self.split_vias or self.model.page_size == 1:
            return None
        slots = self.model.holders[ref]
        start = self._aligned(event.keep % len(slots))
        mids = [pos for pos in range(start + 1, len(slots)) if pos % self.model.page_size]
        if not mids:
            return None
        mid = mids[event.split % len(mids)]
        segments = [(slots[start:mid], start), (slots[mid:], mid)]
        via = self.split_vias[0]
        return self._forbidden(lambda: self.unit.free_segments(via, segments), f"{via} sharing the page of {mid}")

    # -- free groups, merge, clear, questions -----------------------------------------------------------------

    def _group_begin(self, event: GroupBegin) -> Problem | None:
        if self.model.pending is not None:
            if not self.contract.refuses_nested_group:
                return None
            return self._forbidden(self.unit.group_begin, "free_group_begin inside an open group")
        _, refusal = attempt(self.unit.group_begin)
        if refusal is not None:
            return "refused-legal", f"free_group_begin asserted: {refusal}"
        self.model.pending = set()
        return None

    def _group_end(self, event: GroupEnd) -> Problem | None:
        m = self.model
        if m.pending is None:
            if not self.contract.end_outside_group_noop:
                return None
            before = self.state(split=True)
            _, refusal = attempt(self.unit.group_end)
            if refusal is not None or self.state(split=True) != before:
                return "mismatch", f"free_group_end with no group open changed the allocator ({refusal})"
            self.coverage["group:end-outside"] += 1
            return None
        _, refusal = attempt(self.unit.group_end)
        if refusal is not None:
            return "refused-legal", f"free_group_end asserted: {refusal}"
        self.coverage["group:end-with-pages" if m.pending else "group:end-empty"] += 1
        m.end_group()
        return None

    def _merge(self, event: Merge) -> Problem | None:
        had_staged = bool(self.model.staged)
        _, refusal = attempt(self.unit.merge)
        if refusal is not None:
            return "refused-legal", f"merge_and_sort_free asserted: {refusal}"
        self.model.merge()
        free = self.unit.free_pages()
        if had_staged and free != sorted(free):
            return "mismatch", f"free pages not sorted after merge_and_sort_free: {free}"
        self.coverage["merge:staged" if had_staged else "merge:nothing-staged"] += 1
        return None

    def _clear(self, event: Clear) -> Problem | None:
        _, refusal = attempt(self.unit.clear)
        if refusal is not None:
            return "refused-legal", f"clear asserted: {refusal}"
        self.model.clear()
        self.coverage["clear"] += 1
        return None

    def _resize(self, event: Resize) -> Problem | None:
        if "resize" not in self.unit.features:
            return None
        pages = 1 + event.pages % (2 * self.initial_pages)
        _, refusal = attempt(lambda: self.unit.resize(pages * self.model.page_size))
        if refusal is not None:
            return "refused-legal", f"resize to {pages} pages asserted: {refusal}"
        self.model.clear(pages)
        self.coverage["resize"] += 1
        return None

    def _query(self, event: Query) -> Problem | None:
        names = self.unit.queries
        if not names:
            return None
        name = names[event.which % len(names)]
        answer, refusal = attempt(lambda: self.unit.query(name, event.n))
        expected = ANSWERS[name](self.model, event.n)
        if refusal is not None or answer != expected:
            return "mismatch", f"{name}({event.n}) answered {answer!r} ({refusal}), expected {expected!r}"
        self.coverage[f"query:{name}"] += 1
        return None
