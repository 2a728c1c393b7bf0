"""Checking a snapshot against the whole catalog, reading again only what may have broken.

`check_snapshot` answers exactly what `invariants.check_every` answers, in the same order and words; it gets there
faster on a pool where the record and row invariants hold, which is every step of a run that finds nothing:

- **Record invariants** (`RECORD_LOCAL`) judge each record alone, from its own fields and the pool's bounds (row
  width, page size, cache, speculative decoding). Whether a record passes them all is remembered per distinct
  (record, bounds): a step changes few records, so most are looked up, not judged again. A record is judged by
  running those invariants' own checks on a snapshot holding it alone, so the two cannot drift apart; a check
  that read anything else of the pool would fail there, not pass (`tests/properties/test_check.py` holds every
  record invariant to its per-record split).
- **Row invariants** (`ROWS`) hold together exactly when the free list has no duplicate and no foreign row, every
  held row is a real row outside it, free and held rows add up to the pool's rows, no two live records share a
  row and every held row has a live holder: one pass over the records says so.

Where either finds something, every check runs (`check_every`), so a violation is always reported by its
invariant's own check. The other invariants run every time.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from properties.interning import Interned
from properties.invariants import INVARIANTS, check_every
from properties.snapshot import RecordLike, SnapshotLike
from properties.vocabulary import LIVE_STATUSES, STATUS_CODES

RECORD_LOCAL = frozenset(
    {
        "kv-presence",
        "record-domain",
        "live-holds",
        "prefill-shape",
        "no-overallocation",
        "chunk-unprotected",
        "protected-pages",
        "lock-follows-prefix",
        "length-order",
        "released-unallocated",
        "released-rowless",
        "never-admitted-empty",
    }
)
ROWS = frozenset({"row-owner", "row-held-by-owner", "row-exclusive", "live-row-owned", "row-conservation"})
_LOCAL_CHECKS = tuple(inv.concrete for inv in INVARIANTS if inv.id in RECORD_LOCAL)
_OTHERS = tuple(inv for inv in INVARIANTS if inv.id not in RECORD_LOCAL | ROWS)

Bounds = tuple[int, int, str, bool]  # (width, page_size, cache, speculative): all a record invariant reads


@dataclass(frozen=True)
class Alone:
    """A snapshot holding one record and the pool's bounds, nothing else: what a record invariant may read."""

    records: Mapping[int, RecordLike]
    width: int
    page_size: int
    cache: str
    speculative: bool


def bounds(snap: SnapshotLike) -> Bounds:
    return (snap.width, snap.page_size, snap.cache, snap.speculative)


def record_passes(record: RecordLike, pool: Bounds) -> bool:
    """Whether `record` passes every record invariant in a pool with these bounds."""
    alone = Alone({0: record}, *pool)
    return not any(check(alone) for check in _LOCAL_CHECKS)  # type: ignore[arg-type]


_PASSED = Interned(record_passes, limit=4096)  # by (record, bounds): records are immutable values


def records_pass(snap: SnapshotLike) -> bool:
    """Whether every record passes every record invariant (remembered per distinct record and bounds)."""
    pool = bounds(snap)
    try:
        return all(_PASSED[(record, pool)] for record in snap.records.values())
    except TypeError:  # a record that is not a hashable value: judged afresh
        return all(record_passes(record, pool) for record in snap.records.values())


def rows_pass(snap: SnapshotLike) -> bool:
    """Whether every row invariant holds (see the module docstring for why these conditions are all of them)."""
    total, free = snap.rows_total, snap.free_rows
    free_set = set(free)
    held: set[int] = set()
    live: list[int] = []
    for record in snap.records.values():
        if record.row is not None:
            held.add(record.row)
            if STATUS_CODES.get(record.status) in LIVE_STATUSES:
                live.append(record.row)
    real = all(1 <= row <= total for row in free_set | held)
    once = len(free_set) == len(free) and len(set(live)) == len(live)
    return real and once and held.isdisjoint(free_set) and len(free) + len(held) == total and set(live) == held


def check_snapshot(snap: SnapshotLike) -> list[tuple[str, str]]:
    """Every violation on a snapshot as `(invariant id, message)`, in catalog order: `check_every`'s answer."""
    if records_pass(snap) and rows_pass(snap):
        return [(inv.id, message) for inv in _OTHERS for message in inv.concrete(snap)]
    return check_every(snap)
