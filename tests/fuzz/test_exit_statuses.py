"""Every exit status of every command, each made to happen, and the README's table checked against them.

A scenario drives the command's `main` in-process. Where the honest way to reach a status is minutes of fuzzing
(mutants finding every fault, verify-upstream without sglang here) the scenario stubs the slow part below the
command and the test shows how the command maps its outcome to a status; internal errors are planted by making
a function inside kvlife raise. An internal error must be one line on stderr naming a traceback file that holds
the traceback, and must never print "reproduced".

The make rows run `make -s TARGET` in a subprocess: make itself exits 2 on any failed recipe, and its last line on
stderr must name the command's own status.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import NamedTuple

import pytest

import fuzz.__main__ as fuzz_cli
import fuzz.campaign.resume
import fuzz.emit
import fuzz.lockstep
import fuzz.mutants
import fuzz.profiles
import fuzz.replay
import fuzz.run
import fuzz.upstream_verify
import model.__main__ as model_cli
from fuzz.profiles import DEFAULT_POOL, PROFILES
from model.exits import EXIT_INTERNAL

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
REGRESSION = next((ROOT / "tests" / "regressions").glob("test_*.py"))
Scenario = Callable[[Path, pytest.MonkeyPatch], int]
TINY = replace(PROFILES["ci"], max_examples=5, steps_per_case=5)
FINDS = replace(PROFILES["ci"], max_examples=200, steps_per_case=20)


def _planted(*_: object, **__: object) -> None:
    raise RuntimeError("planted internal error\nwith a second line")


def _exit(argv: list[str], main: Callable[[list[str]], int] = fuzz_cli.main) -> int:
    try:
        return main(argv)
    except SystemExit as exc:  # argparse's usage errors
        return int(exc.code or 0)


def _trace_file(tmp: Path, **changes: object) -> Path:
    doc = {"format": "kvlife-trace", "version": 1, "config": {**DEFAULT_POOL, "faults": []}, "seed": None}
    doc["steps"] = [{"op": "admit", "args": {"req": 0, "prompt": 2, "n": 2, "family": 0, "prefix": 0}}]
    path = tmp / "trace.json"
    path.write_text(json.dumps({**doc, **changes}))
    return path


def _failing_trace(tmp: Path) -> Path:
    """The shipped regression trace: it fails on the pool with its fault on."""
    text = re.search(r"^TRACE = '(.*)'$", REGRESSION.read_text(), re.M).group(1)  # type: ignore[union-attr]
    path = tmp / "failing.json"
    path.write_text(text)
    return path


def _too_big(tmp: Path) -> Path:
    return _trace_file(tmp, config={**DEFAULT_POOL, "faults": [], "rows": 1 << 20, "width": 1 << 20})


# -- model prove -------------------------------------------------------------------------------------------


def _prove(argv: list[str]) -> int:
    return _exit(["prove", *argv], model_cli.main)


def _prove_mismatch(tmp: Path, _: pytest.MonkeyPatch) -> int:
    manifest = tmp / "manifest.json"
    manifest.write_text(json.dumps({"theorems": {"stale-reuse:legacy-guard": {"outcome": "proved"}}}))
    return _prove(["--only", "stale-reuse:legacy-guard", "--manifest", str(manifest)])


def _prove_internal(tmp: Path, mp: pytest.MonkeyPatch) -> int:
    mp.setattr(model_cli, "_select", _planted)
    return _prove(["--only", "stale-reuse:legacy-guard"])


# -- run ----------------------------------------------------------------------------------------------------


def _run(tmp: Path, mp: pytest.MonkeyPatch, profile: object, *flags: str) -> int:
    mp.setitem(fuzz.profiles.PROFILES, "ci", profile)
    return _exit(["run", "--profile", "ci", "--out", str(tmp / "ce"), *flags])


def _run_internal(tmp: Path, mp: pytest.MonkeyPatch) -> int:
    mp.setattr(fuzz.run, "run", _planted)
    return _run(tmp, mp, TINY)


# -- replay and emit ------------------------------------------------------------------------------------------


def _replay_failing(tmp: Path, _: pytest.MonkeyPatch) -> int:
    """Exit 1, and the failure the pool shows is the one the file records: its step, kind and id."""
    path = _failing_trace(tmp)
    trace = fuzz.replay.load_trace(path, None)
    found = fuzz.replay.replay(trace).failure
    assert trace.failure is not None and found is not None
    assert (found.step, found.kind, found.id) == (trace.failure.step, trace.failure.kind, trace.failure.id)
    return _exit(["replay", str(path)])


def _replay_internal(tmp: Path, mp: pytest.MonkeyPatch) -> int:
    mp.setattr(fuzz.lockstep.Lockstep, "_observe", _planted)
    return _exit(["replay", str(_failing_trace(tmp))])


def _emit_internal(tmp: Path, mp: pytest.MonkeyPatch) -> int:
    mp.setattr(fuzz.emit, "emit", _planted)
    return _exit(["emit", str(_trace_file(tmp)), "--out", str(tmp / "reg")])


# -- mutants --------------------------------------------------------------------------------------------------


def _mutants(tmp: Path, mp: pytest.MonkeyPatch, baseline: str) -> int:
    """One fault, found at once; the no-fault baseline as given (a clean one, or a false alarm)."""

    def attempt(fault: str | None, pool: str, budget_s: float, out: Path, target: str = "") -> fuzz.mutants.Attempt:
        result = fuzz.mutants.DETECTED if fault else baseline
        return fuzz.mutants.Attempt(fault, pool, result, 0.1, 0.1 if fault else None, 3 if fault else None)

    mp.setattr(fuzz.mutants, "run_attempt", attempt)
    return _exit(["mutants", "--only", "legacy_reuse_guard", "--out", str(tmp / "m"), "--budget", "5"])


def _mutants_internal(tmp: Path, mp: pytest.MonkeyPatch) -> int:
    mp.setattr(fuzz.mutants, "run_attempt", _planted)
    return _exit(["mutants", "--only", "legacy_reuse_guard", "--out", str(tmp / "m"), "--budget", "5"])


# -- campaign -------------------------------------------------------------------------------------------------


def _campaign(tmp: Path, *flags: str) -> int:
    out, db = tmp / "out", tmp / "db"
    argv = ["campaign", "--budget", "1s", "--workers", "1", "--examples", "1", "--seed", "1"]
    return _exit([*argv, "--out", str(out), "--db", str(db), *flags])


def _campaign_found(tmp: Path, _: pytest.MonkeyPatch) -> int:
    (tmp / "out").mkdir()
    shutil.copy(_failing_trace(tmp), tmp / "out" / "earlier.json")  # re-checked first: it still fails
    return _campaign(tmp)


def _campaign_internal(tmp: Path, mp: pytest.MonkeyPatch) -> int:
    (tmp / "out").mkdir()
    shutil.copy(_failing_trace(tmp), tmp / "out" / "earlier.json")
    mp.setattr(fuzz.campaign.resume, "replay", _planted)  # the re-check of --out crashes kvlife, not the pool
    return _campaign(tmp)


# -- verify-upstream -------------------------------------------------------------------------------------------


def _verify(tmp: Path, mp: pytest.MonkeyPatch, problems: list[str], findings: Path | None = None) -> int:
    """The command with an sglang version pretended and the checks stubbed to report `problems`."""
    mp.setattr(fuzz.upstream_verify, "installed_sglang", lambda: "0.5.23")
    mp.setattr(fuzz.upstream_verify, "verify", lambda *a, **k: fuzz.upstream_verify.Report([], problems))
    findings = findings or ROOT / "upstream" / "findings.json"
    return _exit(["verify-upstream", "--findings", str(findings), "--out", str(tmp / "up")])


def _verify_invalid(tmp: Path, mp: pytest.MonkeyPatch) -> int:
    doc = json.loads((ROOT / "upstream" / "findings.json").read_text())
    doc["findings"][0]["replay"] = "../../etc/passwd"
    (tmp / "findings.json").write_text(json.dumps(doc))
    return _verify(tmp, mp, [], tmp / "findings.json")


def _verify_internal(tmp: Path, mp: pytest.MonkeyPatch) -> int:
    mp.setattr(fuzz.upstream_verify, "installed_sglang", lambda: "0.5.23")
    mp.setattr(fuzz.upstream_verify, "verify", _planted)
    findings = ROOT / "upstream" / "findings.json"
    return _exit(["verify-upstream", "--findings", str(findings), "--out", str(tmp / "up")])


# -- the hostile-file run -------------------------------------------------------------------------------------


def _hostile(tmp: Path, mp: pytest.MonkeyPatch, spoil: bool) -> int:
    from tests.fuzz import test_hostile_files as hostile

    if spoil:
        mp.setattr(hostile, "problems", lambda outcome: ["planted problem"])
    return hostile.main(["--files", "3", "--workers", "1", "--seed", "3"])


def _components(tmp: Path, mp: pytest.MonkeyPatch, *args: str) -> int:
    return _exit(["components", "--unit", "rows", "--examples", "5", *args])


def _components_broken(tmp: Path, mp: pytest.MonkeyPatch) -> int:
    """A row pool that hands out a row without bumping its generation: the component lockstep finds it (exit 1)."""
    import fuzz.components.cli as cli
    from tests.component_faults import generation_not_bumped

    fuzz_unit = cli.fuzz_unit
    mp.setattr(cli, "fuzz_unit", lambda spec, *a, **k: fuzz_unit(spec, *a, **{**k, "patch": generation_not_bumped}))
    return _exit(["components", "--unit", "rows", "--examples", "200"])


def _components_internal(tmp: Path, mp: pytest.MonkeyPatch) -> int:
    import fuzz.components.cli as cli

    mp.setattr(cli, "fuzz_unit", _planted)
    return _components(tmp, mp)


def _upstream_mutants(tmp: Path, mp: pytest.MonkeyPatch, found: bool, *argv: str) -> int:
    """The upstream exam on a one-file stand-in for sglang, its hunts stubbed: each finds its mutant (`found`) or
    walks clean; the control walk on the unmodified copy walks clean."""
    import subprocess

    import fuzz.upstream_mutants as exam
    from fuzz.upstream_catalog import SourceMutant

    (tmp / "sglang" / "srt").mkdir(parents=True)
    (tmp / "sglang" / "srt" / "mod.py").write_text("x = 1\n")
    mp.setattr(exam, "MUTANTS", (SourceMutant("planted", "srt/mod.py", "x = 1\n", "x = 2\n", "chunk-p1", "a"),))
    mp.setattr(exam, "sglang_package", lambda: tmp / "sglang")
    mp.setattr(exam, "installed_version", lambda: "0.0.1")

    def child(overlay: Path, pool: str, budget_s: float, engine: str = "walker") -> subprocess.CompletedProcess[str]:
        planted = found and (overlay / "sglang" / "srt" / "mod.py").read_text() == "x = 2\n"
        answer = json.dumps({"detail": "stubbed", "seconds": 0.1})
        return subprocess.CompletedProcess([], 1 if planted else 0, answer, "")

    mp.setattr(exam, "_walk_child", child)
    return _exit(list(argv), exam.main)


def _upstream_mutants_internal(tmp: Path, mp: pytest.MonkeyPatch) -> int:
    import fuzz.upstream_mutants as exam

    mp.setattr(exam, "run_exam", _planted)
    return _upstream_mutants(tmp, mp, True)


# -- make targets ------------------------------------------------------------------------------------------------

# make's line for a failed recipe, as GNU make prints it at any depth: `make: *** [Makefile:74: replay] Error 1`.
MAKE_FAILED = re.compile(r"^make(?:\[\d+\])?: \*\*\* \[(?:[^\]]*: )?(?P<target>[\w-]+)\] Error (?P<status>\d+)$")
# What an outer make (`make test`) or the caller's shell could hand the inner make, its flags and the Makefile's
# variables it reads from the environment: none of it may reach it.
_MAKE_FLAGS = ("MAKEFLAGS", "GNUMAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES")
_MAKE_VARIABLES = ("CE", "SGLANG", "SGLANG_SRC", "SGLANG_VENV_DIR", "VERIFY_ARGS")


class MakeCase(NamedTuple):
    command: str  # its row of the README's table
    status: int  # make's own exit status
    named: int  # the status make's last line names (`Error S`); 0 where the recipe passes and there is no such line
    args: Callable[[Path], list[str]]  # the target and its variables


def _make(args: list[str]) -> subprocess.CompletedProcess[str]:
    """`make -s ARGS` at the root, the venvs taken as built (`-o setup`, `-o sglang-setup`), replay run by this
    interpreter."""
    env = {name: value for name, value in os.environ.items() if name not in _MAKE_FLAGS + _MAKE_VARIABLES}
    argv = ["make", "-s", "-o", "setup", "-o", "sglang-setup", f"BIN={Path(sys.executable).parent}", *args]
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, env=env, timeout=300)


def _sglang_venvs(tmp: Path, *answers: int | None) -> list[str]:
    """`make verify-sglang` over one stand-in venv per answer, in order: its python exits with that status, or (None)
    runs the real verify-upstream in this venv, which has no sglang and refuses (2, one line on stderr).
    verify-upstream's own statuses are the in-process scenarios; these show how the recipe combines them."""
    names = []
    for index, answer in enumerate(answers):
        python = tmp / f".venv-sglang-stub{index}" / "bin" / "python"
        python.parent.mkdir(parents=True)
        body = f'exec {shlex.quote(sys.executable)} "$@"' if answer is None else f"exit {answer}"
        python.write_text(f"#!/bin/sh\n{body}\n")
        python.chmod(0o755)
        names.append(f"stub{index}")
    return ["verify-sglang", f"SGLANG_VENV_DIR={tmp}", f"SGLANG={' '.join(names)}"]


