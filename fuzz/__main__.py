"""`python -m fuzz`: lockstep fuzzing runs and counterexample replay.

  run     exit 0: nothing found; 1: a counterexample was found and written; 2: bad usage
  replay  exit 1: the trace fails on the pool; 0: it does not; 2: not a valid trace (reason on one line)
  emit    exit 0: the regression test was written; 2: not a valid trace
  mutants exit 0: every in-scope fault was found and nothing without one; 1: otherwise; 2: bad usage
  campaign exit 0: nothing found; 1: counterexamples found (new, or earlier ones in --out that still fail);
          2: bad usage; 70: the campaign itself failed (a worker crashed, or re-checking --out hit an internal error)
  verify-upstream  exit 0: the upstream target meets every expectation of upstream/findings.json; 1: otherwise;
          2: bad usage, no sglang here, or an invalid findings file
  every command: 70 kvlife itself failed (`model.exits`: one line on stderr, the traceback in a file)

`--target sglang` (run, replay, mutants) runs upstream SGLang's pool (impl/upstream/target.py) in place of the
reference; it needs a sglang venv (`make sglang-setup`).

Each command imports its machinery (torch, Hypothesis) only once it runs, and `replay` and `emit` validate the
file before that: a file that is refused costs a fraction of a second.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from collections.abc import Callable
from pathlib import Path

from fuzz.fault_plans import fault_rate_key
from fuzz.flags import folder_problem, one_torch_thread, seconds, whole
from impl.faults import FAULTS
from model.exits import EXIT_INVALID, internal_error
from model.trace import Trace, TraceError, load, one_line

MAX_SEED = (1 << 64) - 1
MAX_CASES = 1_000_000
# As `fuzz.profiles.TARGET_NAMES` and `fuzz.emit.REGRESSIONS` (a test checks): those modules load Hypothesis, torch.
TARGET_NAMES = ("reference", "sglang")
REGRESSIONS = Path("tests/regressions")


def main(argv: list[str] | None = None) -> int:
    """Parse the flags (argparse exits 2 on bad ones), check the output folders, run the command; a crash of
    kvlife itself is `EXIT_INTERNAL` with one line, never a traceback that reads as exit 1."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["components"]:  # its own parser: every argument after the word is the component CLI's
        return _components(argv[1:])
    args = _parser(argv).parse_args(argv)
    command = f"fuzz {args.command}"
    try:
        one_torch_thread()
        problem = _folders_problem(args)
        if problem:
            print(f"{command}: {problem}", file=sys.stderr)
            return EXIT_INVALID
        return COMMANDS[args.command][2](args)
    except Exception as exc:
        return internal_error(command, exc)


def _folders_problem(args: argparse.Namespace) -> str | None:
    """Every folder flag (`--out`, `--db`) must be a folder kvlife can create or write into."""
    for flag in ("out", "db"):
        path = getattr(args, flag, None)
        problem = folder_problem(path) if path is not None else None
        if problem:
            return f"--{flag}: {problem}"
    return None


def _parser(argv: list[str]) -> argparse.ArgumentParser:
    """Every command, with the flags of the one named in `argv` only (building the others' would import what
    their choices come from)."""
    chosen = next((arg for arg in argv if not arg.startswith("-")), None)
    parser = argparse.ArgumentParser(prog="python -m fuzz")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (help_text, add_flags, _) in COMMANDS.items():
        command = sub.add_parser(name, help=help_text)
        if name == chosen:
            add_flags(command)
    return parser


def _run_flags(r: argparse.ArgumentParser) -> None:
    from fuzz.machine import SWARMS
    from fuzz.profiles import POOLS, PROFILES

    r.add_argument("--profile", choices=sorted(PROFILES), default="dev")
    r.add_argument("--pool", choices=sorted(POOLS), default="chunk-p1", help="which pool shape to fuzz")
    r.add_argument("--swarm", choices=sorted(SWARMS), default="all", help="fuzz only this group of rules")
    r.add_argument(
        "--fault",
        action="append",
        default=[],
        choices=sorted(FAULTS),
        metavar="NAME",
        help=f"turn on a fault switch (repeatable): {', '.join(sorted(FAULTS))}",
    )
    r.add_argument(
        "--fault-rate",
        type=whole(0, 100),
        default=0,
        metavar="P",
        help="give P percent of the steps a fault plan: one call inside them fails (default 0: none)",
    )
    r.add_argument(
        "--seed",
        type=whole(0, MAX_SEED),
        help="Hypothesis seed, 0 to 2^64-1 (profiles other than ci draw one and print it)",
    )
    r.add_argument("--out", type=Path, default=Path("counterexamples"), help="where counterexamples go")
    r.add_argument("--db", type=Path, default=Path(".hypothesis/kvlife"), help="example database (nightly)")
    r.add_argument("--coverage", action="store_true", help="print which lifecycle corners the run reached")
    r.add_argument("--target", choices=TARGET_NAMES, help="the pool to fuzz, in place of the pool shape's (reference)")


