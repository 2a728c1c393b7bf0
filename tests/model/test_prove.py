"""The prover settles the theorems as the manifest says, reports solver timeouts as unknown, and refutes
the right theorem when the model is broken on purpose."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from fuzz.__main__ import main as replay_main
from fuzz.replay import load_trace, replay
from model import theorems
from model.__main__ import main as prove_main
from model.actions import (
    EXTEND,
    FINISH,
    OFFLOAD_RELEASE,
    Action,
    _extend_enabled,
    _offload_enabled,
    _offload_update,
    _release,
    _set_status,
    actions_for,
    offload_guard_presence,
)
from model.manifest import MANIFEST
from model.prove import bmc, induction
from model.state import SENTINEL_ROW
from model.theorems import RECORD_GUARD_INVARIANTS, SHAPES, SYMBOLIC, THEOREMS, Theorem, two_live_on_one_row
from properties.invariants import BY_ID
from properties.vocabulary import STATUS_DONE, ceil_align

CHUNK, RADIX = SHAPES["chunk"], SHAPES["radix"]


def _steps(faults: frozenset[str], **replace: object) -> list:  # type: ignore[type-arg]
    table = actions_for(faults)
    table.update(replace)  # type: ignore[arg-type]
    return [a for a in table.values() if not a.negative]


def test_prove_matches_the_manifest(capsys: pytest.CaptureFixture[str]) -> None:
    assert prove_main(["prove"]) == 0
    out = capsys.readouterr().out
    assert "every outcome matches the manifest" in out
    assert any(line.split()[:3] == ["stale-reuse:legacy-guard", "refuted", "4"] for line in out.splitlines())


def test_a_different_expectation_fails_the_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = json.loads(MANIFEST.read_text())
    doc["theorems"]["stale-reuse:legacy-guard"] = {"outcome": "proved"}
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps(doc))
    assert prove_main(["prove", "--only", "stale-reuse:legacy-guard", "--manifest", str(manifest)]) == 1
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("stale-reuse:legacy-guard"))
    assert row.endswith("proved  MISMATCH")


def test_solver_timeout_is_unknown_never_proved(capsys: pytest.CaptureFixture[str]) -> None:
    assert prove_main(["prove", "--only", "stale-reuse:legacy-guard", "--timeout", "0.001"]) == 1
    out = capsys.readouterr().out
    assert "unknown" in out and "stale-reuse:legacy-guard" in out.splitlines()[-1]


def test_bad_usage_exits_2(tmp_path: Path) -> None:
    assert prove_main(["prove", "--only", "no-such-theorem"]) == 2
    assert prove_main(["prove", "--manifest", str(tmp_path / "missing.json")]) == 2


def test_any_reuse_guard_at_all_lets_stale_rows_through() -> None:
    no_guard = dataclasses.replace(EXTEND, enabled=_extend_enabled(lambda o, s, req: True))
    steps = _steps(frozenset({"raw_row_free"}), extend=no_guard)
    invariants = [BY_ID[i] for i in RECORD_GUARD_INVARIANTS]
    result = induction("weak-guard", CHUNK, steps, invariants, BY_ID["row-exclusive"])
    assert result.outcome == "refuted" and result.detail.startswith("extend:")
    found = bmc("weak-guard", steps, CHUNK, two_live_on_one_row, 5)
    assert found.outcome == "refuted" and found.depth == 4


def test_release_that_forgets_the_row_is_caught() -> None:
    def keeps_row(o, p, s, a):  # type: ignore[no-untyped-def]
        return _set_status(o, s.but(rec_row=o.store(s.rec_row, a["req"], 0)), a["req"], STATUS_DONE)

    steps = _steps(frozenset(), finish=dataclasses.replace(FINISH, update=keeps_row))
    result = induction("leaky-finish", CHUNK, steps, SYMBOLIC, BY_ID["row-held-by-owner"])
    assert result.outcome == "refuted" and "finish" in result.detail
    assert "counterexample to induction" in result.detail


def test_release_that_skips_mark_kv_released_is_caught() -> None:
    def no_mark(o, p, s, a):  # type: ignore[no-untyped-def]
        released = _set_status(o, _release(o, p, s, a["req"], True, a["dup"]), a["req"], STATUS_DONE)
        return released.but(rec_A=o.store(released.rec_A, a["req"], o.select(s.rec_A, a["req"])))

    steps = _steps(frozenset(), finish=dataclasses.replace(FINISH, update=no_mark))
    assert induction("no-mark", CHUNK, steps, SYMBOLIC, BY_ID["released-unallocated"]).outcome == "refuted"
    assert induction("no-mark", RADIX, steps, SYMBOLIC, BY_ID["kv-presence"]).outcome == "refuted"


def test_stash_that_keeps_the_old_lock_is_caught() -> None:
    from model.actions import ADMIT

    def no_lock_move(o, p, s, a):  # type: ignore[no-untyped-def]
        after = ADMIT.update(o, p, s, a)
        return after.but(rec_locked=o.store(after.rec_locked, a["req"], o.If(a["prefix"] > 0, 1, 0)))

    steps = _steps(frozenset(), admit=dataclasses.replace(ADMIT, update=no_lock_move))
    result = induction("stale-lock", RADIX, steps, SYMBOLIC, BY_ID["lock-follows-prefix"])
    assert result.outcome == "refuted" and result.detail.startswith("admit:")


def _theorem(name: str) -> Theorem:
    return next(t for t in THEOREMS if t.name == name)


def _with_offload(monkeypatch: pytest.MonkeyPatch, **changes: object) -> None:
    """Settle theorems over a model whose offload release is replaced by `changes`."""
    broken = dataclasses.replace(OFFLOAD_RELEASE, **changes)  # type: ignore[arg-type]

    def table(faults: frozenset[str] = frozenset()) -> dict[str, Action]:
        return {**actions_for(faults), "offload_release": broken}

    monkeypatch.setattr(theorems, "actions_for", table)


@pytest.mark.parametrize(
    "guard", [offload_guard_presence, lambda o, row: row != SENTINEL_ROW], ids=["holds_kv", "sentinel-only"]
)
def test_a_weaker_offload_guard_refutes_the_raw_guard_theorem(monkeypatch: pytest.MonkeyPatch, guard: object) -> None:
    name = "sentinel-boundary:raw-guard"
    assert _theorem(name).run(name, 30_000).outcome == "proved"
    _with_offload(monkeypatch, enabled=_offload_enabled(guard))  # type: ignore[arg-type]
    assert _theorem(name).run(name, 30_000).outcome == "refuted"


def test_an_offload_release_that_skips_the_over_allocation_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    def leaves_draft_slots(o, p, s, a):  # type: ignore[no-untyped-def]
        # #19518: the offload release never freed the draft slots `[ceil_align(n), A)`.
        after, req = _offload_update(o, p, s, a), a["req"]
        draft = ceil_align(o.select(s.rec_A, req), p.page_size) - ceil_align(o.select(s.rec_C, req), p.page_size)
        return after.but(n_free_slots=after.n_free_slots - draft)

    _with_offload(monkeypatch, update=leaves_draft_slots)
    name = "sentinel-boundary:release-equivalence@radix"
    assert _theorem(name).run(name, 30_000).outcome == "refuted"


def test_the_presence_guard_trace_replays_only_with_its_fault(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    name = "sentinel-boundary:presence-guard"
    assert prove_main(["prove", "--only", name, "--export-traces", str(tmp_path)]) == 0
    trace = tmp_path / "sentinel-boundary_presence-guard.json"
    assert [s["op"] for s in json.loads(trace.read_text())["steps"]][-1] == "offload_release"
    assert _replayed_failure(trace) == (_recorded_step(trace), "accepted-forbidden", "offload_release")
    assert replay_main(["replay", str(trace)]) == 1
    assert "accepted-forbidden offload_release" in capsys.readouterr().out
    assert replay_main(["replay", str(trace), "--faults", "none"]) == 0


def _recorded_step(path: Path) -> int:
    failure = load_trace(path, None).failure
    assert failure is not None
    return failure.step


def _replayed_failure(path: Path) -> tuple[int, str, str] | None:
    """Where the pool fails on replay, and how. A prover trace records the theorem's bad state, which the pool
    reaches through the trace's last call: the contract forbids that call there, and the pool accepts it."""
    failure = replay(load_trace(path, None)).failure
    return None if failure is None else (failure.step, failure.kind, failure.id)


