"""A campaign's plan: what decides each unit (its seed, its pool and swarm, its size), and the lines that say it.

Unit k of worker w in shard I of N gets seed `BASE + ((k * workers + w) * N + I - 1)`, so that workers and shards
never repeat each other's seeds, and walks the configurations from its own offset.
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


def unit_seed(base: int, index: int, worker: int, workers: int, shard: int, shards: int) -> int:
    """The seed of unit `index` of `worker` in shard `shard` (1-based) of `shards`: distinct for every
    (index, worker, shard), so shards and workers never repeat each other's seeds."""
    return base + ((index * workers + worker) * shards + (shard - 1))


def configurations(pools: Iterable[str], swarms: Iterable[str]) -> list[tuple[str, str]]:
    """Every (pool, swarm) pair, the pools alternating so that consecutive units change pool."""
    return [(pool, swarm) for swarm in swarms for pool in pools]


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
    """One unit of work: who runs it, its place in that worker's stream, its seed, configuration and test cases."""

    worker: int
    index: int
    seed: int
    pool: str
    swarm: str
    examples: int


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

    def unit(self, index: int, worker: int, examples: int) -> Unit:
        """Unit `index` of `worker`, running `examples` test cases."""
        seed = unit_seed(self.seed_base, index, worker, self.workers, *self.shard)
        pool, swarm = unit_configuration(list(self.configs), index, worker, self.workers, self.shard[0])
        return Unit(worker, index, seed, pool, swarm, examples)

    def rerun_command(self) -> str:
        faults = "".join(f" --fault {f}" for f in self.faults)
        return (
            f"python -m fuzz campaign --budget {self.budget_s:g}s --workers {self.workers} "
            f"--shard {self.shard[0]}/{self.shard[1]} --seed {self.seed_base} --target {self.target} "
            f"--examples {self.examples} --db {self.db} --out {self.out}{faults}"
        )


def header(plan: Plan) -> list[str]:
    """The lines printed first: enough to rerun the campaign exactly."""
    shard, shards = plan.shard
    configs = ", ".join(f"{pool}/{swarm}" for pool, swarm in plan.configs)
    return [
        f"fuzz campaign: commit {plan.commit}, seed base {plan.seed_base}, shard {shard}/{shards}, "
        f"{plan.workers} workers, budget {plan.budget_s:g} s, target {plan.target}, "
        f"faults {', '.join(plan.faults) or 'none'}",
        f"  unit: one Hypothesis run of {plan.examples} test cases of up to {STEPS_PER_CASE} steps (shrink at most "
        f"{SHRINK_S} s; the last units before the budget run fewer); "
        f"seed of unit k of worker w: {plan.seed_base} + ((k * {plan.workers} + w) * {shards} + {shard - 1})",
        f"  configuration space ({len(plan.configs)} pool/swarm pairs, worker w runs pair (k + w + "
        f"{(shard - 1) * plan.workers}) mod {len(plan.configs)}): {configs}",
        f"  example database {plan.db} (keyed by pool, swarm and faults); counterexamples and report in {plan.out}",
        f"  rerun: {plan.rerun_command()}",
    ]
