"""Fuzzing profiles: how long a run lasts, whether it is reproducible, and which pool it runs on."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, Phase, settings
from hypothesis.database import DirectoryBasedExampleDatabase

# The pools runs fuzz: small, so that rows, slots and pages run out often.
_SMALL = {"target": "reference", "device": "cpu", "rows": 4, "tokens": 64, "width": 32}
POOLS: dict[str, dict[str, Any]] = {
    "chunk-p1": {**_SMALL, "page_size": 1, "cache": "chunk", "speculative": False},
    "radix-p4": {**_SMALL, "page_size": 4, "cache": "radix", "speculative": True},
    # The paged allocator under the chunk cache: the page-size-4 shape the upstream target drives.
    "chunk-p4": {**_SMALL, "page_size": 4, "cache": "chunk", "speculative": False},
}
TARGET_NAMES = ("reference", "sglang")  # `--target` replaces a pool's target; the shapes are the same
DEFAULT_POOL = POOLS["chunk-p1"]
# The explain phase re-runs failing cases many times; counterexamples are shrunk traces instead. Shrink is last.
PHASES = (Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink)


@dataclass(frozen=True)
class Profile:
    """A named budget: test cases, steps per case, determinism, and whether examples are kept."""

    name: str
    max_examples: int
    steps_per_case: int
    derandomize: bool
    keep_database: bool
    shrink: bool = True  # without it a failure is reported as first found (a known finding needs no shrinking)

    def hypothesis_settings(self, database_dir: Path) -> settings:
        database: Any = DirectoryBasedExampleDatabase(str(database_dir)) if self.keep_database else None
        return settings(
            max_examples=self.max_examples,
            stateful_step_count=self.steps_per_case,
            derandomize=self.derandomize,
            database=database,
            deadline=None,
            phases=PHASES if self.shrink else PHASES[:-1],
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
            print_blob=False,
            report_multiple_bugs=False,
        )


PROFILES = {
    p.name: p
    for p in (
        Profile("dev", max_examples=200, steps_per_case=30, derandomize=False, keep_database=False),
        Profile("ci", max_examples=400, steps_per_case=30, derandomize=True, keep_database=False),
        Profile("nightly", max_examples=100_000, steps_per_case=50, derandomize=False, keep_database=True),
    )
}
