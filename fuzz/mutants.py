"""`python -m fuzz mutants`: grade the harness on the fault switches, the bugs we already shipped.

Each in-scope fault is turned on alone in a fresh `python -m fuzz run --profile ci` subprocess (derandomized,
so a run is reproducible), on each pool its site fires in until one run finds it, under one time budget per
fault; a run still going at the budget is killed. For every fault the scorer records whether a counterexample
was written, how soon the first failing step came (fuzzing time, imports excluded), how many steps the shrunk
counterexample has and which failure it shows. Each pool also runs with no fault for the same budget: anything
found there is a false alarm. Results go to `mutants.json` and `mutants.md`.

Exit status: 0 every in-scope fault was found and nothing was found without one; 1 otherwise; 2 bad usage.
"""

from __future__ import annotations

import json
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from impl.faults import FAULTS, PATTERNS
from model.trace import TraceError, load

PROFILE = "ci"
DEFAULT_BUDGET_S = 120.0
DEFAULT_OUT = Path("reports")
BOTH_POOLS = ("chunk-p1", "radix-p4")  # the page-size-1 chunk pool steps about five times faster: tried first
# Faults whose site fires in one pool only: a chunk-cache path, or a tree, page or speculation path.
SITE_POOLS: dict[str, tuple[str, ...]] = {
    "chunk_cache_skip_stash": ("chunk-p1",),
    "double_free_within_group": ("chunk-p1",),
    **{
        name: ("radix-p4",)
        for name in (
            "unaligned_spec_alloc_len",
            "skip_overalloc_free_on_finish",
            "double_lock_on_chunk_retry",
            "chunk_rematch_lock_leak",
            "overalloc_free_unaligned_start",
            "radix_counter_double_add",
            "stale_last_node_after_reset",
            "release_order_row_first",
            "lock_walk_off_by_one",
        )
    },
}
FIRST_FAILURE = "mutants: first failure after"
DETECTED = "detected"
# A run that saw a failing step but was killed at the budget before its counterexample was shrunk and written.
UNSHRUNK = "found, not shrunk within budget"
CRASH = "crashed, no counterexample"
MISSED = "missed"
TIMEOUT = "nothing within budget"
CLEAN = {MISSED: "clean (profile ran out)", TIMEOUT: "clean (budget ran out)"}
# What a good harness does on the found faults: the median and the slowest first failure, the largest trace.
TARGET_MEDIAN_S, TARGET_MAX_S, TARGET_STEPS = 5.0, 60.0, 12
# The last line of a Python traceback: the exception's type and message.
_EXCEPTION_LINE = re.compile(r"^[\w.]*(Error|Exception|Interrupt)\b")


@dataclass
class Attempt:
    """One subprocess run: a fault (None for the no-fault baseline) on one pool."""

    fault: str | None
    pool: str
    result: str
    wall_s: float
    first_failure_s: float | None = None
    steps: int | None = None
    failure_kind: str | None = None
    failure_id: str | None = None
    counterexample: str | None = None
    detail: str = ""


@dataclass
class Score:
    """A fault's grade: its last attempt decides; `seconds` counts the earlier pools' runs too."""

    name: str
    site: str
    origin: str
    attempts: list[Attempt] = field(default_factory=list)

    @property
    def final(self) -> Attempt:
        return self.attempts[-1]

    @property
    def detected(self) -> bool:
        return self.final.result == DETECTED

    @property
    def seconds(self) -> float | None:
        if self.final.first_failure_s is None:
            return None
        return sum(a.wall_s for a in self.attempts[:-1]) + self.final.first_failure_s


def pools_for(fault: str) -> tuple[str, ...]:
    """The pools `fault`'s site fires in, fastest first."""
    return SITE_POOLS.get(fault, BOTH_POOLS)


def score_all(faults: Sequence[str], budget_s: float, out: Path, say: Callable[[str], None]) -> dict[str, Any]:
    """Run every fault in `faults` and the no-fault baseline of each pool they use; the report as JSON data."""
    scores = []
    for index, name in enumerate(faults, 1):
        score = score_fault(name, budget_s, out)
        scores.append(score)
        say(f"[{index:>2}/{len(faults)}] {_progress(name, score.final, score.seconds)}")
    baselines = []
    for pool in sorted({p for name in faults for p in pools_for(name)}):
        attempt = run_attempt(None, pool, budget_s, out)
        baselines.append(attempt)
        say(f"[  -  ] {_progress('no fault', attempt, attempt.first_failure_s)}")
    return report_of(scores, baselines, budget_s)


def score_fault(name: str, budget_s: float, out: Path) -> Score:
    """Try `name` on its pools in order until a run writes a counterexample or the budget is spent."""
    fault = FAULTS[name]
    score = Score(name, fault.site, fault.origin)
    left = budget_s
    for pool in pools_for(name):
        attempt = run_attempt(name, pool, left, out)
        score.attempts.append(attempt)
        left -= attempt.wall_s
        if attempt.result == DETECTED or left <= 0:
            break
    return score


