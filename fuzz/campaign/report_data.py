"""A campaign's report as data (`report.json`): the plan, what each engine, worker and unit did (each worker's
steps/s over time and its stalls), the transitions each engine reached over time, the re-checks, the findings, and
the exit code they make; and the lines printed last."""

from __future__ import annotations

import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from fuzz.campaign.findings import found_line
from fuzz.campaign.plan import STEPS_PER_CASE, Plan, engine_cycle
from fuzz.campaign.resume import INTERNAL_ERROR, Recheck
from fuzz.campaign.series import STALL_S, Throughput
from fuzz.campaign.tally import Tally
from model.exits import EXIT_CLEAN, EXIT_FOUND, EXIT_INTERNAL

EXIT_FAILED = EXIT_INTERNAL  # the campaign itself failed: a worker crashed, or re-checking --out crashed kvlife

SECONDS_PER_HOUR = 3600.0


def report_data(plan: Plan, tally: Tally, rechecked: list[Recheck], crashed: dict[int, str]) -> dict[str, Any]:
    """The report: 70 if a worker crashed or a re-check crashed kvlife, else 1 if anything was found or a fault
    point the pools installed was never failed (with plans), else 0."""
    elapsed = time.time() - tally.start
    steps = sum(tally.steps.values())
    groups = sorted(tally.groups.values(), key=lambda g: (not g.false_alarm, g.kind, g.id, len(g.ops)))
    broken = crashed or any(r.status.startswith(INTERNAL_ERROR) for r in rechecked)
    points = fault_points(tally.units)
    never = [point for point, counts in points.items() if not counts["failed"]] if plan.fault_rate else []
    exit_code = EXIT_FAILED if broken else EXIT_FOUND if groups or never else EXIT_CLEAN
    return {
        "commit": plan.commit,
        "seed_base": plan.seed_base,
        "shard": f"{plan.shard[0]}/{plan.shard[1]}",
        "workers": plan.workers,
        "budget_s": plan.budget_s,
        "target": plan.target,
        "faults": list(plan.faults),
        "fault_rate": plan.fault_rate,
        "fault_points": points,
        "fault_points_never_failed": never,
        "examples_per_unit": plan.examples,
        "steps_per_case": STEPS_PER_CASE,
        "walker_steps_per_example": plan.walker_steps,
        "engines": list(plan.engines),
        "engine_cycle": list(engine_cycle(plan.engines)),
        "per_engine": [_engine_stats(engine, tally) for engine in tally.engines],
        "db": str(plan.db),
        "configurations": [list(c) for c in plan.configs],
        "rerun": plan.rerun_command(),
        "elapsed_s": round(elapsed, 2),
        "steps": steps,
        "steps_per_s": round(steps / max(elapsed, 1e-9), 1),
        "steps_per_core_hour": round(steps / max(elapsed * plan.workers, 1e-9) * SECONDS_PER_HOUR),
        "steps_per_cpu_hour": round(steps / max(sum(tally.cpu_s.values()), 1e-9) * SECONDS_PER_HOUR),
        "per_worker": [_worker_stats(w, tally) for w in range(plan.workers)],
        "stall_s": STALL_S,
        "corners": dict(sorted(tally.corners.items(), key=lambda kv: kv[1])),
        "coverage": [list(point) for point in tally.coverage],
        "transitions": {**{e: len(tally.transitions.get(e, ())) for e in tally.engines}, "union": len(tally.union)},
        "transitions_over_time": {
            "columns": ["seconds", *tally.engines, "union"],
            "points": [list(point) for point in tally.transitions_over_time.points],
        },
        "units": sorted(tally.units, key=lambda u: (u["worker"], u["index"])),
        "rechecked": [asdict(r) for r in rechecked],
        "groups": [g.as_json() for g in groups],
        "crashed": {str(w): why for w, why in crashed.items()},
        "exit_code": exit_code,
    }


