"""Campaigns that mix the walker and Hypothesis: the engine cycle and each engine's configurations, a walker unit's
counterexample (raw, then shrunk, replayable), both engines' findings in one group, a rerun on mixed `--out`,
transitions per engine, and each worker's throughput series with its stalls."""

from __future__ import annotations

import io
import itertools
import json
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis.internal.conjecture import engine as hypothesis_engine

import fuzz.campaign.unit as unit_module
from fuzz.__main__ import main as fuzz_main
from fuzz.campaign.cli import parse_engines
from fuzz.campaign.plan import (
    ENGINES,
    HYPOTHESIS,
    WALKER,
    WALKER_STEPS_PER_EXAMPLE,
    WALKER_SWARM,
    Plan,
    Unit,
    configurations,
    header,
    unit_configuration,
    unit_seed,
)
from fuzz.campaign.report_data import report_data, worker_lines
from fuzz.campaign.series import Series, Throughput
from fuzz.campaign.supervisor import run_campaign
from fuzz.campaign.tally import Tally
from fuzz.campaign.unit import Progress, UnitHooks, run_unit
from fuzz.campaign.walker_unit import WalkProgress, run_walker_unit
from fuzz.campaign.worker import Heartbeat
from fuzz.drain import DRAIN
from fuzz.machine import SWARMS
from fuzz.profiles import POOLS
from fuzz.replay import load_trace
from fuzz.targets import TARGETS
from fuzz.walker.cli import main as walker_main

FAULT = "legacy_reuse_guard"
CHUNK = (("chunk-p1", "all"),)


def _plan(tmp: Path, **changes: Any) -> Plan:
    fields: dict[str, Any] = {
        "budget_s": 1.0,
        "workers": 1,
        "shard": (1, 1),
        "seed_base": 1,
        "target": "reference",
        "faults": (),
        "db": tmp / "db",
        "out": tmp / "out",
        "examples": 2,
        "configs": tuple(configurations(sorted(POOLS), SWARMS)),
        "commit": "test",
    }
    return Plan(**{**fields, **changes})


# -- the plan ----------------------------------------------------------------------------------------------------


def test_both_engines_share_each_worker_three_to_one_and_walk_all_their_configurations(tmp_path: Path) -> None:
    plan = _plan(tmp_path, workers=3, shard=(2, 3))
    walker_pools = [(pool, WALKER_SWARM) for pool in dict.fromkeys(pool for pool, _ in plan.configs)]
    seeds = set()
    for worker in range(3):
        units = [plan.unit(k, worker, 2) for k in range(4 * len(plan.configs))]
        assert Counter(u.engine for u in units) == {WALKER: 3 * len(plan.configs), HYPOTHESIS: len(plan.configs)}
        assert {(u.pool, u.swarm) for u in units if u.engine == HYPOTHESIS} == set(plan.configs)
        assert {(u.pool, u.swarm) for u in units if u.engine == WALKER} == set(walker_pools)
        seeds |= {u.seed for u in units}
        assert all(u.seed == unit_seed(1, u.index, worker, 3, 2, 3) for u in units)
    assert len(seeds) == 3 * 4 * len(plan.configs)  # no two units of any engine, worker or shard share a seed
    shifted = _plan(tmp_path, workers=3, shard=(2, 2))  # shard 2 starts 3 workers on: positions 3, 4 and 5
    assert [shifted.unit(0, w, 2).engine for w in range(3)] == [HYPOTHESIS, WALKER, WALKER]


def test_one_engine_alone_plans_the_units_it_always_planned(tmp_path: Path) -> None:
    plan = _plan(tmp_path, workers=2, engines=(HYPOTHESIS,))
    configs = list(plan.configs)
    for worker in range(2):
        for k in range(40):
            unit = plan.unit(k, worker, 2)
            assert unit.engine == HYPOTHESIS
            assert (unit.pool, unit.swarm) == unit_configuration(configs, k, worker, 2, 1)
    assert {_plan(tmp_path, engines=(WALKER,)).unit(k, 0, 2).engine for k in range(9)} == {WALKER}


def test_engines_parse_in_a_fixed_order_and_bad_lists_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert parse_engines("hypothesis,walker") == parse_engines(" walker , hypothesis") == ENGINES
    assert parse_engines("walker") == (WALKER,) and parse_engines("hypothesis") == (HYPOTHESIS,)
    for bad in ("", "walker,walker", "walker,afl", "walker,"):
        with pytest.raises(ValueError, match="engines are a comma-separated list"):
            parse_engines(bad)
    with pytest.raises(SystemExit) as exc:
        fuzz_main(["campaign", "--budget", "1s", "--engines", "walker,nope"])
    assert exc.value.code == 2
    assert [line for line in capsys.readouterr().err.splitlines() if "error:" in line and "--engines" in line]


