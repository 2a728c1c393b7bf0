"""Fault points (`impl.fault_points`, `fuzz.fault_plans`): a planned failure inside a step, the contract of a
failure (the caller learns of it, and the pool is left as it was), and the plan carried by a trace and replayed."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from fuzz.__main__ import main as fuzz_main
from fuzz.fault_plans import Planner, PointCounts, barred, exclusion_names, plan_args, stage_of
from fuzz.lockstep import Lockstep
from fuzz.profiles import POOLS
from fuzz.replay import replay
from fuzz.upstream_findings import ROOT, Finding, FindingsError, load_findings
from fuzz.walker.walk import Walker
from impl.fault_points import FaultPlan, FaultPoints, plan_of
from model.trace import Failure, Step, Trace, TraceError, dump, load, parse
from properties.vocabulary import BATCH_OPS
from tests.emitted import emitted_test

ADMIT = {"req": 0, "prompt": 4, "n": 4, "family": 0, "kind": 0}


def _lock(pool: str = "chunk-p1", faults: tuple[str, ...] = ()) -> Lockstep:
    return Lockstep({**POOLS[pool], "faults": list(faults)})


def test_an_armed_point_fails_only_the_planned_call() -> None:
    points = FaultPoints()
    with points.armed(FaultPlan("kv_alloc", call=1)) as shot:
        assert shot is not None
        assert [points.fails("kv_alloc") for _ in range(3)] == [False, True, False]
        assert not points.fails("row_alloc")
    assert shot.fired and points.fired["kv_alloc"] == 1
    assert points.reached == {"kv_alloc": 3, "row_alloc": 1}
    assert not points.fails("kv_alloc")  # disarmed: straight through


@pytest.mark.parametrize("point", ["row_alloc", "kv_alloc"])
@pytest.mark.parametrize("pool", ["chunk-p1", "radix-p4", "pd-p4"])
def test_a_failed_allocation_is_refused_and_rolled_back(point: str, pool: str) -> None:
    lock = _lock(pool)
    assert lock.step("admit", {**ADMIT, **plan_args(point)}) is None
    assert f"fault {point}: refused" in lock.corners
    assert lock.model.observe().differences(lock._observation(lock.snap)) == []
    assert lock.step("admit", ADMIT) is None  # the pool goes on as if the call had never run


@pytest.mark.parametrize("pool", ["chunk-p1", "radix-p4"])
def test_a_round_whose_decode_fails_gives_its_prefill_back(pool: str) -> None:
    lock = _lock(pool)
    assert lock.step("admit", {**ADMIT, "prompt": 3, "n": 3}) is None
    entries = {"size": 2, "op0": 2, "req0": 0, "op1": 0, "req1": 1, "prompt1": 5, "n1": 5, "family1": 0, "kind1": 0}
    assert lock.step("batch", {**entries, **plan_args("kv_alloc", call=1)}) is None  # the decode's allocation
    assert "fault kv_alloc: refused" in lock.corners
    assert lock.step("batch", entries) is None  # the same round, unplanned, as if the first had never run


def test_a_missing_rollback_is_a_finding_named_by_point_and_part() -> None:
    lock = _lock(faults=("failed_alloc_keeps_rows",))
    failure = lock.step("admit", {**ADMIT, **plan_args("kv_alloc")})
    assert failure is not None
    assert (failure.kind, failure.id) == ("fault-not-rolled-back", "kv_alloc: leaked rows")


def test_a_plan_that_never_fires_leaves_the_step_as_it_was() -> None:
    lock = _lock()
    assert lock.step("admit", {**ADMIT, **plan_args("kv_alloc", call=3)}) is None  # one allocation only
    assert not any(c.startswith("fault") for c in lock.corners)
    assert lock.snap.records[0].allocated_len == 4


def test_the_plan_travels_in_the_trace_and_replays(tmp_path: Path) -> None:
    config = {**POOLS["chunk-p1"], "faults": ["failed_alloc_keeps_rows"], "fault_rate": 5}
    steps = [Step("admit", {**ADMIT, **plan_args("kv_alloc")})]
    dump(Trace(config, None, steps), tmp_path / "t.json")
    trace = load(tmp_path / "t.json")
    assert trace.steps[0].args["fault"] == 2 and trace.config["fault_rate"] == 5
    result = replay(trace)
    assert result.failure is not None and result.failure.kind == "fault-not-rolled-back"
    clean = replay(Trace({**config, "faults": []}, None, trace.steps))
    assert clean.failure is None


def test_an_injected_failure_replays_from_the_cli_and_is_emitted_as_a_regression(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The plan travels through `fuzz replay` (exit 1: reproduced) and `fuzz emit`: the emitted test replays it
    without Hypothesis, passing on the pool without the switch and failing with it."""
    config = {**POOLS["chunk-p1"], "faults": ["failed_alloc_keeps_rows"], "fault_rate": 5}
    path = tmp_path / "ce.json"
    steps = [Step("admit", {**ADMIT, **plan_args("kv_alloc")})]
    failure = replay(Trace(config, None, steps)).failure
    assert failure is not None and failure.id == "kv_alloc: leaked rows"
    dump(Trace(config, None, steps, failure), path)
    assert fuzz_main(["replay", str(path)]) == 1
    test = emitted_test(path, tmp_path / "regressions")
    test()
    monkeypatch.setenv("KVLIFE_REGRESSION_FAULTS", "failed_alloc_keeps_rows")
    with pytest.raises(AssertionError, match="kv_alloc: leaked rows"):
        test()


