"""Campaign throughput: lockstep steps per core-hour with every worker busy, and the speed-up from 1 worker to N.

Two short campaigns on the reference pool with no fault (one worker, then one per core), through the in-process
API; each runs in a fresh folder, so neither replays the other's example database. Wall-clock rates depend on what
else the machine runs; the rate per CPU second of the workers does not.
"""

from __future__ import annotations

import io
import os
import time
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

from fuzz.campaign.plan import Plan, configurations
from fuzz.campaign.supervisor import run_campaign
from fuzz.machine import SWARMS
from fuzz.profiles import POOLS

BUDGET_S = 30.0
UNIT_EXAMPLES = 50  # units of about 5 s, so that a 30 s campaign ends close to its budget
SECONDS_PER_HOUR = 3600.0


def campaign(workers: int, budget_s: float = BUDGET_S) -> dict[str, Any]:
    """Run one campaign; its steps, wall seconds (start-up and report included) and the workers' CPU seconds."""
    with TemporaryDirectory() as tmp:
        plan = Plan(
            budget_s,
            workers,
            (1, 1),
            0,
            "reference",
            (),
            Path(tmp) / "db",
            Path(tmp) / "out",
            UNIT_EXAMPLES,
            tuple(configurations(sorted(POOLS), SWARMS)),
            "bench",
        )
        start = time.perf_counter()
        report = run_campaign(plan, out=io.StringIO(), err=io.StringIO()).report
        seconds = time.perf_counter() - start
    cpu_s = sum(w["cpu_s"] for w in report["per_worker"])
    return {"workers": workers, "steps": report["steps"], "seconds": seconds, "cpu_s": cpu_s}


def _line(run: dict[str, Any]) -> str:
    rate, per_cpu = run["steps"] / run["seconds"], run["steps"] / max(run["cpu_s"], 1e-9)
    return (
        f"  {run['workers']} worker(s): {run['steps']:>8,} steps in {run['seconds']:5.1f} s wall "
        f"({rate:6.0f} steps/s), {run['cpu_s']:5.1f} CPU s in workers ({per_cpu:4.0f} steps per CPU second)"
    )


def main() -> None:
    workers = os.cpu_count() or 1
    print(f"campaign: {BUDGET_S:g} s campaigns on the reference pool, no fault, {UNIT_EXAMPLES} test cases a unit")
    one = campaign(1)
    print(_line(one), flush=True)
    many = campaign(workers)
    print(_line(many))
    wall_rate = many["steps"] / many["seconds"]
    print(
        f"  {wall_rate / workers * SECONDS_PER_HOUR:,.0f} lockstep steps per core-hour with {workers} workers "
        f"(wall clock; {many['steps'] / many['cpu_s'] * SECONDS_PER_HOUR:,.0f} per CPU-hour of the workers)"
    )
    print(f"  speed-up from 1 to {workers} workers: {wall_rate / (one['steps'] / one['seconds']):.2f}x (wall clock)")


if __name__ == "__main__":
    main()
