"""The executable model: the actions run with Python values, stepped in lockstep with a real pool."""

from __future__ import annotations

from typing import Any

from model.actions import ARG_DEFAULTS, Action, actions_for
from model.batch import BATCH_OPTIONAL, batch_action
from model.decode_round import decode_round_action
from model.interp import PY
from model.pause_retract import pause_retract_action
from model.prefill_round import prefill_round_action
from model.retract_decode import retract_decode_action
from model.state import Sizes, State, initial
from properties.abstraction import Observation, RecordObs
from properties.invariants import INVARIANTS
from properties.vocabulary import STATUS_NEW

BATCH_DEFAULTS = dict.fromkeys(BATCH_OPTIONAL, 0)


def executable_actions(table: dict[str, Action]) -> tuple[Action, ...]:
    """The steps judged by the executable model only, built over `table`'s atomic actions: the batch, the decode
    retraction, the decode round, the retract-mode pause and the prefill round."""
    return (
        batch_action(table),
        retract_decode_action(table),
        decode_round_action(table),
        pause_retract_action(table),
        prefill_round_action(table),
    )


class Model:
    """One model instance: sizes, the action table (contract unless faults are named) and the current state."""

    def __init__(self, sizes: Sizes, faults: frozenset[str] = frozenset()):
        self.sizes = sizes
        contract = actions_for(faults)
        self.actions = {**contract, **{a.name: a for a in executable_actions(contract)}}
        self.state: State = initial(PY, sizes)

    def action(self, op: str) -> Action:
        try:
            return self.actions[op]
        except KeyError:
            raise ValueError(f"the model has no action {op!r}") from None

    def enabled(self, op: str, args: dict[str, Any]) -> bool:
        return bool(self.action(op).enabled(PY, self.sizes, self.state, _defaults(args)))

    def choice_ok(self, op: str, args: dict[str, Any]) -> bool:
        return bool(self.action(op).choice_ok(PY, self.sizes, self.state, _defaults(args)))

    def step(self, op: str, args: dict[str, Any]) -> None:
        """Apply an enabled action whose choice (if any) is already in `args`."""
        self.state = self.action(op).update(PY, self.sizes, self.state, _defaults(args))

    def adopt_generations(self, generations: tuple[int, ...]) -> None:
        """Take the pool's row generations (rows 1.. in order) where they grew past the model's: a failed call
        that took a row and gave it back has counted a tenure no request had (`fuzz.lockstep`)."""
        gens = self.state.row_gen
        for row, gen in enumerate(generations, start=1):
            if gen > gens.get(row):
                gens = gens.set(row, gen)
        self.state = self.state.but(row_gen=gens)

    def adopt_group_frees(self, free_slots: int, pending_slots: int) -> None:
        """Take slots a failed call gave back into the open free group (the pool's free and pending counts, their
        sum the model's): freed there, they come back at the group's end like any other free in it."""
        s = self.state
        moved = pending_slots - s.pending_slots
        if s.group_open == 1 and moved > 0 and free_slots + pending_slots == s.n_free_slots + s.pending_slots:
            self.state = s.but(n_free_slots=free_slots, pending_slots=pending_slots)

    def known_requests(self) -> list[int]:
        return sorted(r for r in self.state.rec_status if self.state.rec_status.get(r) != STATUS_NEW)

    def observe(self) -> Observation:
        s = self.state
        status, row, P, C, A = s.rec_status, s.rec_row, s.rec_P, s.rec_C, s.rec_A
        inflight, end, locked = s.rec_inflight, s.rec_end, s.rec_locked
        records = {
            rid: RecordObs.of(
                status.get(rid),
                row.get(rid),
                P.get(rid),
                C.get(rid),
                A.get(rid),
                inflight.get(rid),
                end.get(rid),
                bool(locked.get(rid)),
            )
            for rid in self.known_requests()
        }
        rows = range(1, self.sizes.rows + 1)
        free = frozenset(r for r in rows if not s.row_held.get(r))
        generations = tuple(s.row_gen.get(r) for r in rows)
        return Observation(
            records, free, s.n_free_rows, s.n_free_slots, s.tree_slots, generations, s.group_open == 1, s.pending_slots
        )

    def violated_invariants(self) -> list[str]:
        """Invariants whose symbolic form is false on the current state, at some known index."""
        reqs = self.known_requests() or [0]
        rows = list(range(1, self.sizes.rows + 1))
        domain = {"req": reqs, "row": rows}
        bad = []
        for inv in INVARIANTS:
            if inv.symbolic is None:
                continue
            for idx in _index_tuples(inv.index, domain):
                if not inv.symbolic(PY, self.sizes, self.state, *idx):
                    bad.append(f"{inv.id} at {idx}")
                    break
        return bad


def _defaults(args: dict[str, Any]) -> dict[str, Any]:
    """`args` with what a trace or a pool may leave out (`ARG_DEFAULTS`, and a batch's unused fields)."""
    return {**ARG_DEFAULTS, **BATCH_DEFAULTS, **args}


def _index_tuples(sorts: tuple[str, ...], domain: dict[str, list[int]]) -> list[tuple[int, ...]]:
    tuples: list[tuple[int, ...]] = [()]
    for sort in sorts:
        tuples = [(*t, v) for t in tuples for v in domain[sort]]
    return tuples
