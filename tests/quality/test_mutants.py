"""Quality: with a fault switch on, the fuzzer finds a small counterexample, which replays with the fault and
passes without it.

`python -m fuzz mutants` grades every switch under the ci profile in fresh subprocesses; this is its fast
subset, run in-process on a short derandomized profile: PR #37167's two and a few from each pool.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fuzz.__main__ import main as fuzz_main
from fuzz.profiles import POOLS, Profile
from fuzz.replay import load_trace, replay
from fuzz.run import run

# Short cases shrink fast, and every fault below shows within a handful of steps; up to 1000 cases, since the
# free-group and unchecked-batch rules share the draws (pp_manual_release on chunk-p1 needs several hundred
# derandomized cases, and a run stops at its first failure, so the bound costs only a case that is not found).
FAST = Profile("quality", max_examples=1000, steps_per_case=10, derandomize=True, keep_database=False)

# (fault, pool, the most steps its shrunk counterexample may have)
CASES = [
    ("legacy_reuse_guard", "chunk-p1", 4),
    ("pp_manual_release", "chunk-p1", 4),
    ("chunk_row_free_between_chunks", "chunk-p1", 2),
    ("chunk_cache_skip_stash", "chunk-p1", 3),
    ("finish_skips_row_free", "chunk-p1", 4),
    ("double_free_within_group", "chunk-p1", 3),
    ("lock_walk_off_by_one", "radix-p4", 3),
    ("stale_last_node_after_reset", "radix-p4", 3),
]


@pytest.mark.parametrize(("fault", "pool", "most_steps"), CASES)
def test_fault_is_found_small_and_replays_only_with_it(tmp_path: Path, fault: str, pool: str, most_steps: int) -> None:
    result = run({**POOLS[pool], "faults": [fault]}, FAST, None, tmp_path / "ce", tmp_path / "db")
    assert result.counterexample is not None, f"{fault} was not found on {pool}"
    trace = load_trace(result.counterexample, None)
    assert trace.config["faults"] == [fault]
    assert len(trace.steps) <= most_steps, f"{fault}: {len(trace.steps)} steps"
    found, recorded = replay(trace).failure, trace.failure
    assert found is not None and recorded is not None
    assert (found.step, found.kind, found.id) == (recorded.step, recorded.kind, recorded.id), "replayed otherwise"
    assert fuzz_main(["replay", str(result.counterexample)]) == 1
    assert fuzz_main(["replay", str(result.counterexample), "--faults", "none"]) == 0
