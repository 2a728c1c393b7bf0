"""A campaign's plan: what decides each unit (its seed, its engine, its pool and swarm, its size), and the lines
that say it.

Unit k of worker w in shard I of N gets seed `BASE + ((k * workers + w) * N + I - 1)`, so that workers and shards
never repeat each other's seeds whatever engine runs the unit. Its engine follows the worker's engine cycle (two
walker units, then one Hypothesis unit, when both run) from the worker's own offset, and each engine walks its own
configurations in turn: Hypothesis every pool/swarm pair, the walker every pool (it draws its own swarm per seed).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

MAX_WORKERS = 256
MAX_SHARDS = 4096
MAX_EXAMPLES = 1_000_000
MAX_SEED_BASE = (1 << 63) - 1
DEFAULT_EXAMPLES = 100  # test cases per unit: about 10 s of lockstep on one core
STEPS_PER_CASE = 50
SHRINK_S = 20  # Hypothesis's shrink per failing unit stops here; `delete_steps` then trims what is left
HYPOTHESIS, WALKER = "hypothesis", "walker"
ENGINES = (WALKER, HYPOTHESIS)  # the default mixes both, in this order in every list and cycle
# Units per engine in a worker's cycle when both run, each unit lasting about as long (`WALKER_STEPS_PER_EXAMPLE`):
# the walker gets three quarters of the time. Measured in a 10-minute 2-worker campaign on the reference pool at
# two to one, the walker reached 97 % of the distinct abstract transitions both engines reached (35,613 of
# 36,714) at 12.0 M steps per core-hour, Hypothesis 33 % (1,101 that the walker had not) at 3.4 M; Hypothesis keeps
# a quarter for what only it does (its example database replays saved failures first, its shrinker, targeted
# generation).
UNIT_SHARE = {WALKER: 3, HYPOTHESIS: 1}
# A walker unit of `examples` walks this many steps per example, per target, so that its units last about as long
# as the machine's: on the reference pool three times a test case's 50 steps (the walker steps three to four times
# as fast in a campaign: about 4 s for 100 examples on one core); on upstream's once (the walker steps about 1.2
# times as fast there: 517 against 420 steps/s on 0.5.23). Upstream's objects cannot be copied, so each path of the
# release-path differential replays the walk's calls so far on a fresh pool: a longer walk makes each differential
# dearer, and it already takes most of a walker's time there (`bench.walker_bench --target sglang`).
WALKER_STEPS_PER_EXAMPLE = {"reference": 3 * STEPS_PER_CASE, "sglang": STEPS_PER_CASE}
WALKER_SWARM = "per-seed"  # a walker unit's swarm: drawn from its seed (`fuzz.walker.swarm`), not named


def unit_seed(base: int, index: int, worker: int, workers: int, shard: int, shards: int) -> int:
    """The seed of unit `index` of `worker` in shard `shard` (1-based) of `shards`: distinct for every
    (index, worker, shard), so shards and workers never repeat each other's seeds."""
    return base + ((index * workers + worker) * shards + (shard - 1))


def configurations(pools: Iterable[str], swarms: Iterable[str]) -> list[tuple[str, str]]:
    """Every (pool, swarm) pair, the pools alternating so that consecutive units change pool."""
    return [(pool, swarm) for swarm in swarms for pool in pools]


def engine_cycle(engines: Iterable[str]) -> tuple[str, ...]:
    """The engines of a worker's consecutive units, repeated: one engine alone, or each of them `UNIT_SHARE` times
    in `ENGINES` order."""
    chosen = [engine for engine in ENGINES if engine in set(engines)]
    if len(chosen) == 1:
        return tuple(chosen)
    return tuple(engine for engine in chosen for _ in range(UNIT_SHARE[engine]))


def engine_turns(cycle: tuple[str, ...], engine: str, positions: int) -> int:
    """How many of the first `positions` positions of the repeated `cycle` are `engine`'s."""
    laps, rest = divmod(positions, len(cycle))
    return laps * cycle.count(engine) + cycle[:rest].count(engine)


def unit_configuration(
    configs: list[tuple[str, str]], index: int, worker: int, workers: int, shard: int
) -> tuple[str, str]:
    """The configuration of unit `index` of `worker`: each worker walks every configuration in turn, from its
    own offset, so that workers (and shards) run different ones at the same time."""
    return configs[(index + worker + (shard - 1) * workers) % len(configs)]


def last_unit_examples(remaining_s: float, cases_per_s: float, examples: int) -> int:
    """Test cases for the next unit: all of `examples`, or as many as fit before the budget runs out (at least one),
    so that the campaign ends near its budget rather than a whole unit after it."""
    return max(1, min(examples, int(remaining_s * cases_per_s)))


@dataclass(frozen=True)
class Unit:
    """One unit of work: who runs it, its place in that worker's stream, its seed, configuration and size (test
    cases; a walker unit walks the plan's `walker_steps` for each), and the engine that runs it."""

    worker: int
    index: int
    seed: int
    pool: str
    swarm: str
    examples: int
    engine: str