def test_a_bounded_search_out_of_budget_says_so_with_the_depth_it_reached() -> None:
    result = bmc("budget", _steps(frozenset()), CHUNK, two_live_on_one_row, 20, budget_s=0.5)
    assert result.outcome == "unknown"
    assert result.detail.startswith("timeout after") and f"depths below {result.depth} settled" in result.detail


def test_a_search_restricted_to_some_ops_finds_a_trace_through_those_only() -> None:
    """How the upstream check gets traces it can run: the target lacks `pd_prealloc`, which the unrestricted
    stale-reuse search is free to use."""
    ops = frozenset({"admit", "extend", "pp_release", "finish", "abort"})
    legacy = next(t for t in THEOREMS if t.name == "stale-reuse:legacy-guard")
    assert {a.name for a in theorems.steps_of(legacy.faults, ops)} <= ops
    result = legacy.run(legacy.name, 60_000, ops)
    assert result.outcome == "refuted" and result.steps is not None
    assert {step.op for step in result.steps} <= ops
    assert "pd_prealloc" in {a.name for a in theorems.steps_of(legacy.faults)}  # no restriction outlives its call
    assert legacy.run(legacy.name, 60_000, frozenset({"admit", "finish"})).outcome != "refuted"  # no stale row left


@pytest.mark.parametrize(
    ("dropped", "precondition"),
    [
        ("protected-prefix", "cache_protected_len == 0"),
        ("over-allocated", "kv_committed_len == kv_allocated_len"),
        ("decoded-past-extend", "kv_committed_len == extend_range.end"),
        ("tree-lock", "last_node is None"),
    ],
)
def test_each_divergence_trace_names_its_precondition_and_replays(
    tmp_path: Path, dropped: str, precondition: str
) -> None:
    """Theorem 3: for each precondition of PR #37167 dropped alone, a trace on which the two releases differ."""
    name = f"release-divergence:{dropped}"
    assert prove_main(["prove", "--only", name, "--export-traces", str(tmp_path)]) == 0
    (trace,) = tmp_path.glob("*.json")
    failure = json.loads(trace.read_text())["failure"]
    assert f"drops `{precondition}`" in failure["message"]
    assert _replayed_failure(trace) == (failure["step"], "accepted-forbidden", "pp_release_manual")
    assert replay_main(["replay", str(trace)]) == 1
