"""The upstream exam's machinery, without sglang: the catalog is well formed, a mutant applies only where its
original text occurs once, a hunt edits the copy and puts it back, a child's answer is read as found, missed or a
crash, and the exam's verdict follows its outcomes (the real hunts run in `make sglang-test` and
`make mutants-sglang`)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

import fuzz.upstream_mutants as exam
from fuzz.profiles import POOLS
from fuzz.upstream_catalog import MUTANTS, SourceMutant
from impl.target import TREE_CORES
from model.exits import EXIT_CLEAN, EXIT_FOUND, EXIT_INTERNAL

MUTANT = SourceMutant("planted", "srt/mod.py", "x = 1\n", "x = 2\n", "chunk-p1", "a test's")


def _package(tmp: Path, text: str = "x = 1\n") -> Path:
    package = tmp / "sglang"
    (package / "srt").mkdir(parents=True)
    (package / "srt" / "mod.py").write_text(text)
    return package


def _child(code: int, answer: dict[str, object] | None = None, stderr: str = "") -> subprocess.CompletedProcess[str]:
    out = json.dumps(answer) + "\n" if answer is not None else "Traceback ...\n"
    return subprocess.CompletedProcess([], code, out, stderr)


def test_the_catalog_is_well_formed() -> None:
    assert len({m.name for m in MUTANTS}) == len(MUTANTS)
    for m in MUTANTS:
        pool, _, core = m.pool.removesuffix("+faults").partition(":")
        assert pool in POOLS and core in ("", *TREE_CORES), m.name
        assert m.original and m.original != m.mutated, m.name
        assert m.path.startswith("srt/") and m.path.endswith(".py") and ".." not in m.path, m.name
        assert m.shape, m.name


@pytest.mark.parametrize(("text", "why"), [("x = 1\n", None), ("", "occurs 0 times"), ("x = 1\nx = 1\n", "2 times")])
def test_a_mutant_applies_only_where_its_text_occurs_once(tmp_path: Path, text: str, why: str | None) -> None:
    problem = exam.applies(MUTANT, _package(tmp_path, text))
    assert problem == why if why is None else why in str(problem)


def test_a_mutant_of_a_file_the_release_lacks_does_not_apply(tmp_path: Path) -> None:
    assert exam.applies(SourceMutant("m", "srt/gone.py", "a", "b", "chunk-p1", "s"), _package(tmp_path)) is not None


def test_a_hunt_runs_on_the_edited_copy_and_puts_the_file_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package = _package(tmp_path)
    seen = []

    def child(overlay: Path, pool: str, budget_s: float, engine: str = "walker") -> subprocess.CompletedProcess[str]:
        seen.append(((overlay / "sglang" / "srt" / "mod.py").read_text(), pool))
        return _child(EXIT_FOUND, {"detail": "step 3: invariant x", "seconds": 0.5})

    monkeypatch.setattr(exam, "_walk_child", child)
    outcome = exam.hunt(MUTANT, package, 5.0)
    assert seen == [("x = 2\n", "chunk-p1")]
    assert (package / "srt" / "mod.py").read_text() == "x = 1\n"
    assert (outcome.verdict, outcome.detail, outcome.seconds) == ("found", "step 3: invariant x", 0.5)


@pytest.mark.parametrize(
    ("child", "verdict"),
    [
        (_child(EXIT_FOUND, {"detail": "d", "seconds": 1}), "found"),
        (_child(EXIT_CLEAN, {"detail": "d", "seconds": 1}), "missed"),
        (_child(EXIT_INTERNAL, {"detail": "d"}), "error"),  # an answer under a crash status is still a crash
        (_child(EXIT_FOUND, None, "KeyError: 'evicted'"), "error"),
        (_child(EXIT_CLEAN, None), "error"),
        (subprocess.CompletedProcess([], EXIT_FOUND, "[1, 2]\n", ""), "error"),
    ],
)
def test_a_childs_answer_is_found_missed_or_a_crash(child: subprocess.CompletedProcess[str], verdict: str) -> None:
    assert exam._judge(MUTANT, child).verdict == verdict


def _outcomes(*verdicts: str) -> list[exam.Outcome]:
    control = SourceMutant(exam.UNMODIFIED, "", "", "", "chunk-p1", "")
    first, *rest = verdicts
    return [exam.Outcome(control, first, ""), *(exam.Outcome(MUTANT, v, "") for v in rest)]


@pytest.mark.parametrize(
    ("verdicts", "status"),
    [
        (("clean", "found", "found", "n/a"), EXIT_CLEAN),
        (("clean", "found", "missed"), EXIT_FOUND),
        (("false alarm", "found"), EXIT_FOUND),
        (("clean", "n/a"), EXIT_FOUND),  # nothing applied: nothing was examined
        (("clean", "found", "error"), EXIT_INTERNAL),
        (("error", "found"), EXIT_INTERNAL),
    ],
)
def test_the_verdict_follows_the_outcomes(verdicts: tuple[str, ...], status: int) -> None:
    line, got = exam.summary(_outcomes(*verdicts), "0.0.1")
    assert got == status, line
    assert line.startswith("upstream mutants on sglang 0.0.1: ")