# -- units -------------------------------------------------------------------------------------------------------


def _hooks(found: list[tuple[Path, bool, int]], started: list[Progress]) -> UnitHooks:
    def on_found(path: Path) -> None:
        doc = json.loads(path.read_text())
        found.append((path, doc["meta"]["shrunk"], len(doc["steps"])))

    return UnitHooks(started.append, on_found)


def test_a_walker_unit_writes_its_failure_raw_then_shrunk_and_fuzz_replay_reproduces_it(tmp_path: Path) -> None:
    # Seed 3's swarm draws the fault's trigger (reuse_released); some seeds' swarms leave it off.
    plan = _plan(tmp_path, faults=(FAULT,), configs=CHUNK, engines=(WALKER,), examples=50, seed_base=3)
    plan.out.mkdir()
    found: list[tuple[Path, bool, int]] = []
    started: list[Progress] = []
    result = run_walker_unit(plan, plan.unit(0, 0, 50), _hooks(found, started))
    assert result.engine == WALKER and result.counterexample is not None and result.shrunk
    ((raw_path, raw_shrunk, raw_steps),) = found
    assert str(raw_path) == result.counterexample and raw_shrunk is False  # on disk before the shrink began
    trace = load_trace(raw_path, None)
    assert trace.meta["shrunk"] is True and trace.meta["source"] == WALKER and trace.meta["engine"] == WALKER
    assert len(trace.steps) <= raw_steps and trace.config["faults"] == [FAULT] and trace.seed == result.seed
    assert result.failure is not None and trace.failure is not None
    assert (result.failure["kind"], result.failure["id"]) == (trace.failure.kind, trace.failure.id)
    assert fuzz_main(["replay", str(raw_path)]) == 1
    assert fuzz_main(["replay", str(raw_path), "--faults", "none"]) == 0
    assert walker_main(["replay-seed", str(raw_path)]) == 1  # the seed alone walks to the same failing step
    (progress,) = started
    # Every drawn step and every walk's closing drain (not a drawn step) reaches one transition.
    drains = sum(n for (_, op, _), n in progress.transitions.items() if op == DRAIN)
    assert progress.total_steps == result.steps and sum(progress.transitions.values()) == result.steps + drains
    assert len(progress.transitions) == result.transitions > 0 and progress.corners


def test_a_clean_walker_unit_walks_its_share_of_steps(tmp_path: Path) -> None:
    plan = _plan(tmp_path, configs=CHUNK, engines=(WALKER,))
    started: list[Progress] = []
    result = run_walker_unit(plan, plan.unit(0, 0, 2), _hooks([], started))
    assert result.counterexample is None and result.steps == 2 * WALKER_STEPS_PER_EXAMPLE["reference"]
    assert started[0].total_steps == result.steps and result.cases >= 1


def test_a_hypothesis_unit_counts_a_transition_for_every_step(tmp_path: Path) -> None:
    plan = _plan(tmp_path, configs=CHUNK, engines=(HYPOTHESIS,), examples=5)
    started: list[Progress] = []
    result = run_unit(plan, plan.unit(0, 0, 5), _hooks([], started))
    (progress,) = started
    assert result.engine == HYPOTHESIS and result.steps > 0
    assert sum(progress.transitions.values()) == result.steps == progress.total_steps
    assert result.transitions == len(progress.transitions) > 1
    shapes = {shape for shape, _, _ in progress.transitions}
    assert len(shapes) > 1 and all(shape.isdigit() for shape in shapes) and len({len(s) for s in shapes}) == 1


# -- campaigns ---------------------------------------------------------------------------------------------------


