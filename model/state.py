"""The model's state: rows with identity and owner, per-request records, and slot accounting.

Every field is an array indexed by row or request id, or a counter, so that the same definition holds
plain Python values (the executable model) or Z3 terms (the transition relation). Row 0 is padding, so a
record's `rec_row == 0` means it holds no row (`req_pool_idx is None`); `rec_row == SENTINEL_ROW` is the `-1`
sentinel that older frees and pool fakes leave in `req_pool_idx`, which no contract path writes. An unknown
request is `STATUS_NEW` with zero lengths.
Slots are counted, not named: `owned_slots` is the sum over holding records of their own pages
`[P, ceil_align(A))`, `tree_slots` what the prefix tree owns; `rec_locked` is 1 while the record holds a
tree lock (`last_node` below the root); `rec_end` is `extend_range.end` and `rec_prompt` the prompt length;
`rec_kind` is the request's kind (`properties.vocabulary.KIND_*`);
`n_active` counts the requests the scheduler still has (prefill, decoding or waiting): a flush needs none.
`group_open` is 1 while the allocator's free group is open (`free_group_begin` .. `free_group_end`), and
`pending_slots` counts what was freed into it: those slots come back at the group's end.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import z3

from model.interp import Cells
from properties.vocabulary import STATUS_NEW

NO_OWNER = -1
SENTINEL_ROW = -1


@dataclass(frozen=True)
class Sizes:
    """Pool sizes (ints, or Z3 terms for a symbolic pool) and the pool's structure (always Python values).

    `tokens` counts KV slots and is a multiple of `page_size`; the prefix tree exists only when `radix`;
    `speculative` allows over-allocation (`kv_committed_len < kv_allocated_len`); with `on_demand`, allocations
    and retractions evict the tree themselves as they need (else only the `evict` step does).
    """

    rows: Any
    tokens: Any
    width: Any
    page_size: int = 1
    radix: bool = False
    speculative: bool = False
    on_demand: bool = False


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
    rec_end: Any
    rec_prompt: Any
    rec_locked: Any
    rec_kind: Any
    n_free_rows: Any
    n_held_rows: Any
    n_free_slots: Any
    owned_slots: Any
    tree_slots: Any
    n_active: Any
    group_open: Any
    pending_slots: Any

    def but(self, **changes: Any) -> State:
        """This state with `changes` (field names), as `dataclasses.replace` gives it; the copy is made field by
        field because the model steps through `but` several times a step, and `replace` re-runs `__init__`."""
        unknown = changes.keys() - _FIELD_NAMES
        if unknown:
            raise TypeError(f"State has no field {sorted(unknown)[0]!r}")
        new = object.__new__(State)
        new.__dict__.update(self.__dict__)
        new.__dict__.update(changes)
        return new


_FIELD_NAMES = frozenset(f.name for f in dataclasses.fields(State))

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
    "rec_end": 0,
    "rec_prompt": 0,
    "rec_locked": 0,
    "rec_kind": 0,
}
COUNTER_FIELDS = (
    "n_free_rows",
    "n_held_rows",
    "n_free_slots",
    "owned_slots",
    "tree_slots",
    "n_active",
    "group_open",
    "pending_slots",
)


def initial(o: Any, sizes: Sizes) -> State:
    """Every row free, no request known, every slot free, the tree empty."""
    arrays = {name: o.const_array(default) for name, default in ARRAY_FIELDS.items()}
    return State(
        **arrays,
        n_free_rows=sizes.rows,
        n_held_rows=0,
        n_free_slots=sizes.tokens,
        owned_slots=0,
        tree_slots=0,
        n_active=0,
        group_open=0,
        pending_slots=0,
    )


def symbolic(name: str, cells: int = 0) -> State:
    """A fully unconstrained Z3 state whose variables are suffixed with `name`; with `cells`, the record
    fields are that many cells (request ids below `cells`) instead of arrays."""
    arrays = {f: _symbolic_field(f, d, name, cells) for f, d in ARRAY_FIELDS.items()}
    counters = {f: z3.Int(f"{f}@{name}") for f in COUNTER_FIELDS}
    return State(**arrays, **counters)


def initial_cells(o: Any, sizes: Sizes, cells: int) -> State:
    """`initial`, with the record fields as `cells` cells."""
    s = initial(o, sizes)
    return s.but(**{f: Cells([_const(d)] * cells, _const(d)) for f, d in ARRAY_FIELDS.items() if f.startswith("rec_")})


def _const(value: Any) -> Any:
    return z3.BoolVal(value) if isinstance(value, bool) else z3.IntVal(value)


def _symbolic_field(field: str, default: Any, name: str, cells: int) -> Any:
    sort = z3.BoolSort() if isinstance(default, bool) else z3.IntSort()
    if cells and field.startswith("rec_"):
        return Cells([z3.Const(f"{field}[{k}]@{name}", sort) for k in range(cells)], _const(default))
    return z3.Array(f"{field}@{name}", z3.IntSort(), sort)