def run_attempt(fault: str | None, pool: str, budget_s: float, out: Path, target: str = "reference") -> Attempt:
    """One fresh `fuzz run` subprocess with `fault` on, on `target`, killed at `budget_s`; what it found."""
    ce_dir = out / "counterexamples" / (fault or "nofault") / pool
    ce_dir.mkdir(parents=True, exist_ok=True)
    for stale in ce_dir.glob("*.json"):
        stale.unlink()
    argv = ["run", "--profile", PROFILE, "--pool", pool, "--out", str(ce_dir), "--target", target]
    argv += ["--fault", fault] if fault else []
    start = time.perf_counter()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "fuzz.mutants", *argv], capture_output=True, text=True, timeout=budget_s, check=False
        )
        stdout, stderr, code = done.stdout, done.stderr, done.returncode
    except subprocess.TimeoutExpired as exc:  # run() has killed the child by then
        stdout, stderr, code = _text(exc.stdout), _text(exc.stderr), None
    attempt = Attempt(fault, pool, TIMEOUT, time.perf_counter() - start, _first_failure(stdout))
    _judge(attempt, ce_dir, code, stderr)
    return attempt


def _judge(attempt: Attempt, ce_dir: Path, code: int | None, stderr: str) -> None:
    """Fill in the result from the counterexample written (if any) and how the subprocess ended."""
    files = sorted(ce_dir.glob("*.json"))
    if files:
        try:
            trace = load(files[0])
        except TraceError as exc:
            attempt.result, attempt.detail = CRASH, f"unreadable counterexample: {exc}"
            return
        attempt.result, attempt.steps, attempt.counterexample = DETECTED, len(trace.steps), str(files[0])
        if trace.failure is not None:
            attempt.failure_kind, attempt.failure_id = trace.failure.kind, trace.failure.id
    elif code is None:
        attempt.result = UNSHRUNK if attempt.first_failure_s is not None else TIMEOUT
    elif code == 0:
        attempt.result = MISSED
    else:
        raised = [line for line in stderr.splitlines() if _EXCEPTION_LINE.match(line)]
        attempt.result, attempt.detail = CRASH, raised[-1] if raised else f"exit status {code}"


def _text(output: str | bytes | None) -> str:
    if isinstance(output, bytes):
        return output.decode(errors="replace")
    return output or ""


def _first_failure(stdout: str) -> float | None:
    for line in stdout.splitlines():
        if line.startswith(FIRST_FAILURE):
            return float(line[len(FIRST_FAILURE) :].split()[0])
    return None


def _progress(label: str, attempt: Attempt, seconds: float | None) -> str:
    result = CLEAN.get(attempt.result, attempt.result) if attempt.fault is None else attempt.result
    found = "" if seconds is None else f", first failure {seconds:.1f} s"
    shape = "" if attempt.steps is None else f", {attempt.steps} steps, {attempt.failure_kind} {attempt.failure_id}"
    detail = f" ({attempt.detail})" if attempt.detail else ""
    return f"{label:<31} {attempt.pool:<9} {result}{found}{shape}{detail} [{attempt.wall_s:.0f} s]"


def report_of(scores: list[Score], baselines: list[Attempt], budget_s: float) -> dict[str, Any]:
    """The report as JSON data: a summary, one entry per fault, the no-fault runs and the out-of-scope patterns."""
    found = [s for s in scores if s.detected]
    seconds = [s.seconds for s in found if s.seconds is not None]
    steps = [s.final.steps for s in found if s.final.steps is not None]
    alarms = [b for b in baselines if b.result in (DETECTED, UNSHRUNK, CRASH)]
    summary = {
        "in_scope": len(scores),
        "detected": len(found),
        "median_first_failure_s": statistics.median(seconds) if seconds else None,
        "max_first_failure_s": max(seconds, default=None),
        "max_steps": max(steps, default=None),
        "false_alarms": len(alarms),
        "passed": len(found) == len(scores) and not alarms,
    }
    summary["targets_met"] = bool(seconds) and (
        statistics.median(seconds) <= TARGET_MEDIAN_S and max(seconds) <= TARGET_MAX_S and max(steps) <= TARGET_STEPS
    )
    faults = [
        {
            "name": s.name,
            "site": s.site,
            "origin": s.origin,
            "detected": s.detected,
            "seconds": s.seconds,
            "pools_tried": [a.pool for a in s.attempts],
            **{k: v for k, v in asdict(s.final).items() if k != "fault"},
            "attempts": [asdict(a) for a in s.attempts],
        }
        for s in scores
    ]
    out_of_scope = [
        {"name": f.name, "origin": f.origin, "reason": f.out_of_scope} for f in PATTERNS.values() if not f.in_scope
    ]
    return {
        "profile": PROFILE,
        "budget_s": budget_s,
        "summary": summary,
        "faults": faults,
        "baselines": [asdict(b) for b in baselines],
        "out_of_scope": out_of_scope,
    }


