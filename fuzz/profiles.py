"""Fuzzing profiles: how long a run lasts, whether it is reproducible, and which pool it runs on."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, Phase, settings
from hypothesis.database import DirectoryBasedExampleDatabase

# The pools runs fuzz: small, so that rows, slots and pages run out often.
_SMALL = {"target": "reference", "device": "cpu", "rows": 4, "tokens": 64, "width": 32}
_PD_DECODE = {
    **_SMALL,
    "rows": 2,
    "row_pool": "decode",
    "pre_alloc_size": 2,
    "page_size": 1,
    "cache": "chunk",
    "speculative": True,
    "need_sort": True,
}
# Eviction both ways: radix-p4 evicts only in its own step (the allocator's on-demand hook off), radix-p1 evicts on
# demand inside allocation and retraction, as upstream ships it.
POOLS: dict[str, dict[str, Any]] = {
    "chunk-p1": {**_SMALL, "page_size": 1, "cache": "chunk", "speculative": False},
    "chunk-p4": {**_SMALL, "page_size": 4, "cache": "chunk", "speculative": False},
    "radix-p1": {**_SMALL, "page_size": 1, "cache": "radix", "speculative": False, "evict_on_demand": True},
    "radix-p4": {**_SMALL, "page_size": 4, "cache": "radix", "speculative": True},
    # A speculative tree at page size 1: every token a release keys past a stop is a tree slot of its own.
    "spec-p1": {**_SMALL, "page_size": 1, "cache": "radix", "speculative": True},
    # The PD decode side of an EAGLE server: two running rows and two pre-allocation rows (DecodeReqToTokenPool),
    # its allocator built with `need_sort` as a disaggregated server builds it (0.5.23
    # `mem_cache/kv_cache_configurator.py`: `need_sort=disaggregation_mode in ("decode", "prefill")`), so frees
    # wait in the release/staged pages until an allocation runs short and merges them. pd-p4 runs the paged
    # allocator's staged pages (`staged_pages`, `num_staged_pages` from 0.5.20) through the scheduler's flows.
    # Many short requests on little memory: the batch-wide scheduler steps (a decode retraction taking several
    # requests, the last one aborted) need more rows than the slots can serve at once.
    "busy-p1": {**_SMALL, "rows": 8, "tokens": 24, "width": 12, "page_size": 1, "cache": "chunk", "speculative": False},
    # Few rows on much memory: the rows run out while the adder's token budget still has room, where a request of a
    # higher priority preempts running ones (`PrefillAdder.preempt_to_schedule`) in a prefill round.
    "roomy-p1": {
        **_SMALL,
        "rows": 2,
        "tokens": 96,
        "width": 16,
        "page_size": 1,
        "cache": "chunk",
        "speculative": False,
    },
    "pd-p1": {**_PD_DECODE},
    "pd-p4": {**_PD_DECODE, "page_size": 4},
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
    # Without it no hill-climbing on the `target` scores: a budgeted hunt wants breadth, and on upstream, whose
    # differential replays the walk on every clone, the climb's replays can outlast the hunt's budget.
    climb: bool = True

    def hypothesis_settings(self, database_dir: Path) -> settings:
        database: Any = DirectoryBasedExampleDatabase(str(database_dir)) if self.keep_database else None
        return settings(
            max_examples=self.max_examples,
            stateful_step_count=self.steps_per_case,
            derandomize=self.derandomize,
            database=database,
            deadline=None,
            phases=tuple(
                p for p in PHASES if (self.shrink or p is not Phase.shrink) and (self.climb or p is not Phase.target)
            ),
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


def describe_pool(name: str, config: dict[str, Any]) -> str:
    """One line naming the pool a run steps: sizes, cache, how it evicts, and what the target leaves out."""
    eviction = "evicts on demand" if config.get("evict_on_demand") else "evicts in its own step"
    cache = f"{config['cache']} cache ({eviction})" if config["cache"] == "radix" else f"{config['cache']} cache"
    if config["cache"] == "radix" and config.get("target") == "sglang":
        cache += f", {config.get('tree_core', 'rust')} tree core where the version has cores"
    rows = f"{config['rows']} rows"
    if config.get("row_pool") == "decode":
        rows = f"{config['rows']} + {config.get('pre_alloc_size', 0)} pre-allocation rows (DecodeReqToTokenPool)"
    line = (
        f"pool {name}: {rows}, {config['tokens']} slots, width {config['width']}, "
        f"page size {config['page_size']}, {cache}, speculative {config['speculative']}, {config['device']}"
    )
    if POOLS.get(name, {}).get("speculative") and not config["speculative"]:
        line += f" (the {config.get('target')} target runs this shape without its speculative steps)"
    return line
