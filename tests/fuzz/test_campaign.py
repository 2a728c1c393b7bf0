"""`python -m fuzz campaign`: a killed campaign keeps its counterexamples and a rerun re-checks them; shards never
share a seed; duplicates group once; the report, its plots and the exit codes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis.internal.conjecture import engine as hypothesis_engine

from fuzz.__main__ import main as fuzz_main
from fuzz.campaign.cli import parse_duration, parse_shard
from fuzz.campaign.findings import DUPLICATE, NEW_GROUP, NEW_SHAPE, SEEN, add_finding
from fuzz.campaign.plan import HYPOTHESIS, Plan, configurations, last_unit_examples, unit_configuration, unit_seed
from fuzz.campaign.report import markdown
from fuzz.campaign.report_data import EXIT_FAILED
from fuzz.campaign.supervisor import run_campaign
from fuzz.campaign.unit import UnitHooks, run_unit
from fuzz.machine import SWARMS
from fuzz.profiles import DEFAULT_POOL, POOLS
from fuzz.replay import load_trace, replay
from model.trace import Failure, Step, Trace

ROOT = Path(__file__).resolve().parents[2]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
FAULT = "legacy_reuse_guard"


def _campaign(out: Path, *flags: str) -> list[str]:
    return [sys.executable, "-m", "fuzz", "campaign", "--out", str(out), "--db", str(out.parent / "db"), *flags]


def _env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1"}


def _counterexamples(out: Path) -> list[Path]:
    return sorted(p for p in out.glob("*.json") if p.name != "report.json")


def test_killed_campaign_keeps_its_counterexample_and_a_rerun_rechecks_it(tmp_path: Path) -> None:
    out = tmp_path / "out"
    log = (tmp_path / "first.log").open("w")
    proc = subprocess.Popen(
        # Hypothesis's shrink takes seconds: the kill lands before it ends (the walker's takes milliseconds).
        _campaign(out, "--budget", "10m", "--workers", "1", "--fault", FAULT, "--seed", "1", "--engines", "hypothesis"),
        cwd=ROOT,
        env=_env(),
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 150
        while not _counterexamples(out) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    (path,) = _counterexamples(out)
    trace = load_trace(path, None)
    assert trace.failure is not None and trace.config["faults"] == [FAULT]
    recorded = (trace.failure.step, trace.failure.kind, trace.failure.id)
    replayed = replay(trace).failure
    assert replayed is not None and (replayed.step, replayed.kind, replayed.id) == recorded
    assert fuzz_main(["replay", str(path)]) == 1

    rerun = subprocess.run(
        _campaign(out, "--budget", "1s", "--workers", "1", "--fault", FAULT, "--seed", "2"),
        cwd=ROOT,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert rerun.returncode == 1, rerun.stdout + rerun.stderr
    lines = rerun.stdout.splitlines()
    resumed = next(i for i, line in enumerate(lines) if line.startswith("resume: re-checking 1 counterexamples"))
    assert lines[resumed + 1].endswith(f"{path}: reproduces")
    assert not any(line.startswith("[") for line in lines[:resumed]), "progress came before the re-check"
    report = json.loads((out / "report.json").read_text())
    assert [(r["file"], r["status"]) for r in report["rechecked"]] == [(str(path), "reproduces")]
    rechecked = report["rechecked"][0]["failure"]
    assert (rechecked["step"], rechecked["kind"], rechecked["id"]) == recorded
    assert load_trace(path, None).meta["shrunk"] is not False, "a trace left unshrunk was not trimmed on resume"
    assert sum(g["count"] for g in report["groups"]) >= 1 and report["exit_code"] == 1
    assert not any(g["false_alarm"] for g in report["groups"])


def test_a_failing_step_is_on_disk_before_the_shrink(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hypothesis_engine, "MAX_SHRINKING_SECONDS", 2)
    plan = Plan(
        1.0,
        1,
        (1, 1),
        3,
        "reference",
        (FAULT,),
        tmp_path / "db",
        tmp_path / "out",
        50,
        tuple(configurations(["chunk-p1"], ["all"])),
        "test",
        (HYPOTHESIS,),
    )
    seen: list[Trace] = []
    hooks = UnitHooks(lambda progress: None, lambda path: seen.append(load_trace(path, None)))
    result = run_unit(plan, plan.unit(0, 0, 50), hooks)
    assert len(seen) == 1 and seen[0].meta["shrunk"] is False and seen[0].failure is not None
    assert result.counterexample is not None and result.shrunk
    final = load_trace(Path(result.counterexample), None)
    assert final.meta["shrunk"] is True and len(final.steps) <= len(seen[0].steps)


def test_shards_and_workers_never_share_a_seed() -> None:
    for workers in (1, 2, 3):
        for shards in (1, 2, 4):
            seeds = [
                unit_seed(1000, k, w, workers, shard, shards)
                for k in range(200)
                for w in range(workers)
                for shard in range(1, shards + 1)
            ]
            assert len(set(seeds)) == len(seeds)
            assert min(seeds) == 1000 and max(seeds) == 1000 + len(seeds) - 1  # the seed space, densely


def test_every_worker_rotates_through_every_configuration() -> None:
    configs = configurations(sorted(POOLS), SWARMS)
    assert len(configs) == len(POOLS) * len(SWARMS)
    for worker in range(3):
        assert {unit_configuration(configs, k, worker, 3, 1) for k in range(len(configs))} == set(configs)
    assert unit_configuration(configs, 0, 0, 2, 1) != unit_configuration(configs, 0, 1, 2, 1)


def test_two_shards_run_disjoint_seeds_and_write_the_report(tmp_path: Path) -> None:
    procs = {
        shard: subprocess.Popen(
            _campaign(
                tmp_path / shard,
                "--budget",
                "1s",
                "--workers",
                "2",
                "--examples",
                "2",
                "--seed",
                "500",
                "--shard",
                f"{shard}/2",
            ),
            cwd=ROOT,
            env=_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for shard in ("1", "2")
    }
    outputs = {shard: proc.communicate(timeout=240)[0] for shard, proc in procs.items()}
    seeds = {}
    for shard, proc in procs.items():
        assert proc.returncode == 0, outputs[shard]
        assert outputs[shard].startswith("fuzz campaign: commit ")
        assert f"seed base 500, shard {shard}/2, 2 workers" in outputs[shard].splitlines()[0]
        out = tmp_path / shard
        report = json.loads((out / "report.json").read_text())
        units = report["units"]
        assert {u["worker"] for u in units} == {0, 1}
        assert all(u["seed"] == unit_seed(500, u["index"], u["worker"], 2, int(shard), 2) for u in units)
        seeds[shard] = {u["seed"] for u in units}
        assert report["steps"] > 0 and len(report["corners"]) > 0 and report["coverage"]
        assert "# Fuzz campaign: nothing found" in (out / "report.md").read_text()
        for plot in report["plots"]:
            assert (out / plot).read_bytes().startswith(PNG_MAGIC)
    assert seeds["1"] and seeds["2"] and not seeds["1"] & seeds["2"]


def _trace(ops: list[str], faults: list[str]) -> Trace:
    steps = [Step(op, {"req": 0}) for op in ops]
    failure = Failure(len(ops) - 1, "accepted-forbidden", "reuse_released", "accepted")
    return Trace({**DEFAULT_POOL, "faults": faults}, 1, steps, failure)


def test_identical_failures_group_once_with_a_count() -> None:
    groups: dict[Any, Any] = {}
    assert add_finding(groups, "a.json", _trace(["admit", "finish", "reuse_released"], [FAULT])) == NEW_GROUP
    assert add_finding(groups, "b.json", _trace(["admit", "finish", "reuse_released"], [FAULT])) == DUPLICATE
    assert add_finding(groups, "a.json", _trace(["admit", "finish", "reuse_released"], [FAULT])) == SEEN
    assert add_finding(groups, "c.json", _trace(["admit", "abort", "reuse_released"], [FAULT])) == NEW_SHAPE
    assert add_finding(groups, "e.json", _trace(["finish", "reuse_released"], [FAULT])) == NEW_SHAPE
    (group,) = groups.values()
    assert [(sh.file, sh.count) for sh in group.shapes] == [("a.json", 2), ("c.json", 1), ("e.json", 1)]
    assert (group.count, group.representative, group.ops) == (4, "e.json", ["finish", "reuse_released"])
    assert not group.false_alarm
    assert add_finding(groups, "d.json", _trace(["admit"], [])) == NEW_GROUP
    assert [g.representative for g in groups.values() if g.false_alarm] == ["d.json"]


def test_a_false_alarm_heads_the_report() -> None:
    groups: dict[Any, Any] = {}
    add_finding(groups, "d.json", _trace(["admit", "finish"], []))
    report = {
        "exit_code": 1,
        "groups": [{**g.as_json(), "regression": "t"} for g in groups.values()],
        "commit": "c",
        "seed_base": 0,
        "shard": "1/1",
        "workers": 1,
        "target": "reference",
        "faults": [],
        "budget_s": 1.0,
        "elapsed_s": 1.0,
        "units": [],
        "examples_per_unit": 1,
        "steps": 0,
        "steps_per_s": 0.0,
        "steps_per_core_hour": 0,
        "steps_per_cpu_hour": 0,
        "rerun": "x",
        "per_worker": [],
        "crashed": {},
        "rechecked": [],
        "corners": {},
        "engines": ["walker", "hypothesis"],
        "engine_cycle": ["walker", "walker", "walker", "hypothesis"],
        "per_engine": [],
        "transitions": {"union": 0},
        "transitions_over_time": {"columns": ["seconds", "union"], "points": []},
        "stall_s": 45.0,
    }
    lines = markdown(report).splitlines()
    assert lines[0] == "# Fuzz campaign: 1 counterexamples, 1 finding (1 shape)"
    assert lines[2].startswith("**FALSE ALARM: 1 findings")
    assert "### FALSE ALARM: accepted-forbidden reuse_released (1x, 1 shapes, shortest 2 steps)" in lines
    assert "| 1 | admit finish | `python -m fuzz replay d.json` |" in lines


def _crashing_worker(plan: Plan, worker: int, queue: Any, deadline: float) -> None:
    os._exit(3)


def test_a_crashed_worker_fails_the_campaign(tmp_path: Path) -> None:
    plan = Plan(
        1.0,
        1,
        (1, 1),
        0,
        "reference",
        (),
        tmp_path / "db",
        tmp_path / "out",
        1,
        tuple(configurations(sorted(POOLS), SWARMS)),
        "test",
    )
    with open(os.devnull, "w") as sink:
        result = run_campaign(plan, out=sink, worker=_crashing_worker)
    assert result.exit_code == EXIT_FAILED
    assert result.report["crashed"] == {"0": "exit code 3"}
    assert (tmp_path / "out" / "report.md").read_text().startswith("# Fuzz campaign: failed (1 workers crashed)")


@pytest.mark.parametrize(
    "flags",
    [
        ["--budget", "5x"],
        ["--budget", "0s"],
        ["--budget", "1m", "--shard", "3/2"],
        ["--budget", "1m", "--workers", "0"],
        ["--budget", "1m", "--fault", "nope"],
        [],
    ],
)
def test_bad_flags_exit_2_with_one_line(flags: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        fuzz_main(["campaign", *flags])
    assert exc.value.code == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert len(errors) == 1


def test_the_last_units_fit_the_budget() -> None:
    assert last_unit_examples(remaining_s=100.0, cases_per_s=5.0, examples=100) == 100
    assert last_unit_examples(remaining_s=2.0, cases_per_s=5.0, examples=100) == 10
    assert last_unit_examples(remaining_s=-1.0, cases_per_s=5.0, examples=100) == 1


def test_durations_and_shards_parse() -> None:
    assert [parse_duration(t) for t in ("90s", "10m", "8h", "2.5")] == [90.0, 600.0, 28800.0, 2.5]
    assert parse_shard("2/4") == (2, 4)
    for bad in ("0/4", "5/4", "1-4"):
        with pytest.raises(ValueError, match="a shard is I/N"):
            parse_shard(bad)