SCENARIOS: dict[tuple[str, int], Scenario] = {
    ("python -m model prove", 0): lambda tmp, mp: _prove(["--only", "stale-reuse:legacy-guard"]),
    ("python -m model prove", 1): _prove_mismatch,
    ("python -m model prove", 2): lambda tmp, mp: _prove(["--only", "no-such-theorem"]),
    ("python -m model prove", 70): _prove_internal,
    ("python -m fuzz run", 0): lambda tmp, mp: _run(tmp, mp, TINY),
    ("python -m fuzz run", 1): lambda tmp, mp: _run(tmp, mp, FINDS, "--fault", "legacy_reuse_guard"),
    ("python -m fuzz run", 2): lambda tmp, mp: _run(tmp, mp, TINY, "--out", str(_trace_file(tmp) / "sub")),
    ("python -m fuzz run", 70): _run_internal,
    ("python -m fuzz replay", 0): lambda tmp, mp: _exit(["replay", str(_trace_file(tmp))]),
    ("python -m fuzz replay", 1): _replay_failing,
    ("python -m fuzz replay", 2): lambda tmp, mp: _exit(["replay", str(_too_big(tmp))]),
    ("python -m fuzz replay", 70): _replay_internal,
    ("python -m fuzz emit", 0): lambda tmp, mp: _exit(["emit", str(_trace_file(tmp)), "--out", str(tmp / "reg")]),
    ("python -m fuzz emit", 2): lambda tmp, mp: _exit(["emit", str(_trace_file(tmp, steps={}))]),
    ("python -m fuzz emit", 70): _emit_internal,
    ("python -m fuzz mutants", 0): lambda tmp, mp: _mutants(tmp, mp, fuzz.mutants.MISSED),
    ("python -m fuzz mutants", 1): lambda tmp, mp: _mutants(tmp, mp, fuzz.mutants.DETECTED),
    ("python -m fuzz mutants", 2): lambda tmp, mp: _exit(["mutants", "--budget", "nan"]),
    ("python -m fuzz mutants", 70): _mutants_internal,
    ("python -m fuzz campaign", 0): lambda tmp, mp: _campaign(tmp),
    ("python -m fuzz campaign", 1): _campaign_found,
    ("python -m fuzz campaign", 2): lambda tmp, mp: _campaign(tmp, "--workers", "100000"),
    ("python -m fuzz campaign", 70): _campaign_internal,
    ("python -m fuzz components", 0): _components,
    ("python -m fuzz components", 1): _components_broken,
    ("python -m fuzz components", 2): lambda tmp, mp: _components(tmp, mp, "--unit", "no-such-unit"),
    ("python -m fuzz components", 70): _components_internal,
    ("python -m fuzz verify-upstream", 0): lambda tmp, mp: _verify(tmp, mp, []),
    ("python -m fuzz verify-upstream", 1): lambda tmp, mp: _verify(tmp, mp, ["a planted mismatch"]),
    ("python -m fuzz verify-upstream", 2): _verify_invalid,
    ("python -m fuzz verify-upstream", 70): _verify_internal,
    ("python -m fuzz.upstream_mutants", 0): lambda tmp, mp: _upstream_mutants(tmp, mp, True),
    ("python -m fuzz.upstream_mutants", 1): lambda tmp, mp: _upstream_mutants(tmp, mp, False),
    ("python -m fuzz.upstream_mutants", 2): lambda tmp, mp: _upstream_mutants(tmp, mp, True, "--only", "no-such"),
    ("python -m fuzz.upstream_mutants", 70): _upstream_mutants_internal,
    ("python -m tests.fuzz.test_hostile_files", 0): lambda tmp, mp: _hostile(tmp, mp, spoil=False),
    ("python -m tests.fuzz.test_hostile_files", 1): lambda tmp, mp: _hostile(tmp, mp, spoil=True),
}


