"""One unit of a campaign: one engine's run on one pool and swarm, and the seam a second engine plugs into.

An engine is a `UnitRunner`: given the plan, the unit and the worker's hooks, it runs the unit, tells the hooks
what it is counting and each counterexample the moment it is written, and returns a `UnitResult`. `run_unit` is
the Hypothesis engine: the lockstep state machine, seeded, on the campaign's keyed example database; it counts the
walker's abstract transitions (`fuzz.walker.coverage`) too, so that both engines' coverage can be compared.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

import hypothesis
from hypothesis.internal.conjecture import engine as hypothesis_engine
from hypothesis.stateful import get_state_machine_test

from fuzz.campaign.database import campaign_database
from fuzz.campaign.plan import HYPOTHESIS, SHRINK_S, STEPS_PER_CASE, Plan, Unit
from fuzz.fault_plans import PointCounts, fault_rate_key
from fuzz.lockstep import Lockstep, StepFailed
from fuzz.machine import Recorder, build_machine
from fuzz.profiles import POOLS, Profile
from fuzz.run import delete_steps
from fuzz.walker.coverage import Transition, outcome, shape
from fuzz.walker.rules import ids_by_status
from model.trace import Failure, Trace, dump
from properties.vocabulary import FAULT_POINTS


class Progress(Protocol):
    """What a running unit counts, read by the worker's heartbeat while the unit runs: lockstep steps, lifecycle
    corners and abstract transitions (each with how often it was reached)."""

    @property
    def total_steps(self) -> int: ...

    @property
    def corners(self) -> Mapping[str, int]: ...

    @property
    def transitions(self) -> Mapping[Transition, int]: ...


@dataclass(frozen=True)
class UnitHooks:
    """The worker's ears: `started` gets the unit's running counts, `found` each counterexample file written."""

    started: Callable[[Progress], None]
    found: Callable[[Path], None]


@dataclass
class UnitResult:
    """One unit's outcome, as the worker reports it (a row of `report.json`'s units)."""

    worker: int
    index: int
    seed: int
    pool: str
    swarm: str
    examples: int
    steps: int
    cases: int
    seconds: float
    counterexample: str | None = None
    failure: dict[str, Any] | None = None
    shrunk: bool = False
    engine: str = HYPOTHESIS
    transitions: int = 0  # distinct abstract transitions the unit reached
    # Each fault point the unit's pools installed, where it ran with plans: [calls reached, planned failures].
    points: dict[str, list[int]] = field(default_factory=dict)


def point_counts(counts: PointCounts) -> dict[str, list[int]]:
    """A unit's `points`: each installed point's calls and planned failures."""
    return {p: [counts.reached[p], counts.fired[p]] for p in FAULT_POINTS if p in counts.installed}


UnitRunner = Callable[[Plan, Unit, UnitHooks], UnitResult]


def counterexample_name(faults: Iterable[str], pool: str, swarm: str, seed: int) -> str:
    """A file name fixed before the failure is shrunk (the raw trace and the shrunk one share it)."""
    stem = f"{'+'.join(sorted(faults)) or 'nofault'}-{pool}-{swarm}-{seed}"
    return re.sub(r"[^A-Za-z0-9_.+-]+", "_", stem) + ".json"  # safe to paste into a shell


def bound_shrinking() -> None:
    """Stop Hypothesis's shrink of a failing unit after `SHRINK_S` (its default is 300 s); once per worker process."""
    # No public setting bounds the shrink: the engine reads this module constant at each shrink.
    hypothesis_engine.MAX_SHRINKING_SECONDS = SHRINK_S


def unit_config(plan: Plan, unit: Unit) -> dict[str, Any]:
    """The pool config a unit runs on: its pool shape on the campaign's target, with the campaign's faults and
    fault plans."""
    return {**POOLS[unit.pool], "target": plan.target, "faults": sorted(plan.faults), **fault_rate_key(plan.fault_rate)}


