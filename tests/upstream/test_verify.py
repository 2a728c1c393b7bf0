"""The findings manifest against the installed upstream SGLang: every entry reproduces on its versions and
passes on the others, and an expectation altered on purpose fails the checker.

Runs only in a sglang venv (`make sglang-test`); the main venv deliberately lacks sglang.
"""

from __future__ import annotations

import importlib.util
from dataclasses import replace
from typing import Any

import pytest

if importlib.util.find_spec("sglang") is None:
    pytest.skip(
        "needs upstream sglang, which the main venv deliberately lacks; run `make sglang-test`",
        allow_module_level=True,
    )

from fuzz.targets import installed_sglang
from fuzz.upstream_findings import ROOT, Finding, Report, load_findings
from fuzz.upstream_verify import check_findings

FINDINGS = ROOT / "upstream" / "findings.json"


def _version() -> str:
    version = installed_sglang()
    assert version is not None
    return version


def _check(findings: list[Finding]) -> Report:
    report = Report()
    check_findings(findings, _version(), report)
    return report


def test_every_finding_reproduces_where_it_applies_and_passes_elsewhere() -> None:
    findings = load_findings(FINDINGS)
    assert findings, "the manifest lists no finding"
    report = _check(findings)
    assert report.problems == []
    applies = [f.id for f in findings if _version() in f.versions]
    assert sum("reproduces" in line for line in report.lines) == len(applies)


def test_stale_row_reuse_is_a_0518_finding() -> None:
    stale = next(f for f in load_findings(FINDINGS) if f.id == "stale-row-reuse")
    assert stale.versions == ("0.5.18",)
    assert (stale.expect_kind, stale.expect_id) == ("accepted-forbidden", "reuse_released")


@pytest.mark.parametrize(
    "change",
    [
        {"expect_kind": "assert-tripped"},  # the recorded failure kind is wrong (no finding has it)
        {"expect_id": "release_again"},  # the recorded failing op is wrong
    ],
)
def test_an_altered_expectation_fails_the_checker(change: dict[str, Any]) -> None:
    altered = [replace(f, versions=(_version(),), **change) for f in load_findings(FINDINGS)]
    report = _check(altered)
    assert len(report.problems) == len(altered)
    assert all("no longer reproduces" in problem for problem in report.problems)


def test_a_finding_moved_to_another_version_fails_where_it_still_reproduces() -> None:
    """Moved off every release, each finding whose replay fails here is a mismatch: those of this release, and
    those whose replay here shows another finding of this release (which the intact manifest explains)."""
    findings = load_findings(FINDINGS)
    intact = _check(findings)
    still_failing = [f.id for f in findings if intact.outcomes[f.id] != "passes"]
    assert {f.id for f in findings if _version() in f.versions} <= set(still_failing)
    moved = [replace(f, versions=("0.0.0",)) for f in findings]
    report = _check(moved)
    assert [p.split(":")[0] for p in report.problems] == still_failing
