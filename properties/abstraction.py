"""The abstraction function: from a target's snapshot to the observable part of a model state."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from properties.interning import Interned
from properties.snapshot import SnapshotLike
from properties.vocabulary import STATUS_CODES, STATUS_WAITING

# What a released record's `cache_protected_len` reads as: no contract path reads it before a re-admission
# matches afresh, and versions leave it differently (0.5.18 as it was, 0.5.23's finishing checkpoint moves it
# to the inserted length), so it is not observed.
STALE = -1


@dataclass(frozen=True)
class RecordObs:
    """A record as the model sees it: status code, row (0 = none) and lengths."""

    status: int
    row: int
    protected_len: int
    committed_len: int
    allocated_len: int
    inflight: int
    extend_end: int
    tree_locked: bool

    @classmethod
    def of(cls, status: int, row: int, protected_len: int, committed_len: int, allocated_len: int, inflight: int,
           extend_end: int, tree_locked: bool) -> RecordObs:  # fmt: skip
        """The observation of a record; a released one (no row, nothing allocated) hides its stale P. One object
        per distinct value (they are immutable): both sides of a step observe every record, most of them as the
        step before, and an equal observation then compares by identity."""
        protected_len = STALE if row == 0 and allocated_len == 0 else protected_len
        return _RECORDS[(status, row, protected_len, committed_len, allocated_len, inflight, extend_end, tree_locked)]


_RECORDS = Interned(RecordObs, limit=4096)  # the record observations made so far, by field values


@dataclass(frozen=True)
class Observation:
    """What must agree between model and target after every step. Free-list order is not observed."""

    records: dict[int, RecordObs]
    free_rows: frozenset[int]
    free_row_count: int
    free_slot_count: int
    tree_slot_count: int
    generations: tuple[int, ...]  # each row's generation, rows 1.. in order
    group_open: bool
    pending_slot_count: int  # freed into the open free group, back at its end

    def differences(self, other: Observation) -> list[str]:
        """Human-readable differences, `self` being the model and `other` the target."""
        if self == other:  # the usual case, decided field by field without building the report
            return []
        out = []
        for rid in sorted(self.records.keys() | other.records.keys()):
            mine, theirs = self.records.get(rid), other.records.get(rid)
            if mine != theirs:
                out.append(f"request {rid}: model {mine}, pool {theirs}")
        if self.free_rows != other.free_rows:
            out.append(f"free rows: model {sorted(self.free_rows)}, pool {sorted(other.free_rows)}")
        if self.free_row_count != other.free_row_count:
            out.append(f"free row count: model {self.free_row_count}, pool {other.free_row_count}")
        if self.free_slot_count != other.free_slot_count:
            out.append(f"free slots: model {self.free_slot_count}, pool {other.free_slot_count}")
        if self.tree_slot_count != other.tree_slot_count:
            out.append(f"tree-owned slots: model {self.tree_slot_count}, pool {other.tree_slot_count}")
        if self.generations != other.generations:
            out.append(f"row generations: model {list(self.generations)}, pool {list(other.generations)}")
        if (self.group_open, self.pending_slot_count) != (other.group_open, other.pending_slot_count):
            out.append(
                f"free group (open, pending slots): model {(self.group_open, self.pending_slot_count)}, "
                f"pool {(other.group_open, other.pending_slot_count)}"
            )
        return out


def match_only(rec: Any) -> bool:
    """A waiting record that holds nothing, whose protected length is only its last prefix match: upstream's
    adder matches every request it considers (`init_next_round_input`: `cache_protected_len = prefix_len`) and
    keeps the match on one it turns down, and every admission matches again before anything reads it. A
    protected length that is not the record's own prefix (a retraction that kept it, past a cleared prefix) is
    no match."""
    waiting = STATUS_CODES.get(rec.status) == STATUS_WAITING
    empty = rec.row is None and not rec.tree_locked and rec.committed_len == rec.allocated_len == 0
    return waiting and empty and rec.protected_len in (0, rec.prefix_len)


def observe(snap: SnapshotLike) -> Observation:
    records = {
        rid: RecordObs.of(
            STATUS_CODES[rec.status],
            0 if rec.row is None else rec.row,
            0 if match_only(rec) else rec.protected_len,
            rec.committed_len,
            rec.allocated_len,
            rec.inflight_middle_chunks,
            rec.extend_end,
            rec.tree_locked,
        )
        for rid, rec in snap.records.items()
    }
    free_slots = (snap.free_slots.numel() + snap.release_slots.numel()) * snap.page_size
    tree = snap.evictable_size + snap.protected_size
    generations = tuple(snap.row_generation[1 : snap.rows_total + 1])
    pending = snap.pending_pages.numel() * snap.page_size
    rows = frozenset(snap.free_rows)
    return Observation(records, rows, len(snap.free_rows), free_slots, tree, generations, snap.group_open, pending)