def write_reports(report: dict[str, Any], out: Path) -> tuple[Path, Path]:
    """`mutants.json` (everything) and `mutants.md` (the tables) under `out`."""
    out.mkdir(parents=True, exist_ok=True)
    as_json, as_md = out / "mutants.json", out / "mutants.md"
    as_json.write_text(json.dumps(report, indent=1) + "\n")
    as_md.write_text(markdown(report))
    return as_json, as_md


def markdown(report: dict[str, Any]) -> str:
    """The mutant table, the no-fault baselines and the out-of-scope patterns, as Markdown."""
    s = report["summary"]
    lines = [
        "# Mutant table",
        "",
        f"Profile `{report['profile']}` (derandomized), budget {report['budget_s']:.0f} s per fault. "
        "Seconds are fuzzing time to the first failing step (imports excluded; earlier pools' runs included).",
        "",
        "| fault | pool | result | first failure (s) | steps | failure | counterexample |",
        "|---|---|---|---:|---:|---|---|",
    ]
    for f in report["faults"]:
        failure = f"{f['failure_kind']} `{f['failure_id']}`" if f["failure_kind"] else f["detail"]
        lines.append(
            f"| `{f['name']}` | {', '.join(f['pools_tried'])} | {f['result']} | {_num(f['seconds'])} "
            f"| {_num(f['steps'])} | {failure} | {f['counterexample'] or ''} |"
        )
    lines += [
        "",
        f"Detected {s['detected']} of {s['in_scope']} in-scope faults; median first failure "
        f"{_num(s['median_first_failure_s'])} s, slowest {_num(s['max_first_failure_s'])} s; largest "
        f"counterexample {_num(s['max_steps'])} steps; false alarms {s['false_alarms']}. Targets (median "
        f"≤ {TARGET_MEDIAN_S:.0f} s, none above {TARGET_MAX_S:.0f} s, at most {TARGET_STEPS} steps) "
        f"{'met' if s['targets_met'] else 'not met'}.",
        "",
        "## No-fault baselines",
        "",
        "| pool | result | seconds | failure |",
        "|---|---|---:|---|",
    ]
    for b in report["baselines"]:
        failure = f"{b['failure_kind']} `{b['failure_id']}` ({b['counterexample']})" if b["failure_kind"] else ""
        verdict = CLEAN.get(b["result"], f"FALSE ALARM: {b['result']}")
        lines.append(f"| {b['pool']} | {verdict} | {b['wall_s']:.0f} | {failure or b['detail']} |")
    lines += ["", "## Out of scope", "", "| pattern | origin | why there is no switch |", "|---|---|---|"]
    lines += [f"| `{p['name']}` | {p['origin']} | {p['reason']} |" for p in report["out_of_scope"]]
    return "\n".join(lines) + "\n"


def _num(value: float | None) -> str:
    if value is None:
        return "–"
    return f"{value:.1f}" if isinstance(value, float) else str(value)


def cli(faults: Sequence[str], budget_s: float, out: Path) -> int:
    """`python -m fuzz mutants`: score, print one line per fault as it finishes, write the reports."""
    print(f"fuzz mutants: {len(faults)} faults, profile {PROFILE}, budget {budget_s:.0f} s each", flush=True)
    report = score_all(faults, budget_s, out, lambda line: print(line, flush=True))
    as_json, as_md = write_reports(report, out)
    s = report["summary"]
    print(
        f"fuzz mutants: {s['detected']} of {s['in_scope']} detected, {s['false_alarms']} false alarms; "
        f"median first failure {_num(s['median_first_failure_s'])} s, largest counterexample "
        f"{_num(s['max_steps'])} steps"
    )
    print(f"  written to {as_md} and {as_json}")
    return 0 if s["passed"] else 1


def timed_run(argv: list[str]) -> int:
    """The subprocess side: `python -m fuzz ARGV`, printing how long fuzzing took to its first failing step."""
    # Imported here: `fuzz.__main__` imports this module for its `mutants` command.
    from fuzz.__main__ import main as fuzz_main
    from fuzz.lockstep import Lockstep

    start = time.perf_counter()
    step = Lockstep.step
    seen: list[bool] = []

    def note(what: str) -> None:
        if not seen:
            seen.append(True)
            print(f"{FIRST_FAILURE} {time.perf_counter() - start:.3f} s: {what}", flush=True)

    def timed_step(self: Lockstep, *args: Any, **kwargs: Any) -> Any:
        try:
            failure = step(self, *args, **kwargs)
        except Exception as exc:  # the pool crashed: the run will end in a traceback, not a counterexample
            note(f"crash {type(exc).__name__}")
            raise
        if failure is not None:
            note(f"{failure.kind} {failure.id}")
        return failure

    Lockstep.step = timed_step  # type: ignore[method-assign]
    return fuzz_main(argv)


if __name__ == "__main__":
    sys.exit(timed_run(sys.argv[1:]))
