"""Which steps carry a fault plan, and which plan: what the walker and the Hypothesis machine draw.

A run's config says how often (`fault_rate`, the percentage of drawn steps); a plan names a point the target has
installed (`impl.fault_points`) and which of the step's calls to it fails. A plan is a step's `fault` and
`fault_call` arguments, so a counterexample file carries it and replay arms it again.

A known finding can bar a point from fuzzing by name (`fuzz_exclude`): `fault:POINT` bars it everywhere,
`fault:POINT@STAGE` only in the steps of that stage (`STAGES`), so a run goes on finding what else fails there.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from impl.fault_points import FaultPoints
from properties.vocabulary import BATCH_OPS, FAULT_POINTS, MAX_BATCH, MAX_FAULT_CALL

# The stage of each step that allocates: where in the scheduler its allocation runs.
# A batch's stage is its entries': prefill or decode alone, or "round" for both (its decodes allocate after its
# prefill entries did: `stage_of`).
STAGES = {
    "prefill": frozenset({"admit", "extend", "reuse_released", "pd_prealloc", "pp_profile"}),
    "round": frozenset(),
    "decode": frozenset({"decode", "decode_finish", "spec_prepare"}),
}
DECODE_ENTRY = BATCH_OPS.index("decode")
# The steps no plan is drawn for: the harness's own, and the decode round, which retracts, re-queues and aborts
# before its decode allocates: a failure there comes after work no scheduler undoes (upstream's is fatal), so
# "as before" is not the round's contract, and the model has no state between its halves to hold it to. The
# round's allocation is the decode's, which plain decodes and batches fail. The prefill round likewise: its
# adder has planned, locked and dequeued before the batch allocates (a batch's allocation, which batches fail);
# and an arrival in the queue calls no pool at all.
HARNESS_STEPS = frozenset({"differential", "drain", "decode_round", "prefill_round", "queue"})


def fault_rate_key(rate: int) -> dict[str, int]:
    """A config's `fault_rate` key for `rate` (none at 0, so a run without plans keeps its config as it was)."""
    return {"fault_rate": rate} if rate else {}


def stage_of(op: str, args: dict[str, int] | None = None) -> str:
    """The stage a step of `op` with `args` belongs to (`STAGES`; a batch by its entries), else "other"."""
    if op == "batch":
        codes = [(args or {}).get(f"op{i}", 0) for i in range(min((args or {}).get("size", 0), MAX_BATCH))]
        decodes = sum(code == DECODE_ENTRY for code in codes)
        return "decode" if codes and decodes == len(codes) else "round" if decodes else "prefill"
    return next((stage for stage, ops in STAGES.items() if op in ops), "other")


def exclusion_names() -> frozenset[str]:
    """Every name a finding may bar a point by."""
    stages = (*STAGES, "other")
    return frozenset(f"fault:{p}" for p in FAULT_POINTS) | {f"fault:{p}@{s}" for p in FAULT_POINTS for s in stages}


def barred(point: str, op: str, exclude: Iterable[str], args: dict[str, int] | None = None) -> bool:
    """Whether the exclusions bar `point` from a step of `op` with `args`."""
    names = set(exclude)
    return f"fault:{point}" in names or f"fault:{point}@{stage_of(op, args)}" in names


def planned(args: dict[str, int]) -> str:
    """The point a plan's arguments name."""
    return FAULT_POINTS[args["fault"] - 1]


def installed_points(config: dict[str, Any]) -> set[str]:
    """The points the pools of `config` have (a pool is built to ask)."""
    from fuzz.targets import make_target

    return set(make_target(config).fault_points.installed)


def plan_args(point: str, call: int = 0) -> dict[str, int]:
    """The step arguments of a plan (`impl.fault_points.plan_of` reads them back)."""
    return {"fault": FAULT_POINTS.index(point) + 1, "fault_call": call}


class Planner:
    """Draws a step's plan: with probability `rate` percent, one point of `installed` the exclusions leave to the
    step, and its first or a later call (the first more often). Draws nothing from `rng` when `rate` is 0, so a
    run without plans walks as it did before plans existed."""

    def __init__(self, rng: random.Random, rate: int, installed: Iterable[str], exclude: Iterable[str]) -> None:
        self.rng, self.rate = rng, rate
        self.points = [p for p in FAULT_POINTS if p in set(installed)]
        self.exclude = frozenset(exclude)

    def draw(self, op: str, args: dict[str, int]) -> dict[str, int]:
        if self.rate <= 0 or op in HARNESS_STEPS or self.rng.randrange(100) >= self.rate:
            return {}
        points = [p for p in self.points if not barred(p, op, self.exclude, args)]
        if not points:
            return {}
        call = 0 if self.rng.random() < 0.7 else self.rng.randint(1, MAX_FAULT_CALL)
        return plan_args(self.rng.choice(points), call)


@dataclass
class PointCounts:
    """The fault points of a run's pools: which were installed, how often each was reached and failed."""

    installed: set[str] = field(default_factory=set)
    reached: Counter[str] = field(default_factory=Counter)
    fired: Counter[str] = field(default_factory=Counter)

    def add(self, points: FaultPoints) -> None:
        """Count one pool's points (a walk's, at its end)."""
        self.installed |= points.installed
        self.reached.update(points.reached)
        self.fired.update(points.fired)

    def merge(self, other: PointCounts) -> None:
        self.installed |= other.installed
        self.reached.update(other.reached)
        self.fired.update(other.fired)

    def never_fired(self) -> list[str]:
        """The installed points no planned failure reached (a run with plans fails on one: `fuzz.walker`)."""
        return [p for p in FAULT_POINTS if p in self.installed and not self.fired[p]]

    def describe(self) -> str:
        """One line: each installed point, its calls and its planned failures."""
        return "; ".join(
            f"{p} reached {self.reached[p]}, failed {self.fired[p]}" for p in FAULT_POINTS if p in self.installed
        )
