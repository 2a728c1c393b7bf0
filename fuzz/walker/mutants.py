"""The mutant table with the walker as engine: every in-scope fault switch turned on alone, walked seed after
seed (0, 1, 2, ...: reproducible) on each pool its site fires in (`fuzz.mutants.pools_for`) until a seed finds
it or its budget is spent; each pool also walks with no fault for the same budget (what it finds there is a
false alarm). The report is `fuzz.mutants`' (same fields, same tables), with the walker's own figures in each
fault's `walker` entry: the seed that found it, the lockstep steps to the first failure, the unshrunk length.

Runs in this process: a walk is a function of its seed and needs no fresh interpreter to be reproducible, and
a crash of the pool is a `crash` failure of the lockstep, not of the scorer.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fuzz.fault_plans import fault_rate_key
from fuzz.mutants import DETECTED, TIMEOUT, Attempt, Score, pools_for, report_of, write_reports
from fuzz.profiles import POOLS
from fuzz.walker.hunt import HuntResult, hunt
from impl.faults import FAULTS, PATTERNS

DEFAULT_BUDGET_S = 60.0
UNIT_STEPS = 2_000  # one seed's walk: a fault the walker finds at all, it finds within a few hundred steps
MAX_STEPS = 12  # the largest counterexample after the walker's shrink the exam accepts
SHRINK_S = 20.0
MORE_SEEDS, MORE_S = 4, 10.0  # after the first failing seed: how many more seeds are tried, for how long at most


@dataclass
class Found:
    """What the walker's search on one pool found: the attempt, and the walker's own figures."""

    attempt: Attempt
    seed: int | None = None
    lockstep_steps: int = 0
    unshrunk_steps: int | None = None


def search(fault: str | None, pool: str, budget_s: float, out: Path) -> Found:
    """Walk seeds 0, 1, ... with `fault` on (None: no fault) on `pool` until one fails or `budget_s` is spent;
    then the next `MORE_SEEDS` seeds too (for at most `MORE_S` seconds), keeping the shortest shrunk trace:
    each seed's walk reaches the bug by its own path, and shrinking keeps the path's shape."""
    config = {
        **POOLS[pool],
        "faults": [fault] if fault else [],
        **fault_rate_key(PATTERNS[fault].fault_rate if fault else 0),
    }
    folder = out / "counterexamples" / (fault or "nofault") / pool
    for stale in folder.glob("*.json"):
        stale.unlink()
    start, seed, steps = time.perf_counter(), 0, 0
    best: Found | None = None
    while time.perf_counter() - start < budget_s:
        walked = time.perf_counter() - start
        result = hunt(config, seed, folder, steps=UNIT_STEPS, budget_s=budget_s - walked, shrink_s=SHRINK_S)
        seed += 1
        if best is None:
            steps += result.walk.steps
        if result.counterexample is None or result.shrunk is None:
            continue
        if best is None:
            best = _found(fault, pool, result, seed - 1, steps, walked + result.walk.seconds)
        elif len(result.shrunk.steps) < (best.attempt.steps or 0):
            Path(best.attempt.counterexample or "").unlink(missing_ok=True)
            best = _found(fault, pool, result, seed - 1, steps, best.attempt.first_failure_s or 0.0)
        else:
            result.counterexample.unlink(missing_ok=True)
        found_s = best.attempt.first_failure_s or 0.0
        if seed > (best.seed or 0) + MORE_SEEDS or time.perf_counter() - start > found_s + MORE_S:
            break
    if best is None:
        return Found(Attempt(fault, pool, TIMEOUT, time.perf_counter() - start), None, steps)
    best.attempt.wall_s = time.perf_counter() - start
    return best


def _found(fault: str | None, pool: str, result: HuntResult, seed: int, steps: int, first_s: float) -> Found:
    assert result.shrunk is not None and result.walk.trace is not None
    failure = result.shrunk.failure
    attempt = Attempt(fault, pool, DETECTED, 0.0, first_s, len(result.shrunk.steps), failure.kind, failure.id)
    attempt.counterexample, attempt.detail = str(result.counterexample), f"seed {seed}"
    return Found(attempt, seed, steps, len(result.walk.trace.steps))


def grade(faults: Sequence[str], budget_s: float, out: Path, say: Callable[[str], None]) -> dict[str, Any]:
    """Every fault in `faults`, then the no-fault walks of the pools they use; the report as JSON data."""
    scores: list[Score] = []
    extra: dict[str, dict[str, Any]] = {}
    for index, name in enumerate(faults, 1):
        fault = FAULTS[name]
        score, left = Score(name, fault.site, fault.origin), budget_s
        for pool in pools_for(name):
            found = search(name, pool, left, out)
            score.attempts.append(found.attempt)
            left -= found.attempt.wall_s
            if found.attempt.result == DETECTED or left <= 0:
                break
        scores.append(score)
        extra[name] = {"seed": found.seed, "lockstep_steps": found.lockstep_steps, "unshrunk": found.unshrunk_steps}
        say(f"[{index:>2}/{len(faults)}] {_line(name, found, score.seconds)}")
    baselines = []
    for pool in sorted({p for name in faults for p in pools_for(name)}):
        found = search(None, pool, budget_s, out)
        baselines.append(found.attempt)
        say(f"[  -  ] {_line('no fault', found, found.attempt.first_failure_s)}")
    report = report_of(scores, baselines, budget_s)
    report["profile"] = "walker"
    report["summary"]["max_steps_allowed"] = MAX_STEPS
    report["summary"]["passed"] = report["summary"]["passed"] and (report["summary"]["max_steps"] or 0) <= MAX_STEPS
    for entry in report["faults"]:
        entry["walker"] = extra[entry["name"]]
    return report


def _line(label: str, found: Found, seconds: float | None) -> str:
    a = found.attempt
    result = a.result if a.fault is not None or a.result == DETECTED else "clean (budget ran out)"
    first = "" if seconds is None else f", first failure {seconds:.2f} s after {found.lockstep_steps} steps"
    shape = "" if a.steps is None else f", {found.unshrunk_steps} -> {a.steps} steps, {a.failure_kind} {a.failure_id}"
    seed = "" if found.seed is None else f" (seed {found.seed})"
    return f"{label:<31} {a.pool:<9} {result}{first}{shape}{seed} [{a.wall_s:.0f} s]"


def cli(faults: Sequence[str], budget_s: float, out: Path) -> int:
    """`python -m fuzz.walker mutants`: grade, one line per fault as it finishes, then the reports."""
    print(f"fuzz.walker mutants: {len(faults)} faults, budget {budget_s:.0f} s each", flush=True)
    report = grade(faults, budget_s, out, lambda line: print(line, flush=True))
    as_json, as_md = write_reports(report, out)
    s = report["summary"]
    print(
        f"fuzz.walker mutants: {s['detected']} of {s['in_scope']} detected, {s['false_alarms']} false alarms; "
        f"median first failure {_seconds(s['median_first_failure_s'])}, largest counterexample "
        f"{s['max_steps']} steps (at most {MAX_STEPS} allowed)"
    )
    print(f"  written to {as_md} and {as_json}")
    return 0 if s["passed"] else 1


def _seconds(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f} s"
