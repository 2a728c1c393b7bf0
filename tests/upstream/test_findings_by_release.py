"""A finding is keyed by the releases it reproduces on: it matches there, not on another release, and on a version
no release names (a source checkout) it matches by kind and id; the findings x release table is built from what
each release's verification wrote. Runs in any venv (no sglang needed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fuzz.upstream_findings import ROOT, Report, is_release, load_findings
from fuzz.upstream_verify import OUTCOMES, write_outcomes
from model.trace import Failure
from upstream import findings_matrix

FINDINGS = load_findings(ROOT / "upstream" / "findings.json")
STALE = next(f for f in FINDINGS if f.id == "stale-row-reuse")
ITS_FAILURE = Failure(2, STALE.expect_kind, STALE.expect_id, "")


@pytest.mark.parametrize(
    ("version", "matches"),
    [("0.5.18", True), ("0.5.23", False), ("0.5.24.dev1+g999897973", True), ("0.5.22.dev1+gcde2853c8", True)],
)
def test_a_finding_matches_on_its_releases_and_on_versions_no_release_names(version: str, matches: bool) -> None:
    assert STALE.matches(ITS_FAILURE, version) is matches
    assert not STALE.matches(Failure(2, "invariant", "token-conservation", ""), version)
    assert not STALE.matches(None, version)


def test_the_releases_are_those_of_the_list() -> None:
    assert is_release("0.5.20") and not is_release("0.5.24.dev1+g999897973")


def test_the_table_is_what_each_release_wrote(tmp_path: Path) -> None:
    versions = [line.split()[0] for line in (ROOT / "upstream" / "releases.txt").read_text().splitlines()
                if line.strip() and not line.startswith("#")]  # fmt: skip
    for index, version in enumerate(versions):
        report = Report(problems=["x"] * (index == 1))
        report.outcomes = {f.id: "reproduces" if version in f.versions else "passes" for f in FINDINGS}
        write_outcomes(tmp_path / version / OUTCOMES, version, report)
    text = findings_matrix.table(
        json.loads((ROOT / "upstream" / "findings.json").read_text())["findings"],
        {v: json.loads((tmp_path / v / OUTCOMES).read_text()) for v in versions},
    )
    header, _, *rows, verdicts = (_cells(line) for line in text.splitlines())
    assert header[2:] == versions
    stale_row = next(row for row in rows if row[0] == "`stale-row-reuse`")
    assert stale_row[2:4] == ["reproduces", "passes"]
    assert verdicts[2:4] == ["matches", "1 mismatches"]


def _cells(row: str) -> list[str]:
    return [cell.strip() for cell in row.strip().strip("|").split("|")]


def test_the_matrix_refuses_a_release_that_has_not_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert findings_matrix.main(["--out", str(tmp_path)]) == 2
    assert "no verification of 0.5.18" in capsys.readouterr().err
