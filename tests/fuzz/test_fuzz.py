"""End to end: the fuzzer finds the #37167 faults and shrinks them; its counterexamples and the prover's
replay on a real pool with the faults on (exit 1) and not with them off (exit 0); bad files exit 2."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from fuzz.__main__ import main as fuzz_main
from fuzz.profiles import DEFAULT_POOL, Profile
from fuzz.replay import load_trace, replay
from fuzz.run import run
from model.__main__ import main as prove_main
from model.trace import Failure, load
from tests.emitted import emitted_test

QUICK = Profile("test", max_examples=60, steps_per_case=20, derandomize=True, keep_database=False)
# Hunting a fault stops at the first failure, so a larger budget costs only when the fault hides.
HUNT = Profile("test-hunt", max_examples=400, steps_per_case=20, derandomize=True, keep_database=False)


def _run(tmp_path: Path, faults: list[str]):  # type: ignore[no-untyped-def]
    profile = HUNT if faults else QUICK
    return run({**DEFAULT_POOL, "faults": faults}, profile, None, tmp_path / "ce", tmp_path / "db")


def _where(failure: Failure | None) -> tuple[int, str, str] | None:
    return None if failure is None else (failure.step, failure.kind, failure.id)


def _replays_as_recorded(path: Path, capsys: pytest.CaptureFixture[str], *flags: str) -> None:
    """Replay `path` through the CLI: exit 1, and the failure it prints is the one the file records (step, kind
    and id), with no note that the pool failed otherwise."""
    recorded = load(path).failure
    assert recorded is not None
    capsys.readouterr()
    assert fuzz_main(["replay", str(path), *flags]) == 1
    out = capsys.readouterr().out
    assert f"reproduced: step {recorded.step}: {recorded.kind} {recorded.id}: " in out
    assert "the trace recorded" not in out
    assert _where(replay(load_trace(path, None)).failure) == _where(recorded)


def test_no_fault_run_finds_nothing(tmp_path: Path) -> None:
    result = _run(tmp_path, [])
    assert result.counterexample is None
    assert result.steps > 500
    assert {"admit", "extend", "decode", "finish", "differential"} <= set(result.ops)
    assert {"reuse_released", "release_again", "free_row"} & set(result.ops), "no negative step was tried"
    assert any("forbidden call refused" in corner for corner in result.corners)


# A raw row free leaves `req_pool_idx` set: besides the invariants and the differential, a retraction of that
# record (a pause retracts every running one) is refused by the reset's own assert, a legal call refused.
_RAW = {"invariant", "mismatch", "release-divergence", "refused-legal"}


@pytest.mark.parametrize(
    ("faults", "kinds"),
    [
        (["legacy_reuse_guard", "raw_row_free"], {*_RAW, "accepted-forbidden"}),
        (["legacy_reuse_guard"], {"accepted-forbidden"}),
        (["raw_row_free"], _RAW),
    ],
)
def test_fault_is_found_shrunk_and_replays(
    tmp_path: Path, faults: list[str], kinds: set[str], capsys: pytest.CaptureFixture[str]
) -> None:
    result = _run(tmp_path, faults)
    assert result.counterexample is not None
    trace = load(result.counterexample)
    assert len(trace.steps) <= 8
    assert trace.failure is not None and trace.failure.kind in kinds
    assert trace.config["faults"] == sorted(faults)
    assert result.failure_text.startswith(f"step {trace.failure.step}: {trace.failure.kind} {trace.failure.id}: ")
    _replays_as_recorded(result.counterexample, capsys)
    assert fuzz_main(["replay", str(result.counterexample), "--faults", "none"]) == 0


def test_z3_counterexample_fails_on_the_real_pool(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A prover trace records the theorem's bad state (two live records on one row, at its last step); the pool
    breaks an invariant on the way there, and replay prints both its own failure and the recorded one."""
    assert prove_main(["prove", "--only", "stale-reuse:legacy-guard", "--export-traces", str(tmp_path)]) == 0
    (path,) = tmp_path.glob("*.json")
    trace = load(path)
    assert trace.config["faults"] == ["legacy_reuse_guard", "raw_row_free"]
    assert trace.steps[0].op == "admit" and len(trace.steps) == 4
    assert _where(trace.failure) == (3, "invariant", "row-exclusive")
    for flags in ([], ["--faults", "raw_row_free"]):
        capsys.readouterr()
        assert fuzz_main(["replay", str(path), *flags]) == 1
        out = capsys.readouterr().out
        found = replay(load_trace(path, flags[1:] or None)).failure
        assert found is not None and found.step <= 3
        assert f"reproduced: step {found.step}: {found.kind} {found.id}: " in out
        if _where(found) != _where(trace.failure):
            assert "(the trace recorded step 3: invariant row-exclusive; the pool fails earlier or differently)" in out
    assert fuzz_main(["replay", str(path), "--faults", "none"]) == 0