def _replay_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", type=Path)
    p.add_argument("--faults", metavar="NAMES|none", help="comma-separated faults replacing the file's, or none")
    p.add_argument("--verbose", action="store_true", help="print the model and pool state after each step")
    p.add_argument("--target", choices=TARGET_NAMES, help="replay on this target, not the one the file recorded")


def _emit_flags(e: argparse.ArgumentParser) -> None:
    e.add_argument("file", type=Path)
    e.add_argument("--out", type=Path, default=REGRESSIONS, help="where the test goes")


def _mutants_flags(m: argparse.ArgumentParser) -> None:
    from fuzz.mutants import DEFAULT_BUDGET_S, DEFAULT_OUT

    m.add_argument(
        "--budget",
        type=seconds,
        default=DEFAULT_BUDGET_S,
        metavar="SECONDS",
        help="time budget per fault, and per no-fault run of each pool",
    )
    m.add_argument(
        "--only",
        action="append",
        default=[],
        choices=list(FAULTS),
        metavar="NAME",
        help="score only this fault (repeatable)",
    )
    m.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, help="where mutants.json, mutants.md and the counterexamples go"
    )
    m.add_argument(
        "--target",
        choices=TARGET_NAMES,
        default="reference",
        help="sglang: only the no-fault false-alarm runs (faults exist only in the reference pool)",
    )


def _verify_flags(v: argparse.ArgumentParser) -> None:
    v.add_argument("--findings", type=Path, default=Path("upstream/findings.json"), help="the known findings")
    v.add_argument("--out", type=Path, default=Path("reports/upstream"), help="where traces and replays go")
    v.add_argument(
        "--random", type=whole(1, MAX_CASES), default=300, metavar="N", help="random traces in the differential run"
    )
    v.add_argument(
        "--cases", type=whole(1, MAX_CASES), metavar="N", help="test cases per lockstep run (default: the ci profile's)"
    )


def _campaign_flags(c: argparse.ArgumentParser) -> None:
    from fuzz.campaign.cli import add_flags

    add_flags(c)


def _campaign(args: argparse.Namespace) -> int:
    from fuzz.campaign.cli import cli

    return cli(args)


def _verify_upstream(args: argparse.Namespace) -> int:
    from fuzz.upstream_verify import cli

    return cli(args.findings, args.out, args.random, args.cases)


def _run(args: argparse.Namespace) -> int:
    from fuzz.profiles import POOLS, PROFILES, describe_pool
    from fuzz.run import first_failure_line, run
    from fuzz.targets import retarget, target_problem

    profile = PROFILES[args.profile]
    seed = args.seed
    if seed is None and not profile.derandomize:
        seed = int.from_bytes(os.urandom(4), "little")
    config = {**POOLS[args.pool], "faults": sorted(set(args.fault)), **fault_rate_key(args.fault_rate)}
    if args.target:
        config = retarget(config, args.target)
    problem = target_problem(config)
    if problem:
        print(f"fuzz run: {problem}", file=sys.stderr)
        return EXIT_INVALID
    print(
        f"fuzz run: profile {profile.name}, swarm {args.swarm}, seed {seed if seed is not None else 'derandomized'}, "
        f"faults {', '.join(args.fault) or 'none'}, target {config['target']}",
        flush=True,
    )
    print(f"  {describe_pool(args.pool, config)}", flush=True)
    result = run(
        config,
        profile,
        seed,
        args.out,
        args.db,
        args.swarm,
        on_first_failure=lambda seconds, failure: print(first_failure_line(seconds, failure), flush=True),
    )
    rate = result.steps / result.seconds if result.seconds > 0 else 0.0
    print(
        f"  {result.cases} test cases ({result.ops.get('drain', 0)} drained), {result.steps} lockstep steps in "
        f"{result.seconds:.1f} s ({rate:.0f} steps/s)"
    )
    if args.coverage:
        print(coverage_table(result.corners))
    if result.counterexample is None:
        print("fuzz run: nothing found")
        return 0
    print(f"fuzz run: counterexample found: {result.failure_text}")
    print(f"  written to {result.counterexample}")
    print(f"  replay with: python -m fuzz replay {shlex.quote(str(result.counterexample))}")
    return 1


