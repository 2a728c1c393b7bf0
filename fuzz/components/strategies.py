"""Hypothesis strategies for component events, with swarm testing: each test case enables a random subset of
the event kinds a unit has, so that some runs allocate until exhaustion and others free, group or clear a lot.

Sizes are drawn against the unit's own capacity (up to a row or a page past it, batches up to `MAX_BATCH`
requests), so refusals for want of rows or pages come often on every allocation path. Events the unit's
contract does not promise anything for are not drawn (see `fuzz.components.contract`).
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from fuzz.components import events as ev
from fuzz.components.contract import AllocContract, RowContract

MAX_RUN, MAX_RUNS = 10, 8  # events per run, runs per test case
MAX_BATCH = 5
PICK = st.integers(0, 7)
# How many times more often than the others an enabled kind is drawn: allocations and frees carry the lifecycle.
WEIGHTS = {"alloc": 2, "extend": 3, "decode": 3, "free": 4, "free_split": 2, "group": 4}
# Every test case allocates, runs short and frees; the swarm switches the other kinds.
ALWAYS = {"alloc", "extend", "free", "fill"}


def _swarm(kinds: dict[str, st.SearchStrategy[ev.Event]]) -> st.SearchStrategy[list[ev.Event]]:
    """Lists of events from a random subset of `kinds` that holds the unit's `ALWAYS` kinds, each kind drawn by
    its weight."""
    names = sorted(kinds)

    @st.composite
    def draw(data: st.DrawFn) -> list[ev.Event]:
        # Each optional kind on with probability one half (a drawn set would hold only a few kinds).
        switches = data(st.fixed_dictionaries({name: st.booleans() for name in names}))
        enabled = {name for name, on in switches.items() if on} | (ALWAYS & set(names))
        # A weighted pick of the kind, then its event (one_of would merge repeated branches into one).
        pool = [name for name in sorted(enabled) for _ in range(WEIGHTS.get(name, 1))]
        event = st.sampled_from(pool).flatmap(kinds.__getitem__)
        # Runs of runs: Hypothesis keeps a flat list short (about 5), and exhaustion needs longer runs; a list of
        # lists averages about 20 events and still shrinks by deleting whole runs or single events.
        runs = data(st.lists(st.lists(event, min_size=1, max_size=MAX_RUN), max_size=MAX_RUNS))
        return [event for run in runs for event in run]

    return draw()


def row_events(unit: Any, contract: RowContract) -> st.SearchStrategy[list[ev.Event]]:
    """Row-pool events for `unit` (its rows, width, optional `alloc_rows` / `free_rows` and questions)."""
    picks = st.lists(st.none() | PICK, min_size=1, max_size=MAX_BATCH).map(tuple)
    committed = st.booleans() if contract.refuses_stale_reuse else st.just(False)
    kinds: dict[str, st.SearchStrategy[ev.Event]] = {
        "alloc": st.builds(ev.RowAlloc, picks),
        "alloc_stale": st.builds(ev.RowAllocStale, PICK, committed, st.integers(0, 2)),
        "free": st.builds(ev.RowFree, PICK),
        "free_rowless": st.builds(ev.RowFreeRowless, PICK),
        "stale": st.builds(ev.RowStale, PICK, committed),
        "write": st.builds(ev.RowWrite, PICK, st.integers(0, unit.width), st.integers(0, unit.width), PICK),
        "clear": st.just(ev.RowClear()),
    }
    if "alloc_rows" in unit.features:
        kinds["alloc_rows"] = st.builds(ev.RowAllocRows, st.integers(0, unit.rows + 1))
    if "free_rows" in unit.features:
        kinds["free_rows"] = st.builds(ev.RowFreeRows, PICK, PICK)
    if unit.queries:
        kinds["query"] = st.builds(ev.RowQuery, PICK, st.integers(0, 64))
    return _swarm(kinds)


def alloc_events(unit: Any, contract: AllocContract) -> st.SearchStrategy[list[ev.Event]]:
    """Token-allocator events for `unit` (its page size and pages, the free methods and questions it has)."""
    ps, pages = unit.page_size, unit.num_pages
    extend_len = st.integers(0, max(3 * ps, pages * ps // 3))
    items = st.lists(st.tuples(st.none() | PICK, extend_len), min_size=1, max_size=MAX_BATCH).map(tuple)
    kinds: dict[str, st.SearchStrategy[ev.Event]] = {
        "alloc": st.builds(ev.Alloc, st.integers(0, pages + 1)),
        "fill": st.builds(ev.Fill, st.integers(0, 2)),
        "extend": st.builds(ev.Extend, items, st.booleans()),
        "decode": st.builds(ev.Decode, st.lists(PICK, min_size=1, max_size=MAX_BATCH).map(tuple)),
        "free": st.builds(ev.Free, PICK, st.integers(0, 64), PICK),
        "free_split": st.builds(ev.FreeSplit, PICK, st.integers(0, 64), st.integers(0, 64), PICK),
        "free_empty": st.builds(ev.FreeEmpty, PICK),
        "group": st.sampled_from([ev.GroupBegin(), ev.GroupEnd()]),
        "merge": st.just(ev.Merge()),
        "clear": st.just(ev.Clear()),
    }
    if ps > 1 and contract.segment_starts == "aligned":
        kinds["bad_segment"] = st.builds(ev.BadSegment, PICK, st.integers(0, 64))
    if ps > 1 and contract.shared_page_segments == "refused" and contract.refuses_atomically:
        kinds["bad_split"] = st.builds(ev.BadSplit, PICK, st.integers(0, 64), st.integers(0, 64))
    if "resize" in unit.features:
        kinds["resize"] = st.builds(ev.Resize, st.integers(0, 2 * pages))
    if unit.queries:
        kinds["query"] = st.builds(ev.Query, st.integers(0, 15), st.integers(0, 80))
    return _swarm(kinds)


def events_for(unit: Any, kind: str, contract: RowContract | AllocContract) -> st.SearchStrategy[list[ev.Event]]:
    """The event lists for a unit of `kind` ('rows' or 'allocator')."""
    if kind == "rows":
        assert isinstance(contract, RowContract)
        return row_events(unit, contract)
    assert isinstance(contract, AllocContract)
    return alloc_events(unit, contract)