def test_a_mixed_campaign_reports_units_and_transitions_of_both_engines(tmp_path: Path) -> None:
    plan = _plan(tmp_path, workers=4, budget_s=2.0)  # the first units of workers 0-3: walker x3, hypothesis
    result = run_campaign(plan, out=io.StringIO(), err=io.StringIO())
    report = json.loads((plan.out / "report.json").read_text())
    assert result.exit_code == 0 and report["engines"] == [WALKER, HYPOTHESIS]
    units = report["units"]
    assert {u["engine"] for u in units} == {WALKER, HYPOTHESIS}
    assert all(u["engine"] == plan.unit(u["index"], u["worker"], 2).engine for u in units)
    assert all(u["swarm"] == WALKER_SWARM for u in units if u["engine"] == WALKER)
    reached = report["transitions"]
    assert reached[WALKER] > 0 and reached[HYPOTHESIS] > 0
    assert max(reached[WALKER], reached[HYPOTHESIS]) <= reached["union"] <= reached[WALKER] + reached[HYPOTHESIS]
    over_time = report["transitions_over_time"]
    assert over_time["columns"] == ["seconds", WALKER, HYPOTHESIS, "union"]
    assert over_time["points"][-1][1:] == [reached[WALKER], reached[HYPOTHESIS], reached["union"]]
    by_engine = {e["engine"]: e for e in report["per_engine"]}
    for engine in (WALKER, HYPOTHESIS):
        mine = [u for u in units if u["engine"] == engine]
        assert by_engine[engine]["units"] == len(mine) and by_engine[engine]["steps"] == sum(u["steps"] for u in mine)
        per_hour = by_engine[engine]["steps"] / sum(u["seconds"] for u in mine) * 3600
        assert by_engine[engine]["steps_per_core_hour"] == pytest.approx(per_hour, 0.01)
    elapsed_cores = report["elapsed_s"] * report["workers"]
    assert report["steps_per_core_hour"] == pytest.approx(report["steps"] / elapsed_cores * 3600, 0.01)
    assert all(w["series"] and w["series"][-1][1] == w["steps"] for w in report["per_worker"])
    text = (plan.out / "report.md").read_text()
    assert "| walker |" in text and "| hypothesis |" in text and "## Throughput over time" in text


def test_both_engines_findings_land_in_one_group(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(unit_module, "SHRINK_S", 2)  # the workers fork: Hypothesis's shrink stops after 2 s
    # Worker 3's first unit is Hypothesis with seed 4, which finds the fault within 50 test cases.
    plan = _plan(tmp_path, workers=4, faults=(FAULT,), configs=CHUNK, examples=50)
    result = run_campaign(plan, out=io.StringIO(), err=io.StringIO())
    assert result.exit_code == 1
    ((group,),) = [result.report["groups"]]
    assert (group["kind"], group["id"], group["faults"]) == ("accepted-forbidden", "reuse_released", [FAULT])
    engines = {load_trace(Path(shape["file"]), None).meta["engine"] for shape in group["shapes"]}
    found = {u["engine"] for u in result.report["units"] if u["counterexample"]}
    assert found == {WALKER, HYPOTHESIS} and engines <= found
    assert group["count"] == sum(1 for u in result.report["units"] if u["counterexample"])
    assert fuzz_main(["replay", group["representative"]]) == 1
    text = (plan.out / "report.md").read_text()
    assert all(f"python -m fuzz replay {shape['file']}" in text for shape in group["shapes"])


def test_a_rerun_rechecks_counterexamples_of_both_engines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hypothesis_engine, "MAX_SHRINKING_SECONDS", 2)
    earlier = _plan(tmp_path / "earlier", faults=(FAULT,), configs=CHUNK, examples=50, seed_base=3)
    earlier.out.mkdir(parents=True)
    raw: list[Path] = []

    def keep_raw(path: Path) -> None:  # the walker's file as a campaign killed before the shrink leaves it
        raw.append(earlier.out / "killed-walker.json")
        shutil.copy(path, raw[0])

    walked = run_walker_unit(earlier, earlier.unit(0, 0, 50), UnitHooks(lambda p: None, keep_raw))
    machine_unit = Unit(0, 1, 3, "chunk-p1", "all", 50, HYPOTHESIS)  # seed 3 finds the fault within 50 cases
    machine = run_unit(earlier, machine_unit, UnitHooks(lambda p: None, lambda p: None))
    files = {str(raw[0]), walked.counterexample, machine.counterexample}
    assert None not in files and load_trace(raw[0], None).meta["shrunk"] is False

    plan = _plan(tmp_path, faults=(FAULT,), configs=CHUNK, out=earlier.out, seed_base=100)
    result = run_campaign(plan, out=io.StringIO(), err=io.StringIO())
    rechecked = {r["file"]: r["status"] for r in result.report["rechecked"]}
    assert rechecked == dict.fromkeys(files, "reproduces")
    assert load_trace(raw[0], None).meta["shrunk"] == "steps deleted on resume"
    engines = {load_trace(Path(f), None).meta.get("engine") for f in rechecked}
    assert engines == {WALKER, HYPOTHESIS}
    (group,) = result.report["groups"]
    assert group["count"] >= len(files) and result.exit_code == 1


# -- throughput and transitions over time --------------------------------------------------------------------------


def _beats(throughput: Throughput, beats: list[tuple[float, int]]) -> Throughput:
    for seconds, steps in beats:
        throughput.beat(seconds, steps)
    return throughput


