"""The upstream exam: each mutant of `fuzz.upstream_catalog` (a bug of a shape SGLang shipped, one edit of
upstream's own source) planted in a copy of the installed sglang and hunted on upstream's classes by the seeded
walker or by the Hypothesis state machine (`--engine`).

`python -m fuzz.upstream_mutants [--only NAME]... [--budget DURATION] [--engine walker|hypothesis]`, with a sglang
venv's python (`make mutants-sglang`). The package is copied once into a temporary folder; each mutant edits its one
file there, a child process imports that copy ahead of the installed one (`PYTHONPATH`) and runs seed after seed
from 0 on the mutant's pool (a walk, or a Hypothesis run of `HYPOTHESIS_EXAMPLES` cases without shrinking) until a
step fails or the budget is spent (leaving out the ops of the release's known findings, as
`verify-upstream` does once it meets one), and the file is put back. The installed sglang is never
written. A mutant whose original text is not in this release's file exactly once does not apply to it: reported so,
never as found. A child that crashes is kvlife's failure (exit 70), not a finding.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fuzz.fault_plans import fault_rate_key
from fuzz.profiles import POOLS
from fuzz.upstream_catalog import MUTANTS, SourceMutant
from fuzz.walker.cli import duration
from model.exits import EXIT_CLEAN, EXIT_FOUND, EXIT_INTERNAL, EXIT_INVALID, internal_error

if TYPE_CHECKING:
    from fuzz.upstream_findings import Finding

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_BUDGET_S = 60.0
WALK_STEPS = 1_500  # one seed's walk
ENGINES = ("walker", "hypothesis")
HYPOTHESIS_EXAMPLES = 25  # one seed's Hypothesis run, of `HYPOTHESIS_STEPS` steps a case at most
HYPOTHESIS_STEPS = 60
FAULTS_SUFFIX = "+faults"  # a mutant's pool spec ending in it hunts with fault plans (a failure path's mutant)
FAULT_RATE = 10  # the percentage of steps such a hunt plans a failure in
CHILD_GRACE_S = 120.0  # a child's start-up (it imports sglang) and its last walk, beyond the budget
CONTROL_S = 20.0  # each pool's walk on the unmodified release, at most
UNMODIFIED = "(unmodified)"  # the control walks' name in the report
CONTROL_VERDICTS = {"found": "false alarm", "missed": "clean"}  # a control walk's verdicts


@dataclass(frozen=True)
class Outcome:
    """A mutant's verdict: `found`, `missed`, `n/a` (not in this release) or `error` (the hunt crashed kvlife); a
    control walk's: `clean`, `false alarm` or `error`."""

    mutant: SourceMutant
    verdict: str
    detail: str
    seconds: float = 0.0


def sglang_package() -> Path | None:
    """The installed sglang package's folder (found without importing it), or None."""
    spec = importlib.util.find_spec("sglang")
    if spec is None or spec.origin is None:
        return None
    return Path(spec.origin).parent


def installed_version() -> str:
    """The installed sglang's version, from its metadata."""
    return importlib.metadata.version("sglang")


def applies(mutant: SourceMutant, package: Path) -> str | None:
    """Why `mutant` does not apply to the sglang in `package` (one line), or None."""
    target = package / mutant.path
    if not target.is_file():
        return f"no {mutant.path} in this release"
    found = target.read_text(encoding="utf-8").count(mutant.original)
    return None if found == 1 else f"its original text occurs {found} times in {mutant.path}, not once"


def hunt(mutant: SourceMutant, copy: Path, budget_s: float, engine: str = "walker") -> Outcome:
    """Plant `mutant` in `copy` (a copy of the sglang package), hunt it in a child, put the file back."""
    target = copy / mutant.path
    original = target.read_text(encoding="utf-8")
    target.write_text(original.replace(mutant.original, mutant.mutated), encoding="utf-8")
    try:
        return _judge(mutant, _walk_child(copy.parent, mutant.pool, budget_s, engine))
    finally:
        target.write_text(original, encoding="utf-8")


def _walk_child(overlay: Path, pool: str, budget_s: float, engine: str = "walker") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(overlay), str(ROOT)]), "OMP_NUM_THREADS": "1"}
    argv = [sys.executable, "-W", "ignore", "-m", "fuzz.upstream_mutants", "--walk", pool, "--budget", f"{budget_s}s"]
    argv += ["--engine", engine]
    try:
        return subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=budget_s + CHILD_GRACE_S)
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(argv, -9, "", f"the hunt ran past {budget_s + CHILD_GRACE_S:.0f} s")


