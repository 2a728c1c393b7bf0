"""The prover as a library (`model.settle`): theorems settled by name, searches restricted to given ops by argument
(no module state), refutations turned into the counterexample files `python -m model prove` writes."""

from __future__ import annotations

from pathlib import Path

import pytest

from model import theorems
from model.__main__ import main as prove_main
from model.settle import settle, settle_named, write_trace
from model.theorems import THEOREMS
from model.trace import load

LEGACY = "stale-reuse:legacy-guard"
UPSTREAM_LIKE = frozenset({"admit", "extend", "pp_release", "finish", "abort"})  # no pd_prealloc


def test_a_restricted_search_returns_a_trace_through_those_ops_only() -> None:
    (settled,) = settle_named([LEGACY], ops=UPSTREAM_LIKE)
    assert settled.theorem.name == LEGACY and settled.result.outcome == "refuted"
    assert settled.trace is not None and settled.trace.failure is not None
    assert {step.op for step in settled.trace.steps} <= UPSTREAM_LIKE
    assert (settled.trace.failure.kind, settled.trace.failure.id) == ("invariant", "row-exclusive")
    assert settled.trace.failure.step == len(settled.trace.steps) - 1
    assert settled.trace.meta == {"source": "z3", "theorem": LEGACY}
    assert settled.trace.config["faults"] == ["legacy_reuse_guard", "raw_row_free"]


def test_a_restriction_is_an_argument_not_a_state_left_behind() -> None:
    settle_named([LEGACY], ops=frozenset({"admit", "finish"}))
    legacy = next(t for t in THEOREMS if t.name == LEGACY)
    assert "pd_prealloc" in {a.name for a in theorems.steps_of(legacy.faults)}
    (unrestricted,) = settle_named([LEGACY])
    assert unrestricted.trace is not None


def test_a_proof_has_no_trace_and_an_unknown_name_is_a_key_error() -> None:
    (proved,) = settle_named(["release-equivalence@chunk"])
    assert proved.result.outcome == "proved" and proved.trace is None
    with pytest.raises(KeyError, match="no-such-theorem"):
        settle_named([LEGACY, "no-such-theorem"])


def test_the_cli_writes_the_trace_the_library_returns(tmp_path: Path) -> None:
    assert prove_main(["prove", "--only", LEGACY, "--export-traces", str(tmp_path / "cli")]) == 0
    (from_cli,) = (tmp_path / "cli").glob("*.json")
    legacy = next(t for t in THEOREMS if t.name == LEGACY)
    from_library = write_trace(settle(legacy), tmp_path / "lib")
    assert from_library.name == from_cli.name == "stale-reuse_legacy-guard.json"
    cli, library = load(from_cli), load(from_library)
    # Z3 may pick another trace of the same depth from one query to the next; what the file says of the theorem
    # (its pool, its source, the failure at its last step) may not differ.
    assert len(library.steps) == len(cli.steps)
    assert (library.config, library.meta) == (cli.config, cli.meta)
    assert library.failure is not None and cli.failure is not None
    assert (library.failure.step, library.failure.kind, library.failure.id) == (
        cli.failure.step,
        cli.failure.kind,
        cli.failure.id,
    )
