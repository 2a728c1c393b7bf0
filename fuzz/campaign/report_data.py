"""A campaign's report as data (`report.json`): the plan, what each worker and unit did, the re-checks, the
findings, and the exit code they make; and the summary line printed last."""

from __future__ import annotations

import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from fuzz.campaign.findings import found_line
from fuzz.campaign.plan import STEPS_PER_CASE, Plan
from fuzz.campaign.resume import INTERNAL_ERROR, Recheck
from fuzz.campaign.tally import Tally
from model.exits import EXIT_CLEAN, EXIT_FOUND, EXIT_INTERNAL

EXIT_FAILED = EXIT_INTERNAL  # the campaign itself failed: a worker crashed, or re-checking --out crashed kvlife


def report_data(plan: Plan, tally: Tally, rechecked: list[Recheck], crashed: dict[int, str]) -> dict[str, Any]:
    """The report: 70 if a worker crashed or a re-check crashed kvlife, else 1 if anything was found, else 0."""
    elapsed = time.time() - tally.start
    steps = sum(tally.steps.values())
    groups = sorted(tally.groups.values(), key=lambda g: (not g.false_alarm, g.kind, g.id, len(g.ops)))
    broken = crashed or any(r.status.startswith(INTERNAL_ERROR) for r in rechecked)
    exit_code = EXIT_FAILED if broken else EXIT_FOUND if groups else EXIT_CLEAN
    return {
        "commit": plan.commit,
        "seed_base": plan.seed_base,
        "shard": f"{plan.shard[0]}/{plan.shard[1]}",
        "workers": plan.workers,
        "budget_s": plan.budget_s,
        "target": plan.target,
        "faults": list(plan.faults),
        "examples_per_unit": plan.examples,
        "steps_per_case": STEPS_PER_CASE,
        "db": str(plan.db),
        "configurations": [list(c) for c in plan.configs],
        "rerun": plan.rerun_command(),
        "elapsed_s": round(elapsed, 2),
        "steps": steps,
        "steps_per_s": round(steps / max(elapsed, 1e-9), 1),
        "per_worker": [_worker_stats(w, tally) for w in range(plan.workers)],
        "corners": dict(sorted(tally.corners.items(), key=lambda kv: kv[1])),
        "coverage": [list(point) for point in tally.coverage],
        "units": sorted(tally.units, key=lambda u: (u["worker"], u["index"])),
        "rechecked": [asdict(r) for r in rechecked],
        "groups": [g.as_json() for g in groups],
        "crashed": {str(w): why for w, why in crashed.items()},
        "exit_code": exit_code,
    }


def _worker_stats(worker: int, tally: Tally) -> dict[str, Any]:
    steps, busy, cpu = tally.steps.get(worker, 0), tally.busy_s.get(worker, 0.0), tally.cpu_s.get(worker, 0.0)
    units = sum(1 for u in tally.units if u["worker"] == worker)
    return {
        "worker": worker,
        "steps": steps,
        "seconds": round(busy, 2),
        "cpu_s": round(cpu, 2),
        "steps_per_s": round(steps / busy, 1) if busy > 0 else 0.0,
        "steps_per_cpu_s": round(steps / cpu, 1) if cpu > 0 else 0.0,
        "units": units,
    }


def summary(report: dict[str, Any], out: Path) -> str:
    """The campaign's last line: its verdict, steps and rate, and where the report is."""
    found = sum(g["count"] for g in report["groups"])
    verdict = {
        EXIT_CLEAN: "nothing found",
        EXIT_FOUND: f"{found} counterexamples: {found_line(report['groups'])}",
        EXIT_FAILED: f"the campaign failed (an internal error): {len(report['crashed'])} workers crashed, "
        f"{sum(r['status'].startswith(INTERNAL_ERROR) for r in report['rechecked'])} re-checks crashed",
    }[report["exit_code"]]
    return (
        f"fuzz campaign: {verdict}; {report['steps']:,} steps in {report['elapsed_s']:.0f} s "
        f"({report['steps_per_s']:,.0f} steps/s); report in {out / 'report.md'}"
    )
