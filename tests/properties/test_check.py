"""`check_snapshot` answers what checking every invariant in full answers, on any snapshot: its record invariants
split per record, and where its two quick passes say a pool is clean, their invariants find nothing there."""

from __future__ import annotations

import dataclasses
from functools import cache

from hypothesis import given, settings
from hypothesis import strategies as st

from fuzz.lockstep import Lockstep
from fuzz.profiles import POOLS
from impl.target import PoolSnapshot, RecordView
from properties.check import RECORD_LOCAL, ROWS, Alone, bounds, check_snapshot, records_pass, rows_pass
from properties.invariants import BY_ID, check_every
from properties.vocabulary import STATUS_CODES


@cache
def _pool(name: str) -> PoolSnapshot:
    """A pool with a request between prefill chunks, one decoding and one released."""
    lock = Lockstep({**POOLS[name], "faults": []})
    for op, inputs in [
        ("admit", {"req": 0, "prompt": 9, "n": 5, "family": 0}),
        ("admit", {"req": 1, "prompt": 3, "n": 3, "family": 0}),
        ("decode", {"req": 1}),
        ("admit", {"req": 2, "prompt": 2, "n": 2, "family": 0}),
        ("finish", {"req": 2}),
    ]:
        assert lock.step(op, inputs) is None, f"{op} {inputs}"
    return lock.snap


LENGTH = st.integers(-1, 40)
RECORD = st.builds(
    RecordView,
    row=st.one_of(st.none(), st.integers(-1, 9)),
    protected_len=LENGTH,
    committed_len=LENGTH,
    allocated_len=LENGTH,
    inflight_middle_chunks=st.integers(-1, 2),
    status=st.sampled_from([*sorted(STATUS_CODES), "lost"]),
    prefix_len=LENGTH,
    tree_locked=st.booleans(),
    extend_end=LENGTH,
    prompt_len=st.one_of(st.none(), LENGTH),
)


@st.composite
def snapshots(draw: st.DrawFn) -> PoolSnapshot:
    """A real pool's snapshot with its records and free rows replaced: some consistent, most not."""
    base = _pool(draw(st.sampled_from(["chunk-p1", "radix-p4"])))
    records = draw(st.dictionaries(st.integers(0, 6), RECORD, max_size=6))
    if draw(st.booleans()):  # keep the pool's own records, changing at most one of them
        records = dict(base.records)
        if draw(st.booleans()):
            records[draw(st.sampled_from(sorted(records)))] = draw(RECORD)
    free = draw(st.one_of(st.just(list(base.free_rows)), st.lists(st.integers(-1, 9), max_size=8)))
    speculative = draw(st.booleans())
    return dataclasses.replace(base, records=records, free_rows=free, speculative=speculative)


def test_the_split_names_invariants_of_the_catalog() -> None:
    assert set(BY_ID) >= RECORD_LOCAL | ROWS
    assert not RECORD_LOCAL & ROWS


@settings(max_examples=300, deadline=None)
@given(snapshots())
def test_check_snapshot_answers_what_checking_every_invariant_answers(snap: PoolSnapshot) -> None:
    assert check_snapshot(snap) == check_every(snap)


@settings(max_examples=300, deadline=None)
@given(snapshots())
def test_each_record_invariant_judges_each_record_alone(snap: PoolSnapshot) -> None:
    """What a record invariant says of a pool is what it says of each record in a snapshot holding only that
    record and the pool's bounds: so remembering a record's verdict by its value and the bounds is exact."""
    for inv_id in sorted(RECORD_LOCAL):
        check = BY_ID[inv_id].concrete
        alone = [m for rid, record in snap.records.items() for m in check(Alone({rid: record}, *bounds(snap)))]
        assert check(snap) == alone, inv_id


@settings(max_examples=300, deadline=None)
@given(snapshots())
def test_where_the_quick_passes_say_clean_their_invariants_find_nothing(snap: PoolSnapshot) -> None:
    if rows_pass(snap):
        assert [inv_id for inv_id, _ in check_every(snap) if inv_id in ROWS] == []
    if records_pass(snap):
        assert [inv_id for inv_id, _ in check_every(snap) if inv_id in RECORD_LOCAL] == []


def test_the_quick_passes_find_a_clean_pool_clean() -> None:
    for name in ("chunk-p1", "radix-p4"):
        snap = _pool(name)
        assert records_pass(snap) and rows_pass(snap) and check_every(snap) == []


def _rows(snap: PoolSnapshot, free: list[int], **rows: int | None) -> PoolSnapshot:
    records = {rid: dataclasses.replace(rec, row=rows.get(f"r{rid}", rec.row)) for rid, rec in snap.records.items()}
    return dataclasses.replace(snap, records=records, free_rows=free)


def test_each_way_a_row_invariant_breaks_fails_the_row_pass() -> None:
    """Requests 0 and 1 are live on rows of their own, request 2 released; the pool's other rows are free."""
    snap = _pool("chunk-p1")
    row0, row1 = snap.records[0].row, snap.records[1].row
    free = list(snap.free_rows)
    broken = {
        "a row freed twice": _rows(snap, [*free, free[0]]),
        "a row freed twice where another leaks": _rows(snap, [*free, free[0]], r1=None),
        "a foreign row in the free list": _rows(snap, [*free[1:], snap.rows_total + 1]),
        "a held row in the free list": _rows(snap, [*free[1:], row0]),
        "two live records on one row": _rows(snap, [*free, row1], r1=row0),
        "a row held only by a released record": _rows(snap, free[1:], r2=free[0]),
        "a row no record holds": _rows(snap, free[1:]),
        "a row outside the pool": _rows(snap, free, r0=0),
    }
    for what, bad in broken.items():
        assert not rows_pass(bad), what
        assert {inv_id for inv_id, _ in check_every(bad)} & ROWS, what
