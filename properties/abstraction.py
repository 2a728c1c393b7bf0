"""The abstraction function: from a target's snapshot to the observable part of a model state."""

from __future__ import annotations

from dataclasses import dataclass

from properties.snapshot import SnapshotLike
from properties.vocabulary import STATUS_CODES


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


@dataclass(frozen=True)
class Observation:
    """What must agree between model and target after every step. Free-list order is not observed."""

    records: dict[int, RecordObs]
    free_rows: frozenset[int]
    free_row_count: int
    free_slot_count: int
    tree_slot_count: int

    def differences(self, other: Observation) -> list[str]:
        """Human-readable differences, `self` being the model and `other` the target."""
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
        return out


def observe(snap: SnapshotLike) -> Observation:
    records = {
        rid: RecordObs(
            status=STATUS_CODES[rec.status],
            row=0 if rec.row is None else rec.row,
            protected_len=rec.protected_len,
            committed_len=rec.committed_len,
            allocated_len=rec.allocated_len,
            inflight=rec.inflight_middle_chunks,
            extend_end=rec.extend_end,
            tree_locked=rec.tree_locked,
        )
        for rid, rec in snap.records.items()
    }
    free_slots = (snap.free_slots.numel() + snap.release_slots.numel()) * snap.page_size
    tree = snap.evictable_size + snap.protected_size
    return Observation(records, frozenset(snap.free_rows), len(snap.free_rows), free_slots, tree)
