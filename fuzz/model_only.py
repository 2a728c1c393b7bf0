"""The model alone, driven by the same rules as the lockstep machine: the baseline the harness's cost is
measured against (`make bench`). It makes the choices a pool would (the highest free row, nothing cached)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fuzz.lockstep import HARNESS_OPS
from fuzz.targets import model_sizes
from model.concrete import Model
from model.trace import Failure, Step


@dataclass
class ModelOnly:
    """Drop-in for `Lockstep` in the state machine, without a pool: legal calls step the model."""

    config: dict[str, Any]
    model: Model = field(init=False)
    steps: list[Step] = field(default_factory=list)
    last_row: dict[int, int] = field(default_factory=dict)
    corners: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.model = Model(model_sizes(self.config))

    @property
    def snap(self) -> Any:
        """What the machine reads of a snapshot: the free rows."""
        s = self.model.state
        return _Rows([r for r in range(1, self.model.sizes.rows + 1) if not s.row_held.get(r)])

    def step(self, op: str, inputs: dict[str, int]) -> Failure | None:
        if op in HARNESS_OPS:  # the model alone has no pool to compare or drain
            return None
        s, req = self.model.state, inputs.get("req", -1)
        args = {**inputs, "prefix": s.rec_P.get(req) if s.rec_row.get(req) else 0}
        if self.model.enabled(op, args):
            choice = self._choose(op, args)
            self.model.step(op, {**args, **choice})
            if "row" in choice:
                self.last_row[req] = choice["row"]
        self.steps.append(Step(op, args))
        return None

    def _choose(self, op: str, args: dict[str, int]) -> dict[str, int]:
        s, action = self.model.state, self.model.action(op)
        choice = {}
        if "row" in action.choice:
            held = s.rec_row.get(args["req"]) if "req" in args else 0
            free = [r for r in range(1, self.model.sizes.rows + 1) if not s.row_held.get(r)]
            choice["row"] = held or max(free)
        if op == "pp_profile":
            choice["uses"] = 1
        if "dup" in action.choice:
            releasing = op in ("finish", "decode_finish", "spec_finish")
            choice["dup"] = s.rec_P.get(args["req"]) if releasing else args.get("prefix", 0)
        if "freed" in action.choice:
            choice["freed"] = 0
        return choice


@dataclass(frozen=True)
class _Rows:
    free_rows: list[int]
