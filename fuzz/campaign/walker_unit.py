"""The seeded walker as a campaign engine (`run_walker_unit`, a `UnitRunner`): the unit's seed walks the unit's
pool for `examples x Plan.walker_steps` steps, counting what the heartbeat reads as it goes; a failure is
written raw at once, then shrunk by the walker's own shrinker and written again over it (`fuzz.walker.hunt`).

The unit's swarm name is not used: the walker draws its own swarm from the seed (`fuzz.walker.swarm`), so walker
units are planned per pool only (`plan.WALKER_SWARM`). Its files are the machine's format in the same `--out`,
named as the campaign names files (`unit.counterexample_name`, with `walker` in the swarm's place); they carry
`meta.source` "walker" and `meta.run_step`, so both `fuzz replay` and `fuzz.walker replay-seed` rerun them.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

from fuzz.campaign.plan import SHRINK_S, WALKER, Plan, Unit
from fuzz.campaign.unit import UnitHooks, UnitResult, counterexample_name, point_counts, unit_config
from fuzz.walker.coverage import Transition
from fuzz.walker.hunt import hunt
from fuzz.walker.walk import Walker, WalkResult
from model.trace import Failure


@dataclass
class WalkProgress:
    """A walker unit's running counts, updated after every step (a `Progress`)."""

    total_steps: int = 0
    corners: dict[str, int] = field(default_factory=dict)
    transitions: dict[Transition, int] = field(default_factory=dict)


class CountingWalker(Walker):
    """A walker that keeps `progress` current after each step: the run's steps, the lifecycle corners the step
    reached and the run's own transition counts (the same dict the walk grows)."""

    def __init__(self, config: dict[str, Any], seed: int, progress: WalkProgress) -> None:
        super().__init__(config, seed)
        self.progress = progress

    def _step(self, result: WalkResult) -> tuple[Failure | None, bool]:
        taken = result.steps
        failure, done = super()._step(result)
        progress = self.progress
        progress.transitions = result.coverage.transitions
        if result.steps > taken:  # a step was drawn and run: its corners are this step's
            for corner in self.lock.corners:
                progress.corners[corner] = progress.corners.get(corner, 0) + 1
            progress.total_steps = result.steps
        return failure, done


def run_walker_unit(plan: Plan, unit: Unit, hooks: UnitHooks) -> UnitResult:
    """The walker engine: walk the unit's seed on its pool; write, then shrink and rewrite, what fails."""
    config = unit_config(plan, unit)
    progress = WalkProgress()
    walker = CountingWalker(config, unit.seed, progress)
    hooks.started(progress)
    meta = {"engine": WALKER, "pool": unit.pool, "examples": unit.examples, "commit": plan.commit}
    start = time.perf_counter()
    found = hunt(
        config,
        unit.seed,
        plan.out,
        steps=unit.examples * plan.walker_steps,
        shrink_s=SHRINK_S,
        meta=meta,
        on_found=hooks.found,
        walker=walker,
        path=plan.out / counterexample_name(plan.faults, unit.pool, WALKER, unit.seed),
    )
    walk = found.walk
    result = UnitResult(
        unit.worker, unit.index, unit.seed, unit.pool, unit.swarm, unit.examples, walk.steps, walk.walks, 0.0
    )
    result.engine, result.transitions = WALKER, walk.coverage.distinct
    result.points = point_counts(walk.points) if plan.fault_rate else {}  # a unit with plans reports its points
    if found.counterexample is not None and found.shrunk is not None:
        result.counterexample, result.shrunk = str(found.counterexample), True
        result.failure = asdict(found.shrunk.failure)
    result.seconds = time.perf_counter() - start
    return result
