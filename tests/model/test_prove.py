"""The prover settles the theorems as the manifest says, reports solver timeouts as unknown, and refutes
the right theorem when the model is broken on purpose."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from model.__main__ import main as prove_main
from model.actions import EXTEND, FINISH, _extend_enabled, _release, _set_status, actions_for
from model.prove import bmc, induction
from model.theorems import RECORD_GUARD_INVARIANTS, SHAPES, SYMBOLIC, two_live_on_one_row
from properties.invariants import BY_ID
from properties.snapshot import STATUS_DONE

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
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps({"theorems": {"stale-reuse:legacy-guard": {"outcome": "proved"}}}))
    assert prove_main(["prove", "--only", "stale-reuse:legacy-guard", "--manifest", str(manifest)]) == 1
    assert "MISMATCH" in capsys.readouterr().out


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
    from model.actions import ADMIT, _admit_update

    def no_lock_move(o, p, s, a):  # type: ignore[no-untyped-def]
        after = _admit_update(o, p, s, a)
        return after.but(rec_locked=o.store(after.rec_locked, a["req"], o.If(a["prefix"] > 0, 1, 0)))

    steps = _steps(frozenset(), admit=dataclasses.replace(ADMIT, update=no_lock_move))
    result = induction("stale-lock", RADIX, steps, SYMBOLIC, BY_ID["lock-follows-prefix"])
    assert result.outcome == "refuted" and result.detail.startswith("admit:")
