"""The model's state: rows with identity and owner, per-request records, and slot accounting.

Every field is an array indexed by row or request id, or a counter, so that the same definition holds
plain Python values (the executable model) or Z3 terms (the transition relation). Row 0 is padding, so a
record's `rec_row == 0` means it holds no row; an unknown request is `STATUS_NEW` with zero lengths.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import z3

from properties.snapshot import STATUS_NEW

NO_OWNER = -1


@dataclass(frozen=True)
class Sizes:
    """Pool sizes the model is instantiated with (ints, or Z3 terms for a symbolic pool)."""

    rows: Any
    tokens: Any
    width: Any


@dataclass(frozen=True)
class State:
    """One model state; see the module docstring for the meaning of each field."""

    row_held: Any
    row_owner: Any
    row_gen: Any
    rec_status: Any
    rec_row: Any
    rec_P: Any
    rec_C: Any
    rec_A: Any
    rec_inflight: Any
    n_free_rows: Any
    n_held_rows: Any
    n_free_slots: Any
    owned_slots: Any

    def but(self, **changes: Any) -> State:
        return dataclasses.replace(self, **changes)


ARRAY_FIELDS = {
    "row_held": False,
    "row_owner": NO_OWNER,
    "row_gen": 0,
    "rec_status": STATUS_NEW,
    "rec_row": 0,
    "rec_P": 0,
    "rec_C": 0,
    "rec_A": 0,
    "rec_inflight": 0,
}
COUNTER_FIELDS = ("n_free_rows", "n_held_rows", "n_free_slots", "owned_slots")


def initial(o: Any, sizes: Sizes) -> State:
    """Every row free, no request known, every slot free."""
    arrays = {name: o.const_array(default) for name, default in ARRAY_FIELDS.items()}
    return State(**arrays, n_free_rows=sizes.rows, n_held_rows=0, n_free_slots=sizes.tokens, owned_slots=0)


def symbolic(name: str) -> State:
    """A fully unconstrained Z3 state whose variables are suffixed with `name`."""
    arrays = {
        f: z3.Array(f"{f}@{name}", z3.IntSort(), z3.BoolSort() if isinstance(d, bool) else z3.IntSort())
        for f, d in ARRAY_FIELDS.items()
    }
    counters = {f: z3.Int(f"{f}@{name}") for f in COUNTER_FIELDS}
    return State(**arrays, **counters)
