"""The lockstep driver: one step runs on the model and on a real pool, and the two are compared.

The model judges every call before it is made (legal or forbidden) and every choice the pool makes
(which row); after the step, the pool's observation must equal the model's, and every invariant must
hold on the pool's own tensors. The driver does not need Hypothesis: the fuzzer and replay share it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from impl.engine import PoolConfig, PoolSnapshot, ReferencePool, Refused
from impl.faults import FaultSet
from model.concrete import Model
from model.state import Sizes
from model.trace import Failure, Step
from properties.abstraction import observe
from properties.invariants import check_snapshot

# How each op reaches the target, from the step's arguments (and, for reuse_released, the stale row).
_CALLS: dict[str, Callable[[Any, dict[str, int]], Any]] = {
    "admit": lambda t, a: t.admit(a["req"], a["n"]),
    "extend": lambda t, a: t.extend(a["req"], a["n"]),
    "decode": lambda t, a: t.decode(a["req"]),
    "finish": lambda t, a: t.finish(a["req"]),
    "pp_release": lambda t, a: t.pp_release(a["req"]),
    "pp_release_manual": lambda t, a: t.pp_release_manual(a["req"]),
    "reuse_released": lambda t, a: t.reuse_released(a["req"], a["row"], a["n"]),
    "release_again": lambda t, a: t.release_again(a["req"]),
    "free_row": lambda t, a: t.free_row(a["req"]),
}


class StepFailed(AssertionError):
    """A lockstep step found a failure; `failure` says which."""

    def __init__(self, failure: Failure):
        super().__init__(f"step {failure.step}: {failure.kind} {failure.id}: {failure.message}")
        self.failure = failure


def pool_config(config: dict[str, Any]) -> PoolConfig:
    """The pool config a trace config describes (raises ValueError for sizes the pool does not support)."""
    keys = ("rows", "tokens", "width", "page_size", "cache", "device")
    return PoolConfig(**{k: config[k] for k in keys})


def make_target(config: dict[str, Any]) -> ReferencePool:
    if config.get("target", "reference") != "reference":
        raise ValueError(f"target {config['target']!r} is not available in this build")
    return ReferencePool(pool_config(config), FaultSet.of(config.get("faults", [])))


@dataclass
class Lockstep:
    """A model and a target stepped together; `steps` is the trace so far."""

    config: dict[str, Any]
    target: ReferencePool = field(init=False)
    model: Model = field(init=False)
    steps: list[Step] = field(default_factory=list)
    last_row: dict[int, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.target = make_target(self.config)
        self.model = Model(Sizes(self.config["rows"], self.config["tokens"], self.config["width"]))

    def step(self, op: str, args: dict[str, int]) -> Failure | None:
        """Run one step on both sides; the failure it shows, if any. The step is recorded either way."""
        index = len(self.steps)
        legal = self.model.enabled(op, args)
        before = self.target.snapshot() if not legal else None
        try:
            result = _CALLS[op](self.target, args)
        except Refused as exc:
            self.steps.append(Step(op, dict(args)))
            return self._refused(index, op, args, legal, str(exc), before)
        choice = {"row": result} if self.model.action(op).choice else {}
        self.steps.append(Step(op, dict(args), choice))
        if not legal:
            return Failure(index, "accepted-forbidden", op, f"the pool accepted {_call(op, args)}, "
                           "which the contract forbids in this state")
        return self._judge(index, op, {**args, **choice}) or self._observe(index)

    def _refused(
        self, index: int, op: str, args: dict[str, int], legal: bool, reason: str, before: PoolSnapshot | None
    ) -> Failure | None:
        if legal:
            return Failure(index, "refused-legal", op, f"the pool refused {_call(op, args)}: {reason}")
        assert before is not None
        changes = observe(before).differences(observe(self.target.snapshot()))
        if changes:
            return Failure(index, "refusal-changed-state", op,
                           f"{_call(op, args)} was refused ({reason}) but changed " + "; ".join(changes))
        return None

    def _judge(self, index: int, op: str, args: dict[str, int]) -> Failure | None:
        if not self.model.choice_ok(op, args):
            return Failure(index, "illegal-choice", op, f"the pool chose row {args.get('row')} for "
                           f"{_call(op, args)}, which is not free and not the request's own")
        self.model.step(op, args)
        if "row" in args and op in ("admit", "extend"):
            self.last_row[args["req"]] = args["row"]
        return None

    def _observe(self, index: int) -> Failure | None:
        snap = self.target.snapshot()
        violations = check_snapshot(snap)
        if violations:
            inv_id = violations[0][0]
            messages = [m for i, m in violations if i == inv_id]
            return Failure(index, "invariant", inv_id, "; ".join(messages))
        diffs = self.model.observe().differences(observe(snap))
        if diffs:
            return Failure(index, "mismatch", "abstraction", "model and pool disagree: " + "; ".join(diffs))
        return None


def _call(op: str, args: dict[str, int]) -> str:
    return f"{op}(" + ", ".join(f"{k}={v}" for k, v in args.items()) + ")"
