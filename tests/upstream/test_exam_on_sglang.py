"""The upstream exam end to end on the installed sglang: a copy of it, two of the catalog's mutants planted in
turn, each found by the walker, the unmodified copy walked clean, and the installed package left as it was.

Runs only in a sglang venv (`make sglang-test`); `make mutants-sglang` runs the whole catalog.
"""

from __future__ import annotations

import hashlib
import importlib.util
from pathlib import Path

import pytest

if importlib.util.find_spec("sglang") is None:
    pytest.skip(
        "needs upstream sglang, which the main venv deliberately lacks; run `make sglang-test`",
        allow_module_level=True,
    )

import fuzz.upstream_mutants as exam
from fuzz.upstream_catalog import MUTANTS
from model.exits import EXIT_CLEAN, EXIT_FOUND

CHOSEN = ["rows-from-the-wrong-end", "release-keeps-lock"]
CATALOG_RELEASE = "0.5.23"  # the release whose text the catalog quotes


def _digest(package: Path, names: list[str]) -> dict[str, str]:
    paths = {m.path for m in MUTANTS if m.name in names}
    return {p: hashlib.sha256((package / p).read_bytes()).hexdigest() for p in paths if (package / p).is_file()}


def test_the_catalog_quotes_its_release() -> None:
    package = exam.sglang_package()
    assert package is not None
    problems = {m: exam.applies(m, package) for m in MUTANTS}
    if exam.installed_version() == CATALOG_RELEASE:
        assert {m.name: why for m, why in problems.items() if why} == {}
    # Elsewhere a mutant may not apply; the report says which file, on one line.
    assert all(why is None or (m.path in why and "\n" not in why) for m, why in problems.items())


def test_two_mutants_are_found_and_the_installed_sglang_is_untouched(capsys: pytest.CaptureFixture[str]) -> None:
    package = exam.sglang_package()
    assert package is not None
    before = _digest(package, CHOSEN)
    status = exam.main([*(a for name in CHOSEN for a in ("--only", name)), "--budget", "10s"])
    out = capsys.readouterr().out
    assert _digest(package, CHOSEN) == before
    applying = [name for name in CHOSEN if exam.applies(next(m for m in MUTANTS if m.name == name), package) is None]
    if not applying:
        assert status == EXIT_FOUND and "0 of 0 found" in out, out
        return
    assert status == EXIT_CLEAN, out
    assert f"{len(applying)} of {len(applying)} found" in out and "0 false alarms" in out, out
    for name in applying:
        assert any(line.split()[:1] == [name] and " found in " in line for line in out.splitlines()), out
