"""Golden files pin what a counterexample file holds and what replaying it prints, plain and `--verbose`.

A failure here means the trace format or the replay output changed. If that was intended, regenerate the files
(`.venv/bin/python -m tests.golden.regenerate`, see `tests/golden/regenerate.py`) and review their diff."""

from __future__ import annotations

import difflib
from pathlib import Path

from fuzz.replay import load_trace, replay
from model.trace import dump
from tests.golden.regenerate import COUNTEREXAMPLE, REGENERATE, REPLAY, REPLAY_VERBOSE, replay_output


def _same_as_golden(golden: Path, actual: str) -> None:
    expected = golden.read_text()
    if actual != expected:
        diff = "".join(difflib.unified_diff(expected.splitlines(True), actual.splitlines(True), str(golden), "now"))
        raise AssertionError(f"{golden.name} differs from the output now; if intended, run `{REGENERATE}`\n{diff}")


def test_the_counterexample_file_is_written_as_pinned(tmp_path: Path) -> None:
    rewritten = tmp_path / "rewritten.json"
    dump(load_trace(COUNTEREXAMPLE, None), rewritten)
    _same_as_golden(COUNTEREXAMPLE, rewritten.read_text())


def test_the_counterexample_replays_the_failure_it_records() -> None:
    trace = load_trace(COUNTEREXAMPLE, None)
    found = replay(trace).failure
    assert trace.failure is not None and found is not None
    assert (found.step, found.kind, found.id) == (trace.failure.step, trace.failure.kind, trace.failure.id)


def test_replay_prints_what_is_pinned() -> None:
    code, out = replay_output(COUNTEREXAMPLE, verbose=False)
    assert code == 1
    _same_as_golden(REPLAY, out)


def test_verbose_replay_prints_what_is_pinned() -> None:
    code, out = replay_output(COUNTEREXAMPLE, verbose=True)
    assert code == 1
    _same_as_golden(REPLAY_VERBOSE, out)