@pytest.mark.parametrize(("key", "value"), [("fault", 4), ("fault", -1), ("fault_call", -1), ("fault_call", 4)])
def test_a_plan_out_of_range_is_refused_naming_the_field(key: str, value: int) -> None:
    doc = {"format": "kvlife-trace", "version": 1, "config": {**POOLS["chunk-p1"], "target": "reference"}}
    doc["steps"] = [{"op": "admit", "args": {**ADMIT, key: value}}]
    with pytest.raises(TraceError, match=key):
        parse(json.dumps(doc).encode())


def test_the_planner_draws_nothing_at_rate_zero() -> None:
    rng = random.Random(3)
    state = rng.getstate()
    assert Planner(rng, 0, {"kv_alloc"}, ()).draw("admit", {}) == {}
    assert rng.getstate() == state  # a run without plans walks as before


def test_an_exclusion_bars_a_point_by_stage() -> None:
    assert {"fault:kv_alloc", "fault:kv_alloc@prefill"} <= exclusion_names()
    assert barred("kv_alloc", "admit", {"fault:kv_alloc@prefill"})
    assert not barred("kv_alloc", "decode", {"fault:kv_alloc@prefill"})
    planner = Planner(random.Random(0), 100, {"kv_alloc"}, {"fault:kv_alloc@prefill"})
    assert planner.draw("admit", {}) == {} and plan_of(planner.draw("decode", {})) is not None


def test_a_batch_is_staged_by_its_entries() -> None:
    admit, decode = {"op0": 0, "req0": 1}, {"op1": 2, "req1": 0}
    assert stage_of("batch", {"size": 1, **admit}) == "prefill"
    assert stage_of("batch", {"size": 2, **admit, **decode}) == "round"
    assert stage_of("batch", {"size": 1, "op0": 2, "req0": 0}) == "decode"
    assert stage_of("evict") == "other"


def test_the_walker_reaches_and_fires_every_point_of_the_reference_pool() -> None:
    counts = PointCounts()
    for seed in range(3):
        result = Walker({**POOLS["radix-p1"], "fault_rate": 10}, seed).run(steps=400)
        assert result.failure is None
        counts.merge(result.points)
    assert counts.installed == {"row_alloc", "kv_alloc"}
    assert counts.never_fired() == []


def test_the_walker_finds_the_missing_rollback() -> None:
    config = {**POOLS["chunk-p1"], "faults": ["failed_alloc_keeps_rows"], "fault_rate": 10}
    failures = [Walker(config, seed).run(steps=300).failure for seed in range(3)]
    assert any(f is not None and f.kind == "fault-not-rolled-back" for f in failures)


def _finding(symptoms: frozenset[tuple[str, str, str]]) -> Finding:
    return Finding(
        "kept",
        ("9.9.9",),
        "contract-difference",
        "upstream",
        "summary",
        Path("x.json"),
        "fault-not-rolled-back",
        "kv_alloc: leaked rows",
        frozenset({"fault:kv_alloc@prefill", "fault:kv_alloc@round"}),
        symptoms,
    )


def test_a_symptom_with_a_stage_counts_only_at_that_stage() -> None:
    """A symptom naming a stage explains a failure only where the failing step is of that stage: slots a round's
    prefill took and its decode's failure kept are the finding's, the same slots leaked by an admission are not."""
    leaked = ("fault-not-rolled-back", "kv_alloc: leaked rows+leaked slots")
    failure = Failure(0, *leaked, "")
    admission = Trace({}, None, [Step("admit", {**ADMIT, **plan_args("kv_alloc")})])
    round_args = {"size": 2, "op0": 0, "op1": BATCH_OPS.index("decode"), **plan_args("kv_alloc")}
    mixed = Trace({}, None, [Step("batch", round_args)])
    at_round = _finding(frozenset({(*leaked, "round")}))
    assert at_round.shows_in(failure, "9.9.9", mixed)
    assert not at_round.shows_in(failure, "9.9.9", admission)
    anywhere = _finding(frozenset({(*leaked, "")}))
    assert anywhere.shows_in(failure, "9.9.9", admission) and anywhere.shows_in(failure, "9.9.9", mixed)


def test_a_symptom_with_an_unknown_stage_is_refused_naming_the_field(tmp_path: Path) -> None:
    entry = json.loads((ROOT / "upstream" / "findings.json").read_text())["findings"][0]
    entry["symptoms"] = [{"kind": "crash", "id": "x", "stage": "teardown"}]
    path = tmp_path / "findings.json"
    path.write_text(json.dumps({"findings": [entry]}))
    with pytest.raises(FindingsError, match="symptoms"):
        load_findings(path)