@dataclass(frozen=True)
class Plan:
    """Everything that decides a campaign's units; printed first, so that a campaign can be rerun exactly."""

    budget_s: float
    workers: int
    shard: tuple[int, int]
    seed_base: int
    target: str
    faults: tuple[str, ...]
    db: Path
    out: Path
    examples: int
    configs: tuple[tuple[str, str], ...]
    commit: str
    engines: tuple[str, ...] = ENGINES
    fault_rate: int = 0  # fault plans (`impl.fault_points`): a walker plans a failure in this % of its steps

    @property
    def walker_steps(self) -> int:
        """The steps a walker unit walks per example on this plan's target (`WALKER_STEPS_PER_EXAMPLE`)."""
        return WALKER_STEPS_PER_EXAMPLE[self.target]

    def unit(self, index: int, worker: int, examples: int) -> Unit:
        """Unit `index` of `worker`, of size `examples`: its engine from the worker's cycle, its configuration the
        next of that engine's own (so that each engine walks every one of its configurations)."""
        seed = unit_seed(self.seed_base, index, worker, self.workers, *self.shard)
        offset = worker + (self.shard[0] - 1) * self.workers
        cycle = engine_cycle(self.engines)
        engine = cycle[(offset + index) % len(cycle)]
        nth = engine_turns(cycle, engine, offset + index) - engine_turns(cycle, engine, offset)  # its earlier units
        pool, swarm = unit_configuration(self.engine_configs(engine), nth, worker, self.workers, self.shard[0])
        return Unit(worker, index, seed, pool, swarm, examples, engine)

    def engine_configs(self, engine: str) -> list[tuple[str, str]]:
        """The configurations `engine` walks: every pool/swarm pair for Hypothesis, every pool for the walker."""
        if engine == WALKER:
            return [(pool, WALKER_SWARM) for pool in dict.fromkeys(pool for pool, _ in self.configs)]
        return list(self.configs)

    def rerun_command(self) -> str:
        faults = "".join(f" --fault {f}" for f in self.faults)
        faults += f" --fault-rate {self.fault_rate}" if self.fault_rate else ""
        return (
            f"python -m fuzz campaign --budget {self.budget_s:g}s --workers {self.workers} "
            f"--shard {self.shard[0]}/{self.shard[1]} --seed {self.seed_base} --target {self.target} "
            f"--engines {','.join(self.engines)} --examples {self.examples} --db {self.db} --out {self.out}{faults}"
        )


def header(plan: Plan) -> list[str]:
    """The lines printed first: enough to rerun the campaign exactly."""
    shard, shards = plan.shard
    cycle = engine_cycle(plan.engines)
    offset = (shard - 1) * plan.workers
    lines = [
        f"fuzz campaign: commit {plan.commit}, seed base {plan.seed_base}, shard {shard}/{shards}, "
        f"{plan.workers} workers, budget {plan.budget_s:g} s, target {plan.target}, "
        f"faults {', '.join(plan.faults) or 'none'}, {_plans(plan.fault_rate)}",
        f"  engines {', '.join(cycle)} (worker w's unit k: position k + w + {offset} of that cycle); "
        f"seed of unit k of worker w: {plan.seed_base} + ((k * {plan.workers} + w) * {shards} + {shard - 1})",
    ]
    for engine in ENGINES:
        if engine in cycle:
            lines += _engine_lines(plan, engine, offset)
    return [
        *lines,
        f"  example database {plan.db} (keyed by pool, swarm and faults); counterexamples and report in {plan.out}",
        f"  rerun: {plan.rerun_command()}",
    ]


def _plans(rate: int) -> str:
    if not rate:
        return "no fault plans"
    return (
        f"fault plans in {rate}% of the walker's steps and wherever Hypothesis arms one (a point installed and "
        "never failed by any unit fails the campaign)"
    )


def _engine_lines(plan: Plan, engine: str, offset: int) -> list[str]:
    configs = plan.engine_configs(engine)
    if engine == WALKER:
        unit = (
            f"a walk of {plan.examples * plan.walker_steps} steps from the seed, which draws its own swarm "
            f"(walker shrink at most {SHRINK_S} s)"
        )
        space = f"{len(configs)} pools"
    else:
        unit = f"{plan.examples} test cases of up to {STEPS_PER_CASE} steps (shrink at most {SHRINK_S} s)"
        space = f"{len(configs)} pool/swarm pairs"
    names = ", ".join(f"{pool}/{swarm}" for pool, swarm in configs)
    return [
        f"  {engine} unit: {unit}; the last units before the budget are smaller",
        f"  {engine} configurations ({space}; worker w's n-th {engine} unit runs (n + w + {offset}) mod "
        f"{len(configs)}): {names}",
    ]
