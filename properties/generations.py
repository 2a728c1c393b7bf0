"""Row generations across a run: a row's (index, generation) pair never names two different holders.

Readers that keep a row across steps (overlap relays, the speculative planner) store the row's generation with
it and compare before they touch the row again; that is sound only if a generation, once a request held the row
under it, is never shown to another holder, across reuse of the row and across `ReqToTokenPool.clear()` (a
flush). The pool bumps a row's generation each time it hands the row out; a pool that forgets to, or that
resets the counters, lets two holders share a pair. The check needs the run's history, so it is a ledger the
lockstep keeps, fed one snapshot after each step.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from properties.snapshot import SnapshotLike


@dataclass
class GenerationLedger:
    """Who held each (row, generation) pair so far."""

    holders: dict[tuple[int, int], int] = field(default_factory=dict)

    def check(self, snap: SnapshotLike) -> list[str]:
        """Record the pairs the snapshot's holders hold now; one message per pair that names a second holder."""
        problems = []
        for rid, record in sorted(snap.records.items()):
            row = record.row
            if row is None or not 1 <= row < len(snap.row_generation):
                continue
            pair = (row, snap.row_generation[row])
            first = self.holders.setdefault(pair, rid)
            if first != rid:
                problems.append(
                    f"row {row} at generation {pair[1]} is held by request {rid}, and was held by request {first} "
                    "under the same generation: a reader holding that pair cannot tell the row was reused"
                )
        return problems
