"""The manifest and the theorems in code are one set: a theorem deleted from `THEOREMS`, or a row deleted from
the manifest, fails `python -m model prove` (what `make verify` runs), with or without `--only`; each row
records the theorem's assumptions, which must match, and its last runtime, which is recorded, not compared.

Deletions happen on copies of the manifest and on `THEOREMS` patched in-process, never on the real files."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import model.__main__ as prove_cli
from model import manifest
from model.__main__ import main as prove_main
from model.theorems import SYMBOLIC, THEOREMS, Theorem

# Cheap to settle (one solver query each): the runs below settle only these.
CHEAP = ("sentinel-boundary:raw-guard", "release-equivalence@chunk")


def _theorem(name: str) -> Theorem:
    return next(t for t in THEOREMS if t.name == name)


def _edited(tmp_path: Path, edit: Callable[[dict[str, Any]], None]) -> Path:
    """A copy of the real manifest with `edit` applied to its rows."""
    doc = json.loads(manifest.MANIFEST.read_text())
    edit(doc["theorems"])
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps(doc, indent=1))
    return path


def _only_cheap(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """Code that has only the cheap theorems, and a manifest with exactly their rows: a run without --only is quick."""
    monkeypatch.setattr(prove_cli, "THEOREMS", tuple(_theorem(name) for name in CHEAP))

    def keep_cheap(rows: dict[str, Any]) -> None:
        for name in set(rows) - set(CHEAP):
            del rows[name]

    return _edited(tmp_path, keep_cheap)


def test_the_manifest_has_one_row_per_theorem_with_its_assumptions_and_runtime() -> None:
    rows = manifest.load(manifest.MANIFEST)
    assert manifest.unpaired(rows, THEOREMS) == []
    for theorem in THEOREMS:
        assert rows[theorem.name].assumes == theorem.assumes, theorem.name
        assert rows[theorem.name].seconds is not None, f"{theorem.name} records no runtime"


def test_each_inductive_row_assumes_the_other_invariants() -> None:
    rows = manifest.load(manifest.MANIFEST)
    for inv in SYMBOLIC:
        for shape in ("chunk", "radix"):
            assumed = set(rows[f"inductive:{inv.id}@{shape}"].assumes)
            assert assumed == {other.id for other in SYMBOLIC} - {inv.id}


def test_the_cheap_set_passes_as_it_stands(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The control for the deletions below: the reduced code and manifest match."""
    assert prove_main(["prove", "--manifest", str(_only_cheap(monkeypatch, tmp_path))]) == 0


@pytest.mark.parametrize("only", [[], ["--only", CHEAP[0]]], ids=["all", "only"])
def test_a_row_deleted_from_the_manifest_fails_the_run(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str], only: list[str]
) -> None:
    path = _only_cheap(monkeypatch, tmp_path)
    rows = json.loads(path.read_text())
    del rows["theorems"][CHEAP[1]]
    path.write_text(json.dumps(rows))
    assert prove_main(["prove", "--manifest", str(path), *only]) == 1
    out = capsys.readouterr().out
    assert f"MISMATCH theorem {CHEAP[1]} has no manifest row" in out
    assert f"not one set: theorem {CHEAP[1]} has no manifest row" in out


@pytest.mark.parametrize("only", [[], ["--only", CHEAP[0]]], ids=["all", "only"])
def test_a_theorem_deleted_from_the_code_fails_the_run(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str], only: list[str]
) -> None:
    path = _only_cheap(monkeypatch, tmp_path)
    monkeypatch.setattr(prove_cli, "THEOREMS", (_theorem(CHEAP[0]),))
    assert prove_main(["prove", "--manifest", str(path), *only]) == 1
    out = capsys.readouterr().out
    assert f"MISMATCH manifest row {CHEAP[1]} names no theorem" in out
    assert f"not one set: manifest row {CHEAP[1]} names no theorem" in out


def test_the_real_manifest_with_a_row_deleted_fails_under_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _edited(tmp_path, lambda rows: rows.pop("stale-reuse:legacy-guard"))
    assert prove_main(["prove", "--manifest", str(path), "--only", CHEAP[0]]) == 1
    assert "theorem stale-reuse:legacy-guard has no manifest row" in capsys.readouterr().out


def _drop_assumption(rows: dict[str, Any]) -> None:
    rows[CHEAP[1]]["assumes"].remove("live(req)")


def _add_assumption(rows: dict[str, Any]) -> None:
    rows[CHEAP[1]]["assumes"].append("tree-counters")


@pytest.mark.parametrize(
    ("edit", "said"),
    [
        (_drop_assumption, "assumes what its row does not record: live(req)"),
        (_add_assumption, "its row records assumptions the theorem no longer makes: tree-counters"),
    ],
    ids=["row-lacks-one", "row-has-extra"],
)
def test_a_row_whose_assumptions_differ_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], edit: Callable[[dict[str, Any]], None], said: str
) -> None:
    assert prove_main(["prove", "--manifest", str(_edited(tmp_path, edit)), "--only", CHEAP[1]]) == 1
    out = capsys.readouterr().out
    assert "MISMATCH" in out and said in out


def test_only_names_the_assumed_invariants_it_leaves_unsettled(capsys: pytest.CaptureFixture[str]) -> None:
    assert prove_main(["prove", "--only", "inductive:kv-presence@chunk", "--only", "inductive:row-owner@chunk"]) == 0
    lines = capsys.readouterr().out.splitlines()
    row = next(k for k, line in enumerate(lines) if line.startswith("inductive:kv-presence@chunk"))
    unsettled = lines[row + 1]
    assert unsettled.startswith("  assumes ") and unsettled.endswith("whose theorems this run does not settle")
    assert "row-exclusive" in unsettled and "row-owner" not in unsettled  # row-owner is settled in this run


def test_record_seconds_writes_runtimes_only_after_a_matching_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _edited(tmp_path, lambda rows: rows[CHEAP[0]].update(seconds=1234.5))
    assert prove_main(["prove", "--manifest", str(path), "--only", CHEAP[0], "--record-seconds"]) == 0
    recorded = json.loads(path.read_text())["theorems"]
    original = json.loads(manifest.MANIFEST.read_text())["theorems"]
    written = recorded[CHEAP[0]].pop("seconds")
    original[CHEAP[0]].pop("seconds")
    assert recorded == original  # only the settled theorem's runtime changed
    assert isinstance(written, float) and written != 1234.5
    mismatched = _edited(tmp_path, lambda rows: rows[CHEAP[0]].update(outcome="refuted", seconds=1234.5))
    before = mismatched.read_text()
    assert prove_main(["prove", "--manifest", str(mismatched), "--only", CHEAP[0], "--record-seconds"]) == 1
    assert mismatched.read_text() == before
    assert "runtimes not recorded" in capsys.readouterr().out


@pytest.mark.parametrize(
    "row",
    [{"assumes": []}, {"outcome": "proved", "assumes": "live(req)"}, {"outcome": "proved", "seconds": -1}],
    ids=["no-outcome", "assumes-not-a-list", "negative-seconds"],
)
def test_a_malformed_row_is_bad_usage(tmp_path: Path, row: dict[str, Any]) -> None:
    path = _edited(tmp_path, lambda rows: rows.update({CHEAP[0]: row}))
    assert prove_main(["prove", "--manifest", str(path), "--only", CHEAP[0]]) == 2