def _judge(mutant: SourceMutant, child: subprocess.CompletedProcess[str]) -> Outcome:
    """The child's verdict: its last stdout line, a JSON object, when it exited 0 or 1; anything else an error."""
    lines = child.stdout.strip().splitlines()
    try:
        answer = json.loads(lines[-1]) if child.returncode in (EXIT_CLEAN, EXIT_FOUND) and lines else None
    except json.JSONDecodeError:
        answer = None
    if not isinstance(answer, dict):
        tail = (child.stderr.strip().splitlines() or ["no output"])[-1]
        return Outcome(mutant, "error", f"the hunt exited {child.returncode}: {tail[:200]}")
    verdict = "found" if child.returncode == EXIT_FOUND else "missed"
    return Outcome(mutant, verdict, str(answer.get("detail", ""))[:300], float(answer.get("seconds", 0.0)))


def walk(pool_spec: str, budget_s: float, engine: str = "walker") -> int:
    """The child: run `engine` seed after seed from 0 on the pool (`POOL`, `POOL:CORE`, either with `+faults`: fault
    plans in `FAULT_RATE` percent of the steps) on the sglang it imports;
    print one JSON line; exit 1 at the first failing step, else 0."""
    from fuzz.flags import one_torch_thread
    from fuzz.targets import retarget
    from fuzz.upstream_findings import fuzz_excluded, load_findings

    one_torch_thread()
    spec, plans, _ = pool_spec.partition(FAULTS_SUFFIX)
    pool, _, core = spec.partition(":")
    config = retarget({**POOLS[pool], "faults": [], **fault_rate_key(FAULT_RATE if plans else 0)}, "sglang")
    if core:
        config["tree_core"] = core
    # A mutant is found by what it breaks, not by a bug the release already has: the ops of the release's findings
    # are left out, and a failure one of them explains (a fault plan's, whose points stay drawn) is no find.
    findings = load_findings(ROOT / "upstream" / "findings.json")
    exclude = frozenset(n for n in fuzz_excluded(findings, installed_version()) if not n.startswith("fault:"))
    one_seed = _walker_seed if engine == "walker" else _hypothesis_seed
    start, seed, steps = time.perf_counter(), 0, 0
    while (left := budget_s - (time.perf_counter() - start)) > 0:
        taken, found = one_seed(config, exclude, seed, left, findings)
        steps += taken
        if found is not None:
            print(json.dumps({"detail": f"seed {seed}, {found}", "seconds": time.perf_counter() - start}))
            return EXIT_FOUND
        seed += 1
    print(json.dumps({"detail": f"{steps} steps, {seed} seeds", "seconds": time.perf_counter() - start}))
    return EXIT_CLEAN


def _walker_seed(
    config: dict[str, Any], exclude: frozenset[str], seed: int, left: float, findings: list[Finding]
) -> tuple[int, str | None]:
    """One seed's walk: its steps and, if a step failed that no finding of the release explains, what failed."""
    from fuzz.upstream_findings import known
    from fuzz.walker.walk import Walker

    result = Walker(config, seed, exclude).run(steps=WALK_STEPS, budget_s=left)
    failure = result.failure
    if failure is None or known(findings, failure, installed_version(), result.trace) is not None:
        return result.steps, None
    return result.steps, f"step {failure.step}: {failure.kind} {failure.id}: {failure.message}"


def _hypothesis_seed(
    config: dict[str, Any], exclude: frozenset[str], seed: int, left: float, findings: list[Finding]
) -> tuple[int, str | None]:
    """One seed's Hypothesis run (not shrunk: a mutant is found by its first failing step): its steps and, if a
    step failed, what failed. `left` is not read: one run is short, and the loop checks the budget between runs."""
    from fuzz.profiles import Profile
    from fuzz.run import run
    from fuzz.upstream_findings import known
    from model.trace import load

    profile = Profile("exam", HYPOTHESIS_EXAMPLES, HYPOTHESIS_STEPS, False, False, shrink=False, climb=False)
    with tempfile.TemporaryDirectory(prefix="kvlife-exam-") as tmp:
        result = run(config, profile, seed, Path(tmp) / "ce", Path(tmp) / "db", exclude=exclude)
        if result.counterexample is None:
            return result.steps, None
        trace = load(result.counterexample)
    if known(findings, trace.failure, installed_version(), trace) is not None:
        return result.steps, None
    return result.steps, result.failure_text or None


