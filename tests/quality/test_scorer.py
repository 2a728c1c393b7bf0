"""The mutant scorer: a fault runs in a fresh subprocess and is scored from the counterexample it writes, a run
is killed at its budget, the table passes only when every fault is found and no fault-free run finds anything,
and bad usage exits 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from fuzz.__main__ import main as fuzz_main
from fuzz.mutants import DETECTED, MISSED, TIMEOUT, Attempt, Score, markdown, report_of, run_attempt
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
