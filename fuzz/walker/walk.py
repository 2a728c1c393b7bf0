"""The walk: one seed, its swarm, and walks of its swarm's length from a fresh pool until a step fails or the run
has taken its steps (or spent its budget). Every step goes through `fuzz.lockstep.Lockstep`; the run is a pure
function of the config, the seed and the ops it may draw, so the seed alone replays it.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fuzz.drain import DRAIN, drain_args, drains
from fuzz.fault_plans import Planner, PointCounts
from fuzz.lockstep import Lockstep
from fuzz.targets import target_ops
from fuzz.walker.coverage import Coverage, outcome, shape
from fuzz.walker.draw import Drawer
from fuzz.walker.rules import ids_by_status, rule_for
from fuzz.walker.swarm import Swarm, draw_swarm
from model.trace import Failure, Trace
from properties.vocabulary import KIND_EXCLUSIONS, KIND_NAMES, STATUS_NEW

SAMPLE_EVERY_S = 1.0  # one throughput and coverage sample a second
CLOCK_EVERY = 32  # steps between two looks at the clock (budget, samples)


@dataclass(frozen=True)
class Sample:
    """Where a run stood `seconds` after it started: steps taken and distinct transitions reached."""

    seconds: float
    steps: int
    transitions: int


@dataclass
class WalkResult:
    """A run's outcome: the failure (None when every step passed) and its walk's trace, unshrunk, with what
    the run cost and reached. `steps` counts the drawn steps; the drain that ends each walk is counted in `ops`."""

    seed: int
    swarm: Swarm
    steps: int
    walks: int
    seconds: float
    failure: Failure | None = None
    trace: Trace | None = None
    coverage: Coverage = field(default_factory=Coverage)
    samples: list[Sample] = field(default_factory=list)
    ops: dict[str, int] = field(default_factory=dict)
    points: PointCounts = field(default_factory=lambda: PointCounts())


def drawable_ops(config: dict[str, Any], exclude: frozenset[str] = frozenset()) -> frozenset[str]:
    """The ops a walk on `config` may draw: those its target implements, less the excluded ones."""
    return target_ops(config) - exclude


def drawn_kinds(exclude: frozenset[str]) -> tuple[int, ...]:
    """The request kinds a run draws: every kind but those excluded by name (`kind:NAME`)."""
    barred = {KIND_EXCLUSIONS[name] for name in exclude if name in KIND_EXCLUSIONS}
    return tuple(kind for kind in sorted(KIND_NAMES) if kind not in barred)


class Walker:
    """One seeded run on one config: `run` walks until a failure, `steps` steps or `budget_s` seconds."""

    def __init__(self, config: dict[str, Any], seed: int, exclude: frozenset[str] = frozenset()) -> None:
        self.config, self.seed, self.exclude = config, seed, exclude
        self.rng = random.Random(seed)
        self.lock = Lockstep(config)
        ops = drawable_ops(config, exclude)
        actions = self.lock.model.actions
        rules = {op: rule_for(op, actions.get(op)) for op in ops}
        creators = [op for op, rule in rules.items() if any(STATUS_NEW in p.statuses for p in rule.picks)]
        companions = {op: rule.companion for op, rule in rules.items() if rule.companion in ops}
        self.swarm = draw_swarm(self.rng, ops, creators, companions)
        self.drawer = Drawer(self.rng, self.lock.model.sizes, actions, ops, self.swarm, drawn_kinds(exclude))
        self.drains = drains(ops, exclude)  # every walk ends with a drain (`fuzz.drain`)
        self.drain_args = drain_args(exclude)
        installed = self.lock.target.fault_points.installed
        self.planner = Planner(self.rng, config.get("fault_rate", 0), installed, exclude)

    def run(
        self,
        steps: int | None = None,
        budget_s: float | None = None,
        on_sample: Callable[[Sample], None] | None = None,
    ) -> WalkResult:
        """Walk until a step fails or the run has taken `steps` steps or spent `budget_s` seconds."""
        result = WalkResult(self.seed, self.swarm, 0, 0, 0.0)
        start = next_sample = time.perf_counter()
        while steps is None or result.steps < steps:
            if result.walks:
                self.lock = Lockstep(self.config)
                self.drawer.reset()
            result.walks += 1
            taken = result.steps
            for _ in range(self.swarm.walk_steps):
                failure, done = self._step(result)
                self._fail(result, failure)
                if failure is not None or done or result.steps == steps:
                    break
                if result.steps % CLOCK_EVERY == 0:
                    now = time.perf_counter()
                    if now >= next_sample:
                        next_sample = now + SAMPLE_EVERY_S
                        _sample(result, now - start, on_sample)
                    if budget_s is not None and now - start >= budget_s:
                        break
            if result.failure is None and self.drains:
                self._drain(result)
            result.points.add(self.lock.target.fault_points)
            out_of_time = budget_s is not None and time.perf_counter() - start >= budget_s
            if result.failure is not None or out_of_time or result.steps == taken:  # a walk that drew nothing
                break
        result.seconds = time.perf_counter() - start
        _sample(result, result.seconds, on_sample)
        return result

    def _step(self, result: WalkResult) -> tuple[Failure | None, bool]:
        """One drawn step through the lockstep: its failure, and whether the walk cannot go on (nothing drawable)."""
        lock = self.lock
        groups = ids_by_status(lock.model.state)
        before = shape(lock.model.sizes, lock.model.state, groups)
        drawn = self.drawer.draw(lock, groups, result.coverage.seen(before))
        if drawn is None:
            return None, True
        op, args = drawn
        args = {**args, **self.planner.draw(op, args)}
        result.steps += 1
        return self._take(result, before, op, args), False

    def _drain(self, result: WalkResult) -> None:
        """End the walk with a drain; a failure there is the walk's."""
        before = shape(self.lock.model.sizes, self.lock.model.state, ids_by_status(self.lock.model.state))
        self._fail(result, self._take(result, before, DRAIN, self.drain_args))

    def _take(self, result: WalkResult, before: str, op: str, args: dict[str, int]) -> Failure | None:
        """Step `op` through the lockstep, counting it and the transition it reached from `before`."""
        lock = self.lock
        failure = lock.step(op, args)
        result.ops[op] = result.ops.get(op, 0) + 1
        result.coverage.add((before, op, outcome(op, lock.corners, failure.kind if failure else None)))
        return failure

    def _fail(self, result: WalkResult, failure: Failure | None) -> None:
        """Make `failure` (if any) the run's, with its walk's trace up to the failing step."""
        if failure is not None:
            result.failure = failure
            result.trace = Trace(self.config, self.seed, self.lock.steps[: failure.step + 1], failure)


def _sample(result: WalkResult, seconds: float, on_sample: Callable[[Sample], None] | None) -> None:
    sample = Sample(seconds, result.steps, result.coverage.distinct)
    result.samples.append(sample)
    if on_sample is not None:
        on_sample(sample)