REPLAY, VERIFY_SGLANG = "make replay CE=FILE", "make verify-sglang"
MAKE_CASES: dict[str, MakeCase] = {
    "replay passes": MakeCase(REPLAY, 0, 0, lambda tmp: ["replay", f"CE={_trace_file(tmp)}"]),
    "replay reproduces": MakeCase(REPLAY, 2, 1, lambda tmp: ["replay", f"CE={_failing_trace(tmp)}"]),
    "replay refuses the trace": MakeCase(REPLAY, 2, 2, lambda tmp: ["replay", f"CE={_too_big(tmp)}"]),
    "replay without CE": MakeCase(REPLAY, 2, 2, lambda tmp: ["replay"]),
    "verify-sglang matches": MakeCase(VERIFY_SGLANG, 0, 0, lambda tmp: _sglang_venvs(tmp, 0, 0)),
    "verify-sglang mismatches": MakeCase(VERIFY_SGLANG, 2, 1, lambda tmp: _sglang_venvs(tmp, 0, 1, 0)),
    "verify-sglang refused": MakeCase(VERIFY_SGLANG, 2, 2, lambda tmp: _sglang_venvs(tmp, 1, None)),
    "verify-sglang internal": MakeCase(VERIFY_SGLANG, 2, 70, lambda tmp: _sglang_venvs(tmp, 70, 2, 1)),
}