@dataclass
class CountingLockstep(Lockstep):
    """The lockstep driver, counting the abstract transition of every step into `transitions` (shared by every
    test case of a unit): the model state's shape before the step, the op, and what the step's corners say."""

    transitions: dict[Transition, int] = field(default_factory=dict)

    def step(self, op: str, inputs: dict[str, int]) -> Failure | None:
        state = self.model.state
        before = shape(self.model.sizes, state, ids_by_status(state))
        failure = super().step(op, inputs)
        reached = (before, op, outcome(op, self.corners, failure.kind if failure else None))
        self.transitions[reached] = self.transitions.get(reached, 0) + 1
        return failure


@dataclass
class MachineProgress:
    """A Hypothesis unit's running counts: the recorder's steps and corners, the drivers' transitions."""

    recorder: Recorder
    transitions: dict[Transition, int]

    @property
    def total_steps(self) -> int:
        return self.recorder.total_steps

    @property
    def corners(self) -> dict[str, int]:
        return self.recorder.corners


def run_unit(plan: Plan, unit: Unit, hooks: UnitHooks) -> UnitResult:
    """The Hypothesis engine: run one unit; a failure is written raw the moment it happens, and rewritten once
    shrunk (Hypothesis's shrink, then `delete_steps`)."""
    config = unit_config(plan, unit)
    path = plan.out / counterexample_name(plan.faults, unit.pool, unit.swarm, unit.seed)
    meta = {
        "source": "campaign",
        "engine": HYPOTHESIS,
        "pool": unit.pool,
        "swarm": unit.swarm,
        "commit": plan.commit,
        "hypothesis": hypothesis.__version__,
        "examples": unit.examples,
        "steps_per_case": STEPS_PER_CASE,
    }

    def keep_raw(lock: Any, failure: Failure) -> None:
        if not path_written:
            dump(Trace(config, unit.seed, lock.steps[: failure.step + 1], failure, {**meta, "shrunk": False}), path)
            path_written.append(path)
            hooks.found(path)

    path_written: list[Path] = []
    transitions: dict[Transition, int] = {}
    seen: list[Any] = []  # each test case's fault points (a run with plans counts them all)

    def driver(c: dict[str, Any]) -> CountingLockstep:
        lock = CountingLockstep(c, transitions=transitions)
        if plan.fault_rate:
            seen.append(lock.target.fault_points)
        return lock

    recorder = Recorder(config, unit.swarm, driver=driver, on_failure=keep_raw)
    hooks.started(MachineProgress(recorder, transitions))
    test = _seeded(get_state_machine_test(build_machine(recorder), settings=_settings(plan, unit, config)), unit.seed)
    result = UnitResult(unit.worker, unit.index, unit.seed, unit.pool, unit.swarm, unit.examples, 0, 0, 0.0)
    start = time.perf_counter()
    try:
        test()
    except StepFailed as exc:
        assert recorder.last is not None
        steps, failure = delete_steps(config, recorder.last.steps[: exc.failure.step + 1], exc.failure)
        dump(Trace(config, unit.seed, steps, failure, {**meta, "shrunk": True}), path)
        result.counterexample, result.failure, result.shrunk = str(path), asdict(failure), True
    result.steps, result.cases, result.seconds = recorder.total_steps, recorder.cases, time.perf_counter() - start
    counts = PointCounts()
    for points in seen:
        counts.add(points)
    result.transitions, result.points = len(transitions), point_counts(counts) if plan.fault_rate else {}
    return result


def _settings(plan: Plan, unit: Unit, config: dict[str, Any]) -> hypothesis.settings:
    profile = Profile("campaign", unit.examples, STEPS_PER_CASE, derandomize=False, keep_database=False)
    database = campaign_database(plan.db, unit.pool, unit.swarm, config["faults"], plans=bool(plan.fault_rate))
    return hypothesis.settings(
        profile.hypothesis_settings(plan.db), database=database, verbosity=hypothesis.Verbosity.quiet
    )


def _seeded(test: Any, seed: int) -> Any:
    # No public API seeds a run and keeps its example database: `hypothesis.seed` sets this attribute and also turns
    # the database off (a seed replays one run). A unit wants both: the database replays failures saved by earlier
    # units, the seed draws the rest. This is the attribute `hypothesis.seed` sets (hypothesis/core.py, `seed`).
    test._hypothesis_internal_use_seed = seed
    return test
