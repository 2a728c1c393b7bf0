"""Unchecked batches: a batch the scheduler's budget does not screen, so that upstream's allocation paths answer for
themselves (their out-of-memory refusal must leave the pool as it was). Both engines draw them through here.

A batch is sent unchecked only where a shortfall fails its *first* allocation, the one case in which upstream's
fail-loud paths leave the pool untouched: more admissions (and re-admissions) than free rows, or continuations only
or decodes only (no new row) with nothing the tree could evict first. Its continuations ask for the rest of their
row, the most slots a chunk can take.
"""

from __future__ import annotations

from fuzz.lockstep import Lockstep, batch_entries
from properties.vocabulary import BATCH_OPS, STATUS_DONE, STATUS_WAITING

ADMIT, EXTEND = BATCH_OPS.index("admit"), BATCH_OPS.index("extend")
ROWLESS = frozenset({STATUS_DONE, STATUS_WAITING})  # a re-admission takes a new row


def unchecked(lock: Lockstep, args: dict[str, int]) -> dict[str, int] | None:
    """`args` (a batch step's arguments) sent unchecked with its continuations at their longest, or None where a
    shortfall would not fail the batch's first allocation."""
    if not fails_first(lock, args):
        return None
    state, width = lock.model.state, lock.model.sizes.width
    size = args["size"]
    longest = {f"n{i}": width - state.rec_C.get(args[f"req{i}"]) for i in range(size) if args[f"op{i}"] == EXTEND}
    return {**args, **longest, "unchecked": 1}


def fails_first(lock: Lockstep, args: dict[str, int]) -> bool:
    """Whether a shortfall of this batch fails its first allocation (see the module docstring)."""
    state, size = lock.model.state, args["size"]
    new_rows = sum(
        1 for i in range(size) if args[f"op{i}"] == ADMIT or state.rec_status.get(args[f"req{i}"]) in ROWLESS
    )
    if new_rows > state.n_free_rows:
        return True
    one_kind = len({args[f"op{i}"] for i in range(size)}) == 1  # continuations only, or decodes only
    target = getattr(lock, "target", None)  # the model-only driver (`make bench`'s baseline) has no pool
    if new_rows or not one_kind or target is None or target.short_alloc_crashes:
        return False
    return not (target.config.evict_on_demand and target.peek_batch_evictable(batch_entries(args)))
