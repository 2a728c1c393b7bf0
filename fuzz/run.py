"""`python -m fuzz run`: one lockstep fuzzing run; a failure becomes a shrunk, replayable counterexample file."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import hypothesis
from hypothesis.stateful import get_state_machine_test

from fuzz.lockstep import StepFailed
from fuzz.machine import Recorder, build_machine
from fuzz.profiles import Profile
from fuzz.replay import replay
from fuzz.targets import installed_sglang
from model.trace import Failure, Step, Trace, dump

# The line `fuzz run` prints the moment its first failing step happens, before the shrink (the mutant scorer reads it).
FIRST_FAILURE = "fuzz run: first failing step after"


@dataclass
class RunResult:
    """How a run ended: the counterexample path (None when nothing was found) and what it cost."""

    counterexample: Path | None
    failure_text: str
    steps: int
    cases: int
    seconds: float
    ops: dict[str, int]
    corners: dict[str, int]


def run(
    config: dict[str, Any],
    profile: Profile,
    seed: int | None,
    out_dir: Path,
    db_dir: Path,
    swarm: str = "all",
    exclude: frozenset[str] = frozenset(),
    on_first_failure: Callable[[float, Failure], None] | None = None,
) -> RunResult:
    """Fuzz the target described by `config` under `profile` (with the rule group `swarm`, never drawing the
    ops in `exclude`); write the shrunk counterexample if one is found. `on_first_failure` hears the seconds of
    fuzzing to the first failing step, and its failure, the moment it happens (before the shrink)."""
    first: list[Failure] = []

    def noted(_: Any, failure: Failure) -> None:
        if not first and on_first_failure is not None:
            first.append(failure)
            on_first_failure(time.perf_counter() - start, failure)

    recorder = Recorder(config, swarm, exclude=exclude, on_failure=noted)
    test = get_state_machine_test(build_machine(recorder), settings=profile.hypothesis_settings(db_dir))
    if seed is not None:
        test = hypothesis.seed(seed)(test)
    start = time.perf_counter()
    try:
        test()
    except StepFailed as exc:
        path, written = _write_counterexample(recorder, exc, profile, seed, out_dir)
        return RunResult(
            path,
            str(StepFailed(written)),  # the written trace's failure: the step deletion may have moved it
            recorder.total_steps,
            recorder.cases,
            time.perf_counter() - start,
            recorder.ops,
            recorder.corners,
        )
    return RunResult(
        None, "", recorder.total_steps, recorder.cases, time.perf_counter() - start, recorder.ops, recorder.corners
    )


def _write_counterexample(
    recorder: Recorder, exc: StepFailed, profile: Profile, seed: int | None, out_dir: Path
) -> tuple[Path, Failure]:
    # Hypothesis replays the shrunk case last before raising, so the recorder's last run is the minimal one.
    assert recorder.last is not None
    steps, failure = recorder.last.steps[: exc.failure.step + 1], exc.failure
    if profile.shrink:  # a profile without shrinking reports the failure as first found, its steps untouched
        steps, failure = delete_steps(recorder.config, steps, failure)
    meta: dict[str, Any] = {
        "source": "hypothesis",
        "profile": profile.name,
        "swarm": recorder.swarm,
        "commit": git_commit(),
        "hypothesis": hypothesis.__version__,
    }
    if recorder.config.get("target") == "sglang":
        meta["sglang"] = installed_sglang()
    if recorder.exclude:
        meta["excluded_ops"] = sorted(recorder.exclude)
    trace = Trace(recorder.config, seed, steps, failure, meta)
    digest = hashlib.sha256(json.dumps(trace.to_json()["steps"]).encode()).hexdigest()[:10]
    faults = "+".join(sorted(recorder.config.get("faults", []))) or "nofault"
    name = re.sub(r"[^A-Za-z0-9_.+-]+", "_", f"{faults}-{exc.failure.id}-{digest}")  # safe to paste into a shell
    path = out_dir / f"{name}.json"
    dump(trace, path)
    return path, failure


def first_failure_line(seconds: float, failure: Failure) -> str:
    """What `fuzz run` prints at its first failing step."""
    return f"{FIRST_FAILURE} {seconds:.3f} s of fuzzing: {failure.kind} {failure.id} (shrinking it)"


def delete_steps(config: dict[str, Any], steps: list[Step], failure: Failure) -> tuple[list[Step], Failure]:
    """After Hypothesis's shrink, drop each step whose removal still fails the same way (kind and id), replaying
    without Hypothesis; the shrinker often keeps steps that change nothing (no-op observations, extra decodes)."""
    index = len(steps) - 2  # the failing step stays
    while index >= 0:
        found = replay(Trace(config, None, steps[:index] + steps[index + 1 :]))
        if found.failure is not None and (found.failure.kind, found.failure.id) == (failure.kind, failure.id):
            steps, failure = found.steps, found.failure
        index = min(index, len(steps) - 1) - 1
    return steps, failure


def git_commit() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            cwd=Path(__file__).parent,
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.stdout.strip() or "unknown"