def test_a_stall_is_named_from_the_last_new_step_to_the_next() -> None:
    steady = [(float(t), 100 * t) for t in range(1, 101)]
    stalled = [(float(t), 100 * min(t, 10) + 100 * max(t - 70, 0)) for t in range(1, 101)]  # flat from 10 s to 70 s
    healthy, stuck = _beats(Throughput(), steady), _beats(Throughput(), stalled)
    assert healthy.stalls == [] and stuck.stalls == [(10.0, 71.0)]
    rates = {seconds: rate for seconds, _, rate in stuck.rates()}
    assert rates[40.0] == 0.0 and rates[10.0] == 100.0 and rates[80.0] == 100.0
    short = _beats(Throughput(), [(1.0, 5), (30.0, 5), (40.0, 9)])  # 39 s without a step: under the threshold
    assert short.stalls == []
    silent = _beats(Throughput(), [(1.0, 5), (2.0, 5)])
    silent.close(200.0, finished=False)  # no beat since, and it never said it was done: stalled until the end
    assert silent.stalls == [(1.0, 200.0)]
    done = _beats(Throughput(), [(1.0, 5), (2.0, 5)])
    done.close(200.0, finished=True)
    assert done.stalls == []


def test_the_report_prints_a_line_per_worker_naming_its_stalls(tmp_path: Path) -> None:
    tally = Tally(0.0)
    tally.throughput = {
        0: _beats(Throughput(), [(float(t), 50 * t) for t in range(1, 90)]),
        1: _beats(Throughput(), [(1.0, 10), (2.0, 20), (80.0, 20), (81.0, 30), (130.0, 30), (131.0, 40)]),
    }
    tally.steps = {0: 50 * 89, 1: 40}
    report = report_data(_plan(tmp_path, workers=2), tally, [], {})
    zero, one = worker_lines(report)
    assert zero.startswith("worker 0: 4,450 steps") and zero.endswith("no stall longer than 45 s")
    assert one.startswith("worker 1: 40 steps")
    assert one.endswith("STALLED 2x with no new step for over 45 s: 2-81 s (79 s), 81-131 s (50 s)")
    assert report["per_worker"][1]["stalls"] == [[2.0, 81.0], [81.0, 131.0]]


def test_a_series_stays_bounded_and_ends_at_the_latest_point() -> None:
    series = Series(limit=120)
    for t in range(1, 100_001):
        series.add(float(t), 3 * t)
    assert 60 <= len(series.points) <= 121
    assert series.points[0] == (1.0, 3) and series.points[-1] == (100_000.0, 300_000)
    times = [p[0] for p in series.points]
    assert times == sorted(times) and all(b > a for a, b in itertools.pairwise(times))


def test_transitions_are_counted_per_engine_and_in_union() -> None:
    tally = Tally(0.0)
    a, b, c = ("0000", "admit", "done"), ("0000", "decode", "refused"), ("1000", "finish", "done")
    tally.take(("beat", 0, 10, 1.0, 1.0, ["admit: done"], WALKER, [a, b]))
    tally.take(("beat", 1, 5, 1.0, 1.0, [], HYPOTHESIS, [b, c]))
    tally.take(("beat", 2, 5, 1.0, 1.0, [], WALKER, [a]))  # another worker's first sight of a: not new
    assert {e: len(s) for e, s in tally.transitions.items()} == {WALKER: 2, HYPOTHESIS: 2}
    assert len(tally.union) == 3
    assert [p[1:] for p in tally.transitions_over_time.points] == [(2, 0, 2), (2, 2, 3)]


class _Queue(list[tuple[Any, ...]]):
    def put(self, message: tuple[Any, ...]) -> None:
        self.append(message)


def test_the_heartbeat_sends_each_transition_once_per_engine() -> None:
    a, b = ("0000", "admit", "done"), ("0000", "decode", "done")
    queue = _Queue()
    heartbeat = Heartbeat(0, queue)
    walking = WalkProgress(transitions={a: 1})
    heartbeat.unit_started(WALKER, walking)
    heartbeat.send()
    walking.transitions[b] = 1
    heartbeat.send()
    heartbeat.unit_finished()
    heartbeat.unit_started(HYPOTHESIS, WalkProgress(transitions={a: 3}))  # new to this engine, not to the worker
    heartbeat.stop()
    sent: dict[str, list[Any]] = {}
    for message in queue:
        sent.setdefault(message[6], []).extend(message[7])
    assert sorted(sent[WALKER]) == [a, b] and sent[HYPOTHESIS] == [a]


def test_a_walker_unit_walks_its_targets_steps_per_example(tmp_path: Path) -> None:
    """Units of either engine last about as long on each target: the walker's steps per example follow the target."""
    assert set(WALKER_STEPS_PER_EXAMPLE) == set(TARGETS)
    for target, steps in WALKER_STEPS_PER_EXAMPLE.items():
        plan = _plan(tmp_path, target=target)
        assert plan.walker_steps == steps
        assert any(f"a walk of {plan.examples * steps} steps" in line for line in header(plan))
