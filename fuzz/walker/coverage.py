"""Abstract transitions: the shape of the model's state before a step, the op, and its outcome.

The shape is eleven digits: how many requests are in prefill, decoding, released and waiting (0, 1 or 2 for two
or more), whether no row, some or every row is free, whether no slot is free, fewer than a full row's or more,
and four flags: the tree owns slots, some record is over-allocated (C < A), some record holds a tree lock, a
free group is open. The
outcome is what the lockstep's corners say of the op (done, refused, a forbidden call refused, a prefix matched,
...), or the failure's kind. The lifecycle corners saturate within seconds; these keep growing for hours, so
their count over time says whether a campaign still finds new ground.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from model.state import Sizes, State
from properties.vocabulary import STATUS_DECODE, STATUS_DONE, STATUS_PREFILL, STATUS_WAITING

Transition = tuple[str, str, str]  # (shape, op, outcome)
_COUNTED = (STATUS_PREFILL, STATUS_DECODE, STATUS_DONE, STATUS_WAITING)


def shape(sizes: Sizes, state: State, groups: dict[int, list[int]]) -> str:
    """The model state's shape (see the module docstring)."""
    counts = "".join(str(min(len(groups.get(status, ())), 2)) for status in _COUNTED)
    rows = 0 if state.n_free_rows == 0 else 2 if state.n_free_rows == sizes.rows else 1
    slots = 0 if state.n_free_slots == 0 else 1 if state.n_free_slots < sizes.width else 2
    committed, held = state.rec_C, state.rec_row
    over = any(a > committed.get(rid) and held.get(rid) for rid, a in state.rec_A.items.items())
    locked = any(state.rec_locked.items.values())
    flags = f"{int(state.tree_slots > 0)}{int(over)}{int(locked)}{int(state.group_open)}"
    return f"{counts}{rows}{slots}{flags}"


def outcome(op: str, corners: list[str], failure_kind: str | None) -> str:
    """What the step's corners say of its op, or the failure it showed."""
    if failure_kind is not None:
        return f"failed: {failure_kind}"
    said = [corner.split(": ", 1)[1] for corner in corners if corner.startswith(f"{op}: ")]
    return "; ".join(said) or "observed"


@dataclass
class Coverage:
    """Transitions reached and how often; `drawn` counts each op by the shape it was drawn from (what steering
    reads: the outcome is known only after the step)."""

    transitions: dict[Transition, int] = field(default_factory=dict)
    drawn: dict[str, dict[str, int]] = field(default_factory=dict)

    def add(self, transition: Transition) -> None:
        self.transitions[transition] = self.transitions.get(transition, 0) + 1
        ops = self.drawn.setdefault(transition[0], {})
        ops[transition[1]] = ops.get(transition[1], 0) + 1

    def seen(self, shape: str) -> dict[str, int]:
        """How often each op was drawn from `shape`."""
        return self.drawn.get(shape, {})

    @property
    def distinct(self) -> int:
        return len(self.transitions)

    def merge(self, other: Coverage) -> None:
        """Add another run's counts (a campaign's union over its units)."""
        for transition, count in other.transitions.items():
            self.transitions[transition] = self.transitions.get(transition, 0) + count
        for shape, ops in other.drawn.items():
            mine = self.drawn.setdefault(shape, {})
            for op, count in ops.items():
                mine[op] = mine.get(op, 0) + count