def run_exam(
    names: list[str], budget_s: float, say: Callable[[str], None] = print, engine: str = "walker"
) -> list[Outcome]:
    """Every named mutant (all where `names` is empty) on the installed sglang, one line each as it ends, after a
    control walk of each pool they use on the unmodified copy (what a hunt finds must be its mutant's)."""
    package = sglang_package()
    assert package is not None
    chosen = [m for m in MUTANTS if not names or m.name in names]
    outcomes = []
    with tempfile.TemporaryDirectory(prefix="kvlife-upstream-mutants-") as tmp:
        copy = Path(tmp) / "sglang"
        shutil.copytree(package, copy, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
        problems = {m.name: applies(m, copy) for m in chosen}
        for pool in sorted({m.pool for m in chosen if problems[m.name] is None}):
            unmodified = SourceMutant(UNMODIFIED, "", "", "", pool, "the release as it ships")
            outcome = _judge(unmodified, _walk_child(copy.parent, pool, min(budget_s, CONTROL_S), engine))
            outcome = replace(outcome, verdict=CONTROL_VERDICTS.get(outcome.verdict, outcome.verdict))
            outcomes.append(outcome)
            say(_line(outcome))
        for mutant in chosen:
            problem = problems[mutant.name]
            outcome = Outcome(mutant, "n/a", problem) if problem else hunt(mutant, copy, budget_s, engine)
            outcomes.append(outcome)
            say(_line(outcome))
    return outcomes


def _line(o: Outcome) -> str:
    when = f" in {o.seconds:.1f} s" if o.verdict in ("found", "missed", "clean", "false alarm") else ""
    return f"  {o.mutant.name:<34} {o.mutant.pool:<16} {o.verdict}{when}: {o.detail}"


def summary(outcomes: list[Outcome], version: str) -> tuple[str, int]:
    """The closing line and the exit status: 70 where a hunt crashed; 1 where a mutant was missed, the unmodified
    release failed a control walk, or no mutant applied; else 0."""
    mutants = [o for o in outcomes if o.mutant.name != UNMODIFIED]
    count = {v: sum(o.verdict == v for o in mutants) for v in ("found", "missed", "n/a", "error")}
    alarms = sum(o.verdict == "false alarm" for o in outcomes)
    errors = sum(o.verdict == "error" for o in outcomes)  # a mutant's hunt or a control walk
    applied = count["found"] + count["missed"] + count["error"]
    line = (
        f"upstream mutants on sglang {version}: {count['found']} of {applied} found, {count['missed']} missed, "
        f"{count['n/a']} not in this release; {alarms} false alarms; {errors} hunts crashed"
    )
    if errors:
        return line, EXIT_INTERNAL
    return line, EXIT_CLEAN if applied and not count["missed"] and not alarms else EXIT_FOUND


def main(argv: list[str] | None = None) -> int:
    """Parse the flags (argparse exits 2 on bad ones) and run the exam, or a child's walk (`--walk`)."""
    args = _parser().parse_args(sys.argv[1:] if argv is None else argv)
    command = "fuzz.upstream_mutants"
    unknown = sorted(set(args.only) - {m.name for m in MUTANTS})
    if unknown:
        print(f"{command}: --only: no mutant named {unknown[0]!r}", file=sys.stderr)
        return EXIT_INVALID
    if args.walk and args.walk.partition(FAULTS_SUFFIX)[0].partition(":")[0] not in POOLS:
        print(f"{command}: --walk: no pool named {args.walk!r}", file=sys.stderr)
        return EXIT_INVALID
    if sglang_package() is None:
        print(f"{command}: needs upstream sglang; run it with a .venv-sglang-VERSION/bin/python", file=sys.stderr)
        return EXIT_INVALID
    try:
        if args.walk:
            return walk(args.walk, args.budget, args.engine)
        outcomes = run_exam(args.only, args.budget, engine=args.engine)
        line, status = summary(outcomes, installed_version())
        print(line)
        return status
    except Exception as exc:
        return internal_error(command, exc)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m fuzz.upstream_mutants", description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", action="append", default=[], metavar="NAME", help="this mutant only (repeatable)")
    parser.add_argument("--budget", type=duration, default=DEFAULT_BUDGET_S, help="hunt time per mutant (60s)")
    parser.add_argument("--engine", choices=ENGINES, default="walker", help="what hunts each mutant (walker)")
    parser.add_argument("--walk", metavar="POOL[:CORE]", help=argparse.SUPPRESS)  # the child's hunt
    return parser


if __name__ == "__main__":
    sys.exit(main())
