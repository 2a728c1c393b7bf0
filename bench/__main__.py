"""`make bench`: every number kvlife promises, in one run. Run from the repository root: `python -m bench`.

1. prover: seconds per theorem, and bounded model checking for a pool of 4 rows and one of 1,000,000 rows (the
   array encoding should make the two cost the same), two ways:
   - search: "no two live records on one row" with the proved invariants as lemmas *except* the four row
     invariants (row-owner, row-held-by-owner, row-exclusive, live-row-owned), which imply the property; the row
     reports the deepest depth settled within the budget;
   - unrolling: depth 10 and 20 with every proved invariant as a lemma. Those lemmas imply the property at each
     state, so this row measures what the unrolled encoding costs to build and check, not a search;
2. lockstep: the same Hypothesis rules run (a) in lockstep against the reference pool on CPU and (b) on the
   model alone; steps per second for each and their ratio; then where a lockstep step's time goes;
3. walker: the seeded walker beside the Hypothesis machine on the same pools (steps/s, per core-hour, as a
   fraction of the pool-call ceiling) and both engines' time to first failure on the exam (`bench/walker_bench.py`);
4. campaign: steps per core-hour with every worker busy, and the speed-up from 1 worker to one per core;
5. the whole-pool page check (oracle loop, vectorized torch, Triton on CUDA) on a production-size pool.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

from hypothesis.stateful import get_state_machine_test

from bench import campaign_bench, page_check_bench, walker_bench
from bench.lockstep_profile import breakdown
from fuzz.flags import one_torch_thread
from fuzz.machine import Recorder, build_machine
from fuzz.model_only import ModelOnly
from fuzz.profiles import POOLS, Profile
from model.prove import bmc
from model.state import Sizes
from model.theorems import SYMBOLIC, THEOREMS, steps_of, two_live_on_one_row

BMC_TIMEOUT_MS = 300_000
BMC_BUDGET_S = 300.0  # per depth and pool size: past it the row says "timeout after N s"
SEARCH_BUDGET_S = 120.0  # per pool size, for the search without the row lemmas
SEARCH_DEPTH = 20
ROW_LEMMAS = frozenset({"row-owner", "row-held-by-owner", "row-exclusive", "live-row-owned"})
LOCKSTEP = Profile("bench", max_examples=300, steps_per_case=30, derandomize=True, keep_database=False)


def prover() -> None:
    print("prover: seconds per theorem")
    total = 0.0
    for theorem in THEOREMS:
        result = theorem.run(theorem.name, BMC_TIMEOUT_MS)
        total += result.seconds
        print(f"  {theorem.name:<46} {result.outcome:<9} {result.seconds:8.3f} s")
    print(f"  all {len(THEOREMS)} theorems: {total:.1f} s")


def bmc_search() -> None:
    lemmas = [inv for inv in SYMBOLIC if inv.id not in ROW_LEMMAS]
    print(
        f"bmc search: no two live records on one row, proved invariants except the row ones as lemmas, "
        f"up to depth {SEARCH_DEPTH}, {SEARCH_BUDGET_S:.0f} s budget each"
    )
    for rows in (4, 1_000_000):
        _bmc_row(rows, SEARCH_DEPTH, lemmas, SEARCH_BUDGET_S)


def bmc_unrolling(depths: list[int]) -> None:
    print(
        f"bmc unrolling: same property, every proved invariant as a lemma (they imply it: this is the encoding's "
        f"cost, not a search), {BMC_BUDGET_S:.0f} s budget each"
    )
    for depth in depths:
        for rows in (4, 1_000_000):
            _bmc_row(rows, depth, SYMBOLIC, BMC_BUDGET_S)


def _bmc_row(rows: int, depth: int, lemmas: list[Any], budget_s: float) -> None:
    sizes = Sizes(rows, 64, 32)
    result = bmc(
        "bench",
        steps_of(frozenset()),
        sizes,
        two_live_on_one_row,
        depth,
        BMC_TIMEOUT_MS,
        lemmas=lemmas,
        budget_s=budget_s,
    )
    outcome = result.detail if result.outcome == "unknown" else f"{result.outcome} (depth {result.depth})"
    print(f"  depth {depth:>2}, {rows:>9,} rows: {outcome} in {result.seconds:.1f} s", flush=True)


def lockstep() -> None:
    print(f"lockstep: {LOCKSTEP.max_examples} test cases of up to {LOCKSTEP.steps_per_case} steps, same rules")
    for pool in sorted(POOLS):
        rates = {}
        for label, driver in (("lockstep vs reference pool", None), ("model alone", ModelOnly)):
            rates[label] = _rate(pool, driver)
            print(f"  {pool} {label:<27} {rates[label]:8.0f} steps/s", flush=True)
        ratio = rates["model alone"] / rates["lockstep vs reference pool"]
        print(f"  {pool} lockstep costs {ratio:.2f}x the model alone")
    for pool in sorted(POOLS):
        breakdown(pool, LOCKSTEP)


def _rate(pool: str, driver: type | None) -> float:
    recorder = Recorder({**POOLS[pool], "faults": []})
    if driver is not None:
        recorder.driver = driver
    with TemporaryDirectory() as db:
        test = get_state_machine_test(build_machine(recorder), settings=LOCKSTEP.hypothesis_settings(Path(db)))
        start = time.perf_counter()
        test()
        return recorder.total_steps / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument(
        "--quick",
        action="store_true",
        help="BMC unrolling at depth 10 only, no BMC search or campaign, a small page-check pool",
    )
    args = parser.parse_args()
    one_torch_thread()  # as `fuzz run` and the campaign's workers step their pools (the page check sets its own)
    prover()
    if not args.quick:
        bmc_search()
    bmc_unrolling([10] if args.quick else [10, 20])
    lockstep()
    walker_bench.main(["--quick"] if args.quick else [])
    if not args.quick:
        campaign_bench.main()
    page_check_bench.run(quick=args.quick)


if __name__ == "__main__":
    main()
