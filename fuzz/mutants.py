"""`python -m fuzz mutants`: grade the harness on the fault switches, the bugs we already shipped.

Each in-scope fault is turned on alone in a fresh `python -m fuzz run --profile ci` subprocess (derandomized,
so a run is reproducible), on each pool its site fires in until one run finds it, under one time budget per
fault; a run still going at the budget is killed. For every fault the scorer records whether a counterexample
was written, how soon the first failing step came (fuzzing time, imports excluded: the line `fuzz run` prints
then), how many steps the shrunk counterexample has and which failure it shows. Each pool also runs with no fault
for the same budget: a counterexample, a failure not shrunk within the budget or a crash there is a false alarm
(`ALARMS`). Results go to `mutants.json` and `mutants.md`. `--target sglang` runs only the no-fault runs, on the
upstream target (`false_alarm_cli`), where a known finding of `upstream/findings.json` is no alarm.

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
from typing import TYPE_CHECKING, Any

from impl.faults import FAULTS, PATTERNS
from model.exits import EXIT_CLEAN, EXIT_FOUND, EXIT_INVALID
from model.trace import TraceError, load

if TYPE_CHECKING:
    from fuzz.upstream_findings import Finding

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
DETECTED = "detected"
# A run that saw a failing step but was killed at the budget before its counterexample was shrunk and written.
UNSHRUNK = "found, not shrunk within budget"
CRASH = "crashed, no counterexample"
MISSED = "missed"
TIMEOUT = "nothing within budget"
CLEAN = {MISSED: "clean (profile ran out)", TIMEOUT: "clean (budget ran out)"}
ALARMS = (DETECTED, UNSHRUNK, CRASH)  # how a run with no fault must not end
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
    rate = PATTERNS[fault].fault_rate if fault else 0
    argv += ["--fault-rate", str(rate)] if rate else []
    start = time.perf_counter()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "fuzz", *argv], capture_output=True, text=True, timeout=budget_s, check=False
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
    from fuzz.run import FIRST_FAILURE  # here, not at the top: it loads torch and Hypothesis, which flags need not

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
    alarms = [b for b in baselines if b.result in ALARMS]
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


def false_alarm_cli(budget_s: float, out: Path) -> int:
    """`python -m fuzz mutants --target sglang`: the no-fault runs only, on each pool shape `fuzz run --target sglang`
    can build here (its default tree core). A run that ends as the scorer counts a false alarm (`ALARMS`) is one,
    unless it wrote a counterexample that is a known finding of `upstream/findings.json`; a failure not shrunk within
    the budget has no file to match, so it is an alarm too. Exit 1 on any alarm."""
    from fuzz.targets import installed_sglang
    from fuzz.upstream_findings import ROOT, FindingsError, load_findings

    version = installed_sglang()
    if version is None:
        print(
            "fuzz mutants: --target sglang needs upstream sglang; run it with .venv-sglang-VERSION/bin/python "
            "(make sglang-setup)",
            file=sys.stderr,
        )
        return EXIT_INVALID
    try:
        findings = load_findings(ROOT / "upstream" / "findings.json")
    except FindingsError as exc:
        print(f"fuzz mutants: {exc}", file=sys.stderr)
        return EXIT_INVALID
    alarms = 0
    pools = upstream_run_pools()
    for pool in pools:
        attempt = run_attempt(None, pool, budget_s, out / f"sglang-{version}", target="sglang")
        seen, alarm = _upstream_verdict(attempt, findings, version)
        alarms += alarm
        print(f"fuzz mutants: sglang {version}, no fault, {pool}: {seen} ({attempt.wall_s:.0f} s)", flush=True)
    print(f"fuzz mutants: sglang {version}: {alarms} false alarms in {len(pools)} no-fault runs")
    return EXIT_FOUND if alarms else EXIT_CLEAN


def upstream_run_pools() -> list[str]:
    """The pool shapes `fuzz run --target sglang --pool NAME` can build here."""
    from fuzz.profiles import POOLS
    from fuzz.targets import retarget, target_problem

    return [
        name for name, shape in POOLS.items() if target_problem(retarget({**shape, "faults": []}, "sglang")) is None
    ]


def _upstream_verdict(attempt: Attempt, findings: list[Finding], version: str) -> tuple[str, bool]:
    """What a no-fault upstream run showed, and whether it is a false alarm."""
    from fuzz.upstream_findings import known

    if attempt.result not in ALARMS:
        return CLEAN.get(attempt.result, attempt.result), False
    if attempt.result == DETECTED and attempt.counterexample:
        hit = known(findings, load(Path(attempt.counterexample)).failure, version)
        if hit is not None:
            return f"known {hit.id}", False
    what = f"{attempt.failure_kind} {attempt.failure_id}" if attempt.failure_kind else attempt.result
    detail = f" ({attempt.detail})" if attempt.detail else ""
    return f"false alarm: {what}{detail}", True
