"""`--target`: asking for the upstream target where sglang is absent is a one-line usage error (exit 2), and
the fuzzer draws only the ops the target implements."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import fuzz.targets
from fuzz.drain import DRAIN
from fuzz.lockstep import OPS
from fuzz.profiles import DEFAULT_POOL, Profile
from fuzz.run import run
from fuzz.targets import target_ops
from fuzz.upstream_findings import FindingsError, load_findings
from impl.engine import ReferencePool
from model.trace import Step, Trace, load

ROOT = Path(__file__).resolve().parents[2]
QUICK = Profile("test", max_examples=40, steps_per_case=15, derandomize=True, keep_database=False)
no_sglang = pytest.mark.skipif(importlib.util.find_spec("sglang") is not None, reason="sglang is installed here")


def _fuzz(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fuzz", *argv], capture_output=True, text=True, cwd=ROOT, timeout=300, check=False
    )


ADMIT = {"op": "admit", "args": {"req": 0, "prompt": 2, "n": 2, "family": 0, "prefix": 0}, "choice": {}}


def _trace(tmp_path: Path, steps: list[dict[str, Any]] | None = None) -> Path:
    """A trace file on the default pool: one admission, or `steps`."""
    path = tmp_path / "trace.json"
    steps = [ADMIT] if steps is None else steps
    path.write_text(
        json.dumps(
            {
                "format": "kvlife-trace",
                "version": 1,
                "config": {**DEFAULT_POOL, "faults": []},
                "seed": None,
                "steps": steps,
            }
        )
    )
    return path


@no_sglang
@pytest.mark.parametrize(
    "argv",
    [
        ("run", "--profile", "ci", "--target", "sglang"),
        ("replay", "{trace}", "--target", "sglang"),
    ],
)
def test_sglang_target_without_sglang_is_one_line_exit_2(tmp_path: Path, argv: tuple[str, ...]) -> None:
    done = _fuzz(*(arg.format(trace=_trace(tmp_path)) for arg in argv))
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "make sglang-setup" in lines[0]
    assert ".venv-sglang-" in lines[0]


def test_faults_on_the_sglang_target_are_refused_in_one_line() -> None:
    done = _fuzz("run", "--profile", "ci", "--target", "sglang", "--fault", "legacy_reuse_guard")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "fuzz run: faults are not supported on the upstream target (asked for legacy_reuse_guard)"
    ]


def test_mutants_on_sglang_refuses_fault_selection() -> None:
    done = _fuzz("mutants", "--target", "sglang", "--only", "legacy_reuse_guard")
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1
    assert "no-fault" in done.stderr


def test_replay_of_an_op_the_target_lacks_is_exit_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    class AdmitOnly(ReferencePool):
        OPS = frozenset({"admit"})

    path = _trace(tmp_path, [ADMIT, {"op": "decode", "args": {"req": 0}, "choice": {}}])
    monkeypatch.setitem(fuzz.targets.TARGETS, "reference", lambda: AdmitOnly)
    from fuzz.__main__ import main

    assert main(["replay", str(path)]) == 2


class FewOps(ReferencePool):
    """The reference pool claiming only a few ops, as a narrower target would."""

    OPS = frozenset({"admit", "extend", "decode", "finish", "release_again"})


def test_sglang_ops_are_the_adapters_list() -> None:
    ops = target_ops({"target": "sglang"})
    assert {"admit", "extend", "decode", "finish", "evict", "reuse_released", "differential"} <= ops
    assert {"spec_prepare", "spec_commit", "pd_prealloc", "offload_release"} <= ops
    assert target_ops({"target": "reference"}) | {"drain"} == OPS  # the drain is the lockstep's own


def test_machine_draws_only_the_targets_ops(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    everything = run({**DEFAULT_POOL, "faults": []}, QUICK, None, tmp_path / "ce", tmp_path / "db")
    assert set(everything.ops) - FewOps.OPS, "the unfiltered run must draw more than the narrow target's ops"
    monkeypatch.setitem(fuzz.targets.TARGETS, "reference", lambda: FewOps)
    narrow = run({**DEFAULT_POOL, "faults": []}, QUICK, None, tmp_path / "ce", tmp_path / "db")
    assert narrow.counterexample is None
    assert set(narrow.ops) <= FewOps.OPS | {"differential"}
    assert {"admit", "finish", "release_again"} <= set(narrow.ops)


def test_excluded_ops_are_never_drawn(tmp_path: Path) -> None:
    result = run(
        {**DEFAULT_POOL, "faults": []},
        QUICK,
        None,
        tmp_path / "ce",
        tmp_path / "db",
        exclude=frozenset({"reuse_released", "finish"}),
    )
    assert result.ops.keys().isdisjoint({"reuse_released", "finish"})
    assert {"pp_release", "retract", "abort"} & result.ops.keys(), "the release rule draws its other paths"


@no_sglang
def test_verify_upstream_without_sglang_is_one_line_exit_2() -> None:
    done = _fuzz("verify-upstream")
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1
    assert "make verify-sglang" in done.stderr


def test_the_findings_manifest_loads_and_each_replay_names_its_failure() -> None:
    findings = load_findings(ROOT / "upstream" / "findings.json")
    assert findings
    for finding in findings:
        trace = load(finding.replay)
        assert trace.failure is not None
        assert (trace.failure.kind, trace.failure.id) == (finding.expect_kind, finding.expect_id)
        assert trace.config["faults"] == []


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"triage": "maybe"}, "triage must be one of"),
        ({"replay": "upstream/findings/missing.json"}, "does not exist"),
        ({"expect": None}, "lacks or mistypes"),
    ],
)
def test_a_malformed_finding_is_refused_in_one_line(tmp_path: Path, change: dict[str, object], reason: str) -> None:
    doc = json.loads((ROOT / "upstream" / "findings.json").read_text())
    doc["findings"][0].update(change)
    path = tmp_path / "findings.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(FindingsError, match=reason) as refusal:
        load_findings(path)
    assert "\n" not in str(refusal.value)


def test_a_flushing_drain_triggers_a_flush_finding_and_an_unflushed_one_does_not() -> None:
    (finding,) = [f for f in load_findings(ROOT / "upstream" / "findings.json") if f.id == "clear-zeroes-generations"]
    admit = Step("admit", {"req": 0, "n": 4, "prompt": 4, "family": 0})
    with_drain = [admit, Step(DRAIN, {})]
    assert finding.triggered_by(Trace(DEFAULT_POOL, None, with_drain))
    assert not finding.triggered_by(Trace(DEFAULT_POOL, None, [admit, Step(DRAIN, {"flush": 0})]))
    assert not finding.triggered_by(Trace(DEFAULT_POOL, None, [admit]))