def fault_points(units: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """Each fault point any unit's pools installed: its calls and planned failures over every unit."""
    points: dict[str, dict[str, int]] = {}
    for unit in units:
        for point, (reached, failed) in unit.get("points", {}).items():
            counts = points.setdefault(point, {"reached": 0, "failed": 0})
            counts["reached"] += reached
            counts["failed"] += failed
    return points


def _worker_stats(worker: int, tally: Tally) -> dict[str, Any]:
    steps, busy, cpu = tally.steps.get(worker, 0), tally.busy_s.get(worker, 0.0), tally.cpu_s.get(worker, 0.0)
    units = sum(1 for u in tally.units if u["worker"] == worker)
    throughput = tally.throughput.get(worker, Throughput())
    return {
        "worker": worker,
        "steps": steps,
        "seconds": round(busy, 2),
        "cpu_s": round(cpu, 2),
        "steps_per_s": round(steps / busy, 1) if busy > 0 else 0.0,
        "steps_per_cpu_s": round(steps / cpu, 1) if cpu > 0 else 0.0,
        "units": units,
        "series": [list(point) for point in throughput.rates()],  # (seconds, steps, steps/s over the interval)
        "stalls": [list(stall) for stall in throughput.stalls],
        "stall_count": throughput.stall_count,
    }


def _engine_stats(engine: str, tally: Tally) -> dict[str, Any]:
    units = [u for u in tally.units if u["engine"] == engine]
    steps, seconds = sum(u["steps"] for u in units), sum(u["seconds"] for u in units)
    return {
        "engine": engine,
        "units": len(units),
        "steps": steps,
        "seconds": round(seconds, 2),
        "steps_per_s": round(steps / seconds, 1) if seconds > 0 else 0.0,
        # A unit runs on one worker's core: its steps per second there, per hour, are per core-hour.
        "steps_per_core_hour": round(steps / seconds * SECONDS_PER_HOUR) if seconds > 0 else 0,
        "counterexamples": sum(1 for u in units if u["counterexample"]),
        "transitions": len(tally.transitions.get(engine, ())),
    }


def worker_lines(report: dict[str, Any]) -> list[str]:
    """A line per worker: its steps and rate, the slowest and fastest interval, and every stall longer than
    `stall_s` (an interval with no new step), or that it had none."""
    return [_worker_line(w, report["stall_s"]) for w in report["per_worker"]]


def _worker_line(stats: dict[str, Any], stall_s: float) -> str:
    rates = [point[2] for point in stats["series"]]
    spread = f", {min(rates):,.0f} to {max(rates):,.0f} per interval" if rates else ""
    line = f"worker {stats['worker']}: {stats['steps']:,} steps, {stats['steps_per_s']:,.0f} steps/s{spread}; "
    if not stats["stall_count"]:
        return line + f"no stall longer than {stall_s:g} s"
    said = ", ".join(f"{a:.0f}-{b:.0f} s ({b - a:.0f} s)" for a, b in stats["stalls"])
    more = stats["stall_count"] - len(stats["stalls"])
    said += f" and {more} more" if more else ""
    return line + f"STALLED {stats['stall_count']}x with no new step for over {stall_s:g} s: {said}"


def summary(report: dict[str, Any], out: Path) -> str:
    """The campaign's last line: its verdict, steps and rate, and where the report is."""
    found = sum(g["count"] for g in report["groups"])
    never = report.get("fault_points_never_failed", [])
    unfired = f"; fault points installed and never failed: {', '.join(never)}" if never else ""
    verdict = {
        EXIT_CLEAN: "nothing found",
        EXIT_FOUND: (f"{found} counterexamples: {found_line(report['groups'])}" if found else "no counterexample")
        + unfired,
        EXIT_FAILED: f"the campaign failed (an internal error): {len(report['crashed'])} workers crashed, "
        f"{sum(r['status'].startswith(INTERNAL_ERROR) for r in report['rechecked'])} re-checks crashed",
    }[report["exit_code"]]
    return (
        f"fuzz campaign: {verdict}; {report['steps']:,} steps in {report['elapsed_s']:.0f} s "
        f"({report['steps_per_s']:,.0f} steps/s, {report['steps_per_core_hour'] / 1e6:.2f} M per core-hour); report "
        f"in {out / 'report.md'}"
    )