def coverage_table(corners: dict[str, int]) -> str:
    """The lifecycle corners a run reached, with how many steps reached each, grouped by operation."""
    lines = ["  lifecycle corners reached (steps):"]
    width = max((len(name) for name in corners), default=0)
    lines += [f"    {name:<{width}} {count:>7}" for name, count in sorted(corners.items())]
    return "\n".join(lines)


def _replay(args: argparse.Namespace) -> int:
    try:
        faults = _parse_faults(args.faults)
    except ValueError as exc:
        print(f"replay: {exc}", file=sys.stderr)
        return EXIT_INVALID
    trace = _load(args.file, "replay")
    if trace is None:
        return EXIT_INVALID
    from fuzz.replay import prepare, replay, verdict

    try:
        trace = prepare(trace, faults, args.target)
        result = replay(trace, args.verbose)
    except TraceError as exc:
        print(f"replay: invalid trace {one_line(str(args.file))}: {exc}", file=sys.stderr)
        return EXIT_INVALID
    print("\n".join(result.lines))
    code, line = verdict(trace, result)
    print(line)
    return code


def _mutants(args: argparse.Namespace) -> int:
    from fuzz.mutants import cli as mutants_cli

    if args.target == "reference":
        return mutants_cli(args.only or list(FAULTS), args.budget, args.out)
    if args.only:
        print(
            "fuzz mutants: faults exist only in the reference pool; --target sglang runs only the no-fault "
            "false-alarm runs (drop --only)",
            file=sys.stderr,
        )
        return EXIT_INVALID
    from fuzz.mutants import false_alarm_cli

    return false_alarm_cli(args.budget, args.out)


def _emit(args: argparse.Namespace) -> int:
    trace = _load(args.file, "emit")
    if trace is None:
        return EXIT_INVALID
    from fuzz.emit import emit
    from fuzz.replay import prepare

    try:
        trace = prepare(trace, None)
    except TraceError as exc:
        print(f"emit: invalid trace {one_line(str(args.file))}: {exc}", file=sys.stderr)
        return EXIT_INVALID
    path = emit(trace, args.out)
    print(f"emit: wrote {one_line(str(path))}; run it with: .venv/bin/python -m pytest {shlex.quote(str(path))}")
    return 0


def _parse_faults(text: str | None) -> list[str] | None:
    if text is None:
        return None
    if text.strip() == "none":
        return []
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = sorted(set(names) - FAULTS.keys())
    if unknown:
        raise ValueError(one_line(f"--faults names unknown faults {unknown}; known: {', '.join(sorted(FAULTS))}"))
    return names


def _load(path: Path, command: str) -> Trace | None:
    """The file through the loader, before torch or the harness is imported; None (said on one line) if refused."""
    try:
        return load(path)
    except TraceError as exc:
        print(f"{command}: invalid trace {one_line(str(path))}: {exc}", file=sys.stderr)
        return None


def _components(argv: list[str]) -> int:
    try:
        from fuzz.components.cli import main as components

        return components(argv)
    except Exception as exc:
        return internal_error("fuzz components", exc)


def _components_flags(c: argparse.ArgumentParser) -> None:
    c.add_argument("rest", nargs="*", help="the arguments of python -m fuzz.components (see its --help)")


Runner = Callable[[argparse.Namespace], int]
# Each command: its help, what adds its flags, what runs it.
COMMANDS: dict[str, tuple[str, Callable[[argparse.ArgumentParser], None], Runner]] = {
    "run": ("fuzz the reference pool in lockstep with the model", _run_flags, _run),
    "components": (
        "fuzz each pool and allocator directly, every public method (python -m fuzz.components)",
        _components_flags,
        lambda args: _components(args.rest),
    ),
    "replay": ("replay a counterexample file without Hypothesis", _replay_flags, _replay),
    "emit": ("write a pytest regression test that replays a counterexample", _emit_flags, _emit),
    "mutants": ("grade the harness: turn on each fault switch alone and fuzz for it", _mutants_flags, _mutants),
    "verify-upstream": (
        "the harness against the installed upstream SGLang (a sglang venv)",
        _verify_flags,
        _verify_upstream,
    ),
    "campaign": (
        "a time-boxed campaign over every pool and swarm, on N worker processes",
        _campaign_flags,
        _campaign,
    ),
}


if __name__ == "__main__":
    sys.exit(main())
