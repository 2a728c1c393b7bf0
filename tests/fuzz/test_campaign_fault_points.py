"""`fuzz campaign --fault-rate P`: both engines' units count each fault point's calls and planned failures, the
report says them, and a point the pools installed that no unit failed fails the campaign (exit 1)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

from fuzz.campaign.plan import HYPOTHESIS, WALKER, Plan, configurations
from fuzz.campaign.report import markdown
from fuzz.campaign.report_data import report_data, summary
from fuzz.campaign.tally import Tally
from fuzz.campaign.unit import UnitHooks, UnitResult, run_unit
from fuzz.campaign.walker_unit import run_walker_unit
from fuzz.fault_plans import installed_points
from fuzz.profiles import POOLS
from model.exits import EXIT_CLEAN, EXIT_FOUND

ROOT = Path(__file__).resolve().parents[2]
HOOKS = UnitHooks(lambda progress: None, lambda path: None)


def _plan(tmp_path: Path, engine: str, rate: int) -> Plan:
    return Plan(
        1.0,
        1,
        (1, 1),
        11,
        "reference",
        (),
        tmp_path / "db",
        tmp_path / "out",
        20,
        tuple(configurations(["chunk-p1"], ["all"])),
        "test",
        (engine,),
        rate,
    )


def test_both_engines_count_the_points_of_a_unit_with_plans(tmp_path: Path) -> None:
    installed = installed_points({**POOLS["chunk-p1"], "target": "reference"})
    walker_plan, machine_plan = _plan(tmp_path, WALKER, 20), _plan(tmp_path, HYPOTHESIS, 20)
    walked = run_walker_unit(walker_plan, walker_plan.unit(0, 0, 20), HOOKS)
    tested = run_unit(machine_plan, machine_plan.unit(0, 0, 20), HOOKS)
    for result in (walked, tested):
        assert set(result.points) == installed, result.engine
        assert all(reached > 0 for reached, _ in result.points.values()), result.points
        assert sum(failed for _, failed in result.points.values()) > 0, (result.engine, result.points, result.steps)
        assert result.counterexample is None  # the reference pool keeps the contract of a failure
    assert set(walked.points) == installed and all(failed for _, failed in walked.points.values())


def test_a_unit_without_plans_counts_no_points(tmp_path: Path) -> None:
    plan = _plan(tmp_path, WALKER, 0)
    assert run_walker_unit(plan, plan.unit(0, 0, 5), HOOKS).points == {}


def _report(tmp_path: Path, rate: int, points: dict[str, list[int]]) -> dict[str, object]:
    tally = Tally(time.time())
    unit = UnitResult(0, 0, 11, "chunk-p1", "per-seed", 3, 10, 1, 1.0, engine=WALKER, points=points)
    tally.units.append(asdict(unit))
    return report_data(_plan(tmp_path, WALKER, rate), tally, [], {})


def test_a_point_installed_and_never_failed_fails_the_campaign(tmp_path: Path) -> None:
    report = _report(tmp_path, 10, {"row_alloc": [40, 0], "kv_alloc": [50, 2]})
    assert report["exit_code"] == EXIT_FOUND
    assert report["fault_points_never_failed"] == ["row_alloc"]
    expected = {"row_alloc": {"reached": 40, "failed": 0}, "kv_alloc": {"reached": 50, "failed": 2}}
    assert report["fault_points"] == expected
    assert "no counterexample; fault points installed and never failed: row_alloc" in summary(report, tmp_path)
    text = markdown(report)
    assert text.startswith("# Fuzz campaign: no counterexample; fault points never failed: row_alloc")
    assert "| row_alloc | 40 | 0 |" in text


def test_every_point_failed_is_a_clean_campaign(tmp_path: Path) -> None:
    report = _report(tmp_path, 10, {"row_alloc": [40, 1], "kv_alloc": [50, 2]})
    assert report["exit_code"] == EXIT_CLEAN and report["fault_points_never_failed"] == []


def test_without_plans_no_point_is_configured(tmp_path: Path) -> None:
    report = _report(tmp_path, 0, {})
    assert report["exit_code"] == EXIT_CLEAN and "## Fault points" not in markdown(report)


def test_a_campaign_with_plans_reports_every_point_failed(tmp_path: Path) -> None:
    out = tmp_path / "out"
    flags = ["--budget", "2s", "--workers", "1", "--examples", "3", "--seed", "7", "--fault-rate", "20"]
    proc = subprocess.run(
        [sys.executable, "-m", "fuzz", "campaign", "--out", str(out), "--db", str(tmp_path / "db"), *flags],
        cwd=ROOT,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "fault plans in 20% of the walker's steps" in proc.stdout.splitlines()[0]
    assert "--fault-rate 20" in proc.stdout
    report = json.loads((out / "report.json").read_text())
    assert report["fault_rate"] == 20 and report["fault_points"]
    assert all(c["failed"] > 0 for c in report["fault_points"].values()), report["fault_points"]
    assert "## Fault points" in (out / "report.md").read_text()
