"""The mutant scorer: a fault runs in a fresh subprocess and is scored from the counterexample it writes, a run
is killed at its budget, the table passes only when every fault is found and no fault-free run finds anything,
and bad usage exits 2."""

from __future__ import annotations

from pathlib import Path

import pytest

import fuzz.mutants
from fuzz.__main__ import main as fuzz_main
from fuzz.mutants import (
    ALARMS,
    CRASH,
    DETECTED,
    MISSED,
    TIMEOUT,
    UNSHRUNK,
    Attempt,
    Score,
    false_alarm_cli,
    markdown,
    report_of,
    run_attempt,
    upstream_run_pools,
)
from fuzz.profiles import POOLS
from fuzz.replay import load_trace, replay
from impl.faults import PATTERNS


def _replayed_and_recorded(path: str) -> tuple[tuple[int, str, str] | None, tuple[int, str, str] | None]:
    """The failure a counterexample file records, and the one its replay shows: (step, kind, id) each."""
    trace = load_trace(Path(path), None)
    found, recorded = replay(trace).failure, trace.failure
    return (
        None if found is None else (found.step, found.kind, found.id),
        None if recorded is None else (recorded.step, recorded.kind, recorded.id),
    )


def test_a_fault_run_is_scored_from_its_counterexample(tmp_path: Path) -> None:
    attempt = run_attempt("double_free_within_group", "chunk-p1", 120, tmp_path)
    assert attempt.result == DETECTED, attempt.detail
    assert attempt.first_failure_s is not None  # the run said when it first failed
    assert attempt.steps is not None and attempt.steps <= 4
    assert attempt.counterexample is not None
    replayed, recorded = _replayed_and_recorded(attempt.counterexample)
    assert recorded is not None and recorded[1:] == (attempt.failure_kind, attempt.failure_id)
    assert replayed == recorded
    assert fuzz_main(["replay", attempt.counterexample]) == 1


def test_a_run_is_killed_at_its_budget(tmp_path: Path) -> None:
    # TIMEOUT means the subprocess was killed: a run that ends by itself is missed, found or crashed.
    attempt = run_attempt(None, "radix-p4", 2, tmp_path)
    assert attempt.result == TIMEOUT
    assert attempt.first_failure_s is None and attempt.counterexample is None


def _detected(fault: str | None, pool: str = "chunk-p1") -> Attempt:
    return Attempt(fault, pool, DETECTED, 5.0, 0.5, 3, "invariant", "kv-presence", "ce.json")


def test_the_table_passes_only_with_every_fault_found_and_no_false_alarm() -> None:
    found = Score("a", "site", "origin", [_detected("a")])
    late = Score("b", "site", "origin", [Attempt("b", "chunk-p1", MISSED, 20.0), _detected("b", "radix-p4")])
    missed = Score("c", "site", "origin", [Attempt("c", "radix-p4", TIMEOUT, 60.0)])
    clean = Attempt(None, "chunk-p1", MISSED, 20.0)
    assert late.seconds == 20.5  # the pool that missed counts towards the time to find it
    assert report_of([found, late], [clean], 60)["summary"]["passed"]
    assert not report_of([found, missed], [clean], 60)["summary"]["passed"]
    alarmed = report_of([found], [clean, _detected(None, "radix-p4")], 60)
    assert not alarmed["summary"]["passed"]
    assert alarmed["summary"]["false_alarms"] == 1
    assert "FALSE ALARM" in markdown(alarmed)


def test_the_table_lists_every_out_of_scope_pattern_with_its_reason() -> None:
    text = markdown(report_of([], [], 60))
    for fault in PATTERNS.values():
        assert (f"| `{fault.name}` | {fault.origin} | {fault.out_of_scope} |" in text) != fault.in_scope


BAD_USAGE = [
    ["--budget", "0"],
    ["--budget", "soon"],
    ["--only", "no_such_fault"],
    ["--only", "mamba_slot_leak_on_reject"],  # out of scope: there is no switch to score
]


@pytest.mark.parametrize("argv", BAD_USAGE)
def test_bad_usage_exits_2(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as info:
        fuzz_main(["mutants", *argv])
    assert info.value.code == 2


# -- the no-fault runs on the upstream target (`fuzz mutants --target sglang`) ---------------------------------

KNOWN_ON_0518 = Path(__file__).resolve().parents[2] / "upstream" / "findings" / "stale-row-reuse.json"


BOOM = "RuntimeError: boom"


def _found(path: Path) -> Attempt:
    return Attempt(None, "p", DETECTED, 1.0, 0.5, 3, "accepted-forbidden", "reuse_released", str(path))


# Each way a no-fault run can end, on a version, and what `false_alarm_cli` says of it.
UPSTREAM_RUNS = [
    (Attempt(None, "p", MISSED, 1.0), "0.5.18", 0, "clean (profile ran out)"),
    (Attempt(None, "p", TIMEOUT, 1.0), "0.5.18", 0, "clean (budget ran out)"),
    (_found(KNOWN_ON_0518), "0.5.18", 0, "known stale-row-reuse"),
    (_found(KNOWN_ON_0518), "0.5.23", 1, "false alarm: accepted-forbidden reuse_released"),
    (Attempt(None, "p", UNSHRUNK, 1.0, 0.5), "0.5.23", 1, f"false alarm: {UNSHRUNK}"),
    (Attempt(None, "p", CRASH, 1.0, detail=BOOM), "0.5.23", 1, f"false alarm: {CRASH} ({BOOM})"),
]


def test_the_upstream_runs_count_every_alarm_the_scorer_counts() -> None:
    assert {attempt.result for attempt, _, code, _ in UPSTREAM_RUNS if code == 1} == set(ALARMS)


@pytest.mark.parametrize(("attempt", "version", "code", "said"), UPSTREAM_RUNS)
def test_a_no_fault_upstream_run_is_a_false_alarm_unless_clean_or_known(
    attempt: Attempt,
    version: str,
    code: int,
    said: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    asked: list[tuple[str | None, str, str]] = []

    def run(fault: str | None, pool: str, budget_s: float, out: Path, target: str = "reference") -> Attempt:
        asked.append((fault, pool, target))
        return attempt

    monkeypatch.setattr("fuzz.targets.installed_sglang", lambda: version)
    monkeypatch.setattr(fuzz.mutants, "upstream_run_pools", lambda: ["chunk-p1", "radix-p4"])
    monkeypatch.setattr(fuzz.mutants, "run_attempt", run)
    assert false_alarm_cli(5.0, tmp_path) == code
    lines = capsys.readouterr().out.splitlines()
    assert asked == [(None, "chunk-p1", "sglang"), (None, "radix-p4", "sglang")]
    assert lines[0] == f"fuzz mutants: sglang {version}, no fault, chunk-p1: {said} (1 s)"
    assert lines[-1] == f"fuzz mutants: sglang {version}: {2 * code} false alarms in 2 no-fault runs"


def test_the_upstream_runs_need_sglang(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr("fuzz.targets.installed_sglang", lambda: None)
    assert false_alarm_cli(5.0, Path("unused")) == 2
    assert "make sglang-setup" in capsys.readouterr().err


def test_the_upstream_runs_use_pool_names_fuzz_run_accepts() -> None:
    """Every pool the no-fault runs would ask for is one `fuzz run --pool` takes (here, without sglang: none)."""
    assert set(upstream_run_pools()) <= set(POOLS)