def readme_table() -> dict[tuple[str, int], str]:
    """The README's exit-status table: (command, status) -> what it means, for every cell that is not '—'."""
    lines = README.read_text().split("## Exit statuses", 1)[1].splitlines()
    header = next(line for line in lines if line.startswith("| command |"))
    statuses = [int(cell) for cell in _cells(header)[1:]]
    table = {}
    for line in lines[lines.index(header) + 2 :]:
        if not line.startswith("| `"):
            break
        cells = _cells(line)
        command = re.match(r"`([^`]+)`", cells[0]).group(1)  # type: ignore[union-attr]
        table |= {(command, s): meaning for s, meaning in zip(statuses, cells[1:], strict=True) if meaning != "—"}
    return table


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip())[1:-1]]


def test_the_readme_table_lists_exactly_the_statuses_the_scenarios_produce() -> None:
    assert set(readme_table()) == set(SCENARIOS) | {(case.command, case.status) for case in MAKE_CASES.values()}


@pytest.mark.parametrize(("command", "status"), sorted(SCENARIOS))
def test_each_status_happens_as_the_readme_says(
    command: str, status: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # where internal-error tracebacks go
    monkeypatch.setattr("tempfile.tempdir", None)
    code = SCENARIOS[(command, status)](tmp_path, monkeypatch)
    out, err = capfd.readouterr()
    assert code == status, out[-2000:] + err[-2000:]
    if status == EXIT_INTERNAL:
        _assert_internal_error_lines(out, err)
    elif status == 2:
        # argparse prints its usage (a first line and indented ones) before the one-line reason
        reasons = [line for line in err.splitlines() if line.strip() and not line.startswith(("usage:", " "))]
        assert len(reasons) == 1, err


@pytest.mark.parametrize("case", sorted(MAKE_CASES))
def test_make_exits_as_the_readme_says_and_names_the_commands_own_status(case: str, tmp_path: Path) -> None:
    _, status, named, args = MAKE_CASES[case]
    argv = args(tmp_path)
    done = _make(argv)
    assert done.returncode == status, done.stdout[-2000:] + done.stderr[-2000:]
    lines = done.stderr.splitlines()
    failed = [match for match in map(MAKE_FAILED.match, lines) if match]
    if named == 0:
        assert not failed, done.stderr
        return
    assert len(failed) == 1 and failed[0].string == lines[-1], done.stderr
    assert failed[0]["target"] == argv[0]
    assert int(failed[0]["status"]) == named, done.stderr
    if named == 2:
        reasons = [line for line in lines if line.strip() and not MAKE_FAILED.match(line)]
        assert len(reasons) == 1, done.stderr


def _assert_internal_error_lines(out: str, err: str) -> None:
    """Each line that reports an internal error names a file holding the planted traceback; nothing reproduced."""
    assert "reproduced" not in out
    lines = [line for line in (out + err).splitlines() if "internal error" in line and "traceback in" in line]
    assert lines, out + err
    for line in lines:
        named = re.search(r"traceback in (\S+\.txt)", line)
        assert named, line
        assert "RuntimeError: planted internal error" in Path(named.group(1)).read_text()


def test_a_config_over_the_memory_limit_is_refused_before_torch_is_imported(tmp_path: Path) -> None:
    """The replay of a file asking for a 4 TiB pool: exit 2, one line naming the fields and the limit, and
    nothing heavy loaded first (that is what makes the refusal take a fraction of a second)."""
    path = _too_big(tmp_path)
    probe = (
        "import sys; from fuzz.__main__ import main; code = main(['replay', sys.argv[1]]); "
        "print('torch loaded' if 'torch' in sys.modules else 'torch not loaded'); sys.exit(code)"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, str(path)], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.splitlines()
    assert "config.rows x config.width" in line and "more than the 256.0 MiB limit" in line
    assert done.stdout.strip() == "torch not loaded"


def test_the_cli_copies_of_heavy_modules_constants_agree() -> None:
    assert fuzz_cli.TARGET_NAMES == fuzz.profiles.TARGET_NAMES
    assert fuzz_cli.REGRESSIONS == fuzz.emit.REGRESSIONS
