"""What kvlife writes from a file's contents is data: an emitted regression test is inert whatever the trace's
strings hold, reports escape what they quote, written files follow the umask; and the other inputs a user types
(flags, folders, environment variables) are refused in one line."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import stat
import sys
from pathlib import Path
from typing import Any

import pytest

import fuzz.emit
from fuzz.__main__ import main as fuzz_main
from fuzz.campaign.findings import add_finding
from fuzz.campaign.report import code, markdown, text, write_report
from fuzz.environment import BadEnvironment, env_count, env_folder, env_names
from fuzz.profiles import DEFAULT_POOL
from model.trace import Failure, Step, Trace, dump, parse
from tests.fuzz.test_hostile_files import inert_problem

ADMIT = Step("admit", {"req": 0, "prompt": 2, "n": 2, "family": 0, "prefix": 0})
FINISH = Step("finish", {"req": 0})


def _payloads(marker: Path) -> list[str]:
    """Strings that would create `marker` if any of them became code, each escaping a different way."""
    touch = f"__import__('pathlib').Path({str(marker)!r}).touch()"
    return [
        f'"""\n{touch}\n"""',
        f"'''\n{touch}\n'''",
        f"'); {touch}; ('",
        f'"); {touch}; ("',
        f"\\'; {touch} #",
        f"{{{touch}}}",
        f"\\\n{touch}",
        f"\x00\u2028é日本\U0001f600 {touch} \\x00 \\u0000 {{0}} %s",
    ]


def _breakout_trace(marker: Path) -> Trace:
    """A trace whose every free-text string is a breakout attempt (the config's enumerated strings can only be
    their known values; its fault names go through as data, and the emitted test replaces them)."""
    one_line = [p.replace("\n", " ").replace("\x00", " ").replace("\u2028", " ") for p in _payloads(marker)]
    config = {**DEFAULT_POOL, "faults": one_line[:3]}
    failure = Failure(1, one_line[0], one_line[2], "\n".join(_payloads(marker)))
    meta = {p[:40].replace("\n", " ").replace("\x00", " ").replace("\u2028", " "): p for p in _payloads(marker)}
    return Trace(config, 5, [ADMIT, FINISH], failure, meta)


def test_an_emitted_test_from_breakout_strings_is_inert_and_runs_only_the_replay(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = tmp_path / "pwned"
    trace = _breakout_trace(marker)
    dump(trace, tmp_path / "trace.json")
    assert fuzz_main(["emit", str(tmp_path / "trace.json"), "--out", str(tmp_path / "reg")]) == 0
    (emitted,) = (tmp_path / "reg").glob("test_*.py")
    source = emitted.read_text()
    assert inert_problem(source) is None, source
    assert source.isascii() and not marker.exists()

    calls: list[str] = []
    real = fuzz.emit.replay_regression
    monkeypatch.setattr(fuzz.emit, "replay_regression", lambda trace_json: calls.append(trace_json) or real(trace_json))
    monkeypatch.delenv("KVLIFE_REGRESSION_FAULTS", raising=False)
    module = _import(emitted)
    assert not marker.exists() and calls == [], "importing the module ran something"
    tests = [getattr(module, name) for name in dir(module) if name.startswith("test_")]
    assert len(tests) == 1
    tests[0]()  # the replay itself: the trace passes on the pool with no fault
    assert len(calls) == 1 and parse(calls[0].encode()) == trace, "the replay got the trace exactly, strings intact"
    assert not marker.exists()


def _import(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(f"emitted_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.pop(spec.name, None)
    spec.loader.exec_module(module)
    return module


def test_an_emitted_test_fails_with_the_fault_named_in_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    failing = Trace({**DEFAULT_POOL, "faults": ["legacy_reuse_guard"]}, None, _reuse_steps())
    module = _import(fuzz.emit.emit(failing, tmp_path))
    (test,) = [getattr(module, n) for n in dir(module) if n.startswith("test_")]
    test()
    monkeypatch.setenv("KVLIFE_REGRESSION_FAULTS", "legacy_reuse_guard")
    with pytest.raises(AssertionError, match="accepted-forbidden"):
        test()
    monkeypatch.setenv("KVLIFE_REGRESSION_FAULTS", "legacy_reuse_guard,no_such_fault")
    with pytest.raises(BadEnvironment, match="KVLIFE_REGRESSION_FAULTS names 'no_such_fault'"):
        test()


def _reuse_steps() -> list[Step]:
    return [
        Step("admit", {"req": 0, "prompt": 2, "n": 1, "family": 0, "prefix": 0}),
        Step("pp_release_manual", {"req": 0}),
        Step("reuse_released", {"req": 0, "row": 4, "n": 1}),
    ]


# -- reports -----------------------------------------------------------------------------------------------------

HOSTILE = "x|y` **b** <img src=x> [l](http://e) # h\n- item \\ `` ``` \x1b[31m"


def _report(tmp_path: Path) -> dict[str, Any]:
    groups: dict[Any, Any] = {}
    name = str(tmp_path / f"{HOSTILE.replace('/', '_')}.json")
    trace = Trace({**DEFAULT_POOL, "faults": [HOSTILE]}, None, [ADMIT], Failure(0, HOSTILE, HOSTILE, HOSTILE))
    add_finding(groups, name, trace)
    return {
        "exit_code": 1,
        "groups": [{**g.as_json(), "regression": name} for g in groups.values()],
        "commit": HOSTILE,
        "seed_base": 0,
        "shard": "1/1",
        "workers": 1,
        "target": "reference",
        "faults": [HOSTILE],
        "budget_s": 1.0,
        "elapsed_s": 1.0,
        "units": [],
        "examples_per_unit": 1,
        "steps": 0,
        "steps_per_s": 0.0,
        "steps_per_core_hour": 0,
        "steps_per_cpu_hour": 0,
        "rerun": HOSTILE,
        "per_worker": [],
        "crashed": {"0": HOSTILE},
        "rechecked": [{"file": name, "status": f"invalid: {HOSTILE}"}],
        "corners": {HOSTILE: 1.0},
        "coverage": [],
        "engines": ["walker", "hypothesis"],
        "engine_cycle": ["walker", "walker", "walker", "hypothesis"],
        "per_engine": [],
        "transitions": {"walker": 0, "hypothesis": 0, "union": 0},
        "transitions_over_time": {"columns": ["seconds", "walker", "hypothesis", "union"], "points": []},
        "stall_s": 45.0,
    }


def test_the_markdown_report_quotes_hostile_strings_as_text() -> None:
    report = _report(Path("/tmp"))
    benign = json.loads(json.dumps(report).replace(json.dumps(HOSTILE)[1:-1], "plain"))
    lines, plain = markdown(report).splitlines(), markdown(benign).splitlines()
    assert len(lines) == len(plain), "a string from a file added or removed a line"
    for line, other in zip(lines, plain, strict=True):
        assert line.startswith("#") == other.startswith("#") and line.startswith("- ") == other.startswith("- ")
        assert _cells(line) == _cells(other), line
        outside_code = re.sub(r"(`+).*?\1", "", line)
        assert "\x1b" not in line and not re.search(r"(?<!\\)<", outside_code), line
    assert text(HOSTILE).count("\\|") == HOSTILE.count("|")


def _cells(line: str) -> int:
    """How many table cells GitHub would split `line` into (unescaped pipes)."""
    return len(re.findall(r"(?<!\\)\|", line)) if line.startswith("|") else 0


def test_a_code_span_outfences_any_backtick_run() -> None:
    span = code("a ``` b")
    fence = re.match(r"`+", span).group(0)  # type: ignore[union-attr]
    assert len(fence) == 4 and span.endswith(fence) and "a ``` b" in span


@pytest.mark.parametrize("umask", [0o022, 0o077])
def test_report_files_follow_the_umask_and_the_json_round_trips(tmp_path: Path, umask: int) -> None:
    report = _report(tmp_path)
    report["groups"][0]["representative"] = str(tmp_path / "missing.json")  # no regression test can be emitted
    old = os.umask(umask)
    try:
        write_report(tmp_path, report)
    finally:
        os.umask(old)
    for name in ("report.json", "report.md"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o666 & ~umask
    assert json.loads((tmp_path / "report.json").read_text())["commit"] == HOSTILE


def test_the_replay_command_of_a_finding_is_shell_quoted() -> None:
    groups: dict[Any, Any] = {}
    add_finding(groups, "out/a; rm -rf ~.json", Trace(DEFAULT_POOL, None, [ADMIT], Failure(0, "k", "i", "m")))
    (group,) = groups.values()
    assert group.as_json()["replay"] == "python -m fuzz replay 'out/a; rm -rf ~.json'"


# -- flags, folders, environment variables --------------------------------------------------------------------

BAD_FLAGS = [
    ["run", "--seed", "-1"],
    ["run", "--seed", "99999999999999999999999"],
    ["run", "--seed", "1e3"],
    ["mutants", "--budget", "inf"],
    ["mutants", "--budget", "-5"],
    ["mutants", "--budget", "999999999"],
    ["verify-upstream", "--cases", "0"],
    ["verify-upstream", "--random", "²"],
    ["campaign", "--budget", "8d"],
    ["campaign", "--budget", "9999h"],
    ["campaign", "--budget", "1m", "--workers", "257"],
    ["campaign", "--budget", "1m", "--shard", "1/5000"],
    ["campaign", "--budget", "1m", "--seed", "-3"],
    ["campaign", "--budget", "1m", "--examples", "0"],
    ["campaign", "--budget", "1m", "--examples", "١٢"],
]


@pytest.mark.parametrize("argv", BAD_FLAGS, ids=[" ".join(a) for a in BAD_FLAGS])
def test_a_bad_flag_is_exit_2_with_one_line(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        fuzz_main(argv)
    assert info.value.code == 2
    assert len([line for line in capsys.readouterr().err.splitlines() if "error:" in line]) == 1


@pytest.mark.parametrize("command", [["run", "--profile", "ci"], ["emit", "x.json"], ["campaign", "--budget", "1s"]])
def test_an_output_folder_that_cannot_be_written_is_exit_2_before_any_work(
    tmp_path: Path, command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    assert fuzz_main([*command, "--out", str(blocker / "sub")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--out" in err[0] and "is not a folder" in err[0]
    assert fuzz_main([*command, "--out", str(blocker)]) == 2


def test_environment_variables_are_checked_with_one_line_naming_the_variable(tmp_path: Path) -> None:
    assert env_count("N", 20, 100, {}) == 20
    assert env_count("N", 20, 100, {"N": " 7 "}) == 7
    for bad in ("abc", "0", "101", "1e3", "-1", "9" * 5000):
        with pytest.raises(BadEnvironment, match=r"^N ") as info:
            env_count("N", 20, 100, {"N": bad})
        assert "\n" not in str(info.value)
    assert env_names("F", ["a", "b"], {"F": "a, b,"}) == ["a", "b"]
    with pytest.raises(BadEnvironment, match="F names 'c'"):
        env_names("F", ["a", "b"], {"F": "a,c"})
    (tmp_path / "file").write_text("")
    with pytest.raises(BadEnvironment, match="D must be a folder"):
        env_folder("D", tmp_path, {"D": str(tmp_path / "file")})
    assert env_folder("D", tmp_path, {"D": str(tmp_path / "new")}) == tmp_path / "new"