BAD_FILES = {
    "empty.json": b"",
    "invalid.json": b"{",
    "format.json": json.dumps({"format": "other", "version": 1}).encode(),
    "version.json": json.dumps({"format": "kvlife-trace", "version": 99}).encode(),
    "op.json": json.dumps(
        {
            "format": "kvlife-trace",
            "version": 1,
            "config": {**DEFAULT_POOL, "faults": []},
            "steps": [{"op": "rm_rf", "args": {}}],
        }
    ).encode(),
    "absurd.json": json.dumps(
        {"format": "kvlife-trace", "version": 1, "config": {**DEFAULT_POOL, "rows": 10**9}, "steps": []}
    ).encode(),
    "unbuildable.json": json.dumps(
        {"format": "kvlife-trace", "version": 1, "steps": [], "config": {**DEFAULT_POOL, "page_size": 3, "faults": []}}
    ).encode(),
    "badfault.json": json.dumps(
        {"format": "kvlife-trace", "version": 1, "steps": [], "config": {**DEFAULT_POOL, "faults": ["no_such_fault"]}}
    ).encode(),
}


@pytest.mark.parametrize("name", sorted(BAD_FILES))
def test_invalid_file_exits_2_with_one_line(tmp_path: Path, name: str, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / name
    path.write_bytes(BAD_FILES[name])
    assert fuzz_main(["replay", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("replay: invalid trace") and "\n" not in err


def test_unknown_fault_override_exits_2(tmp_path: Path) -> None:
    assert prove_main(["prove", "--only", "stale-reuse:legacy-guard", "--export-traces", str(tmp_path)]) == 0
    (path,) = tmp_path.glob("*.json")
    assert fuzz_main(["replay", str(path), "--faults", "nope"]) == 2


def test_bad_cli_flags_exit_2() -> None:
    with pytest.raises(SystemExit) as info:
        fuzz_main(["run", "--fault", "no_such_fault"])
    assert info.value.code == 2
    with pytest.raises(SystemExit) as info:
        fuzz_main(["run", "--profile", "forever"])
    assert info.value.code == 2


def test_emitted_regression_fails_with_the_fault_and_passes_without(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = _run(tmp_path, ["legacy_reuse_guard"])
    assert result.counterexample is not None
    test = emitted_test(result.counterexample, tmp_path / "regressions")
    test()
    monkeypatch.setenv("KVLIFE_REGRESSION_FAULTS", "legacy_reuse_guard")
    recorded = load(result.counterexample).failure
    assert recorded is not None
    with pytest.raises(AssertionError, match=re.escape(f"kind='{recorded.kind}', id='{recorded.id}'")):
        test()


def test_verbose_replay_shows_model_and_pool(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    result = _run(tmp_path, ["raw_row_free"])
    assert result.counterexample is not None
    recorded = load(result.counterexample).failure
    assert recorded is not None
    capsys.readouterr()
    assert fuzz_main(["replay", str(result.counterexample), "--verbose"]) == 1
    out = capsys.readouterr().out
    assert "      model req 0:" in out and "      pool  req 0:" in out
    assert f"reproduced: step {recorded.step}: {recorded.kind} {recorded.id}: " in out
