"""`python -m fuzz.walker`: the seeded walker's commands.

  run          exit 0: nothing found; 1: a counterexample was found and written; 2: bad usage, an unwritable
               --out, or a target this venv lacks
  replay-seed  exit 1: the file's seed fails again at the same step, the same way; 0: it does not; 2: not a
               valid walker trace
  mutants      exit 0: every in-scope fault found in at most 12 steps, nothing without one; 1: otherwise
  every command: 70 kvlife itself failed (`model.exits`: one line on stderr, the traceback in a file)

Exit statuses as `python -m fuzz run`'s (the README's table). `--budget` reads durations as the campaign does
(90s, 10m, 8h); without `--steps` or `--budget` a run takes `DEFAULT_STEPS` steps.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import sys
from pathlib import Path
from typing import Any

from fuzz.fault_plans import fault_rate_key
from fuzz.flags import MAX_SECONDS, folder_problem, one_torch_thread, whole
from impl.faults import FAULTS
from model.exits import EXIT_CLEAN, EXIT_FOUND, EXIT_INVALID, internal_error
from model.trace import TraceError, load, one_line

MAX_SEED = (1 << 64) - 1
MAX_STEPS = 1 << 40
DEFAULT_STEPS = 10_000
TARGET_NAMES = ("reference", "sglang")
_DURATION = re.compile(r"^\s*([0-9]{1,9}(?:\.[0-9]{1,9})?)\s*([smh]?)\s*$")
_UNIT_S = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0}


def duration(text: str) -> float:
    """An argparse type: `90s`, `10m`, `8h` (a bare number is seconds), positive, at most a week."""
    match = _DURATION.match(text)
    value = float(match.group(1)) * _UNIT_S[match.group(2)] if match else 0.0
    if not 0 < value <= MAX_SECONDS:
        raise argparse.ArgumentTypeError(f"a duration is a positive number with s, m or h (90s, 10m, 8h), got {text!r}")
    return value


def main(argv: list[str] | None = None) -> int:
    """Parse the flags (argparse exits 2 on bad ones), run the command; a crash of kvlife is `EXIT_INTERNAL`."""
    args = _parser().parse_args(sys.argv[1:] if argv is None else argv)
    command = f"fuzz.walker {args.command}"
    try:
        one_torch_thread()
        out = getattr(args, "out", None)
        problem = folder_problem(out) if out is not None else None
        if problem:
            print(f"{command}: --out: {problem}", file=sys.stderr)
            return EXIT_INVALID
        return int(args.run(args))
    except Exception as exc:
        return internal_error(command, exc)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m fuzz.walker", description="the seeded walker")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="walk one seed on one pool in lockstep with the model")
    _run_flags(run)
    run.set_defaults(run=_run)
    again = sub.add_parser("replay-seed", help="rerun a walker counterexample's unshrunk run from its seed")
    again.add_argument("file", type=Path)
    again.set_defaults(run=_replay_seed)
    grade = sub.add_parser("mutants", help="grade the walker on every in-scope fault switch")
    _mutants_flags(grade)
    grade.set_defaults(run=_mutants)
    return parser


def _run_flags(r: argparse.ArgumentParser) -> None:
    from fuzz.profiles import POOLS

    r.add_argument("--pool", choices=sorted(POOLS), default="chunk-p1", help="which pool shape to walk")
    r.add_argument("--seed", type=whole(0, MAX_SEED), help="the run's seed, 0 to 2^64-1 (default: drawn, printed)")
    length = r.add_mutually_exclusive_group()
    length.add_argument("--steps", type=whole(1, MAX_STEPS), metavar="N", help=f"steps (default {DEFAULT_STEPS})")
    length.add_argument("--budget", type=duration, metavar="DURATION", help="walk this long: 90s, 10m, 8h")
    r.add_argument("--fault", action="append", default=[], choices=sorted(FAULTS), metavar="NAME", help="a fault")
    r.add_argument("--fault-rate", type=whole(0, 100), default=0, metavar="P", help="plan a failure in P%% of steps")
    r.add_argument(
        "--exclude", action="append", default=[], metavar="OP", help="never draw this op (or kind:NAME, fault:POINT)"
    )
    r.add_argument("--target", choices=TARGET_NAMES, help="the pool to walk, in place of the shape's (reference)")
    r.add_argument("--out", type=Path, default=Path("counterexamples"), help="where counterexamples go")


def _mutants_flags(m: argparse.ArgumentParser) -> None:
    from fuzz.walker.mutants import DEFAULT_BUDGET_S

    m.add_argument("--budget", type=duration, default=DEFAULT_BUDGET_S, metavar="DURATION", help="per fault")
    m.add_argument("--only", action="append", default=[], choices=list(FAULTS), metavar="NAME", help="one fault")
    m.add_argument("--out", type=Path, default=Path("reports/walker"), help="mutants.json, mutants.md, traces")


def _run(args: argparse.Namespace) -> int:
    from fuzz.profiles import POOLS, describe_pool
    from fuzz.targets import retarget, target_problem

    config: dict[str, Any] = {**POOLS[args.pool], "faults": sorted(set(args.fault)), **fault_rate_key(args.fault_rate)}
    if args.target:
        config = retarget(config, args.target)
    problem = target_problem(config) or _exclude_problem(args.exclude)
    if problem:
        print(f"fuzz.walker run: {problem}", file=sys.stderr)
        return EXIT_INVALID
    seed = args.seed if args.seed is not None else int.from_bytes(os.urandom(4), "little")
    steps = args.steps if args.steps or args.budget else DEFAULT_STEPS
    print(f"fuzz.walker run: seed {seed}, faults {', '.join(config['faults']) or 'none'}, target {config['target']}")
    print(f"  {describe_pool(args.pool, config)}", flush=True)
    return _hunt(args, config, seed, steps)


def _hunt(args: argparse.Namespace, config: dict[str, Any], seed: int, steps: int | None) -> int:
    from fuzz.walker.hunt import hunt

    exclude = frozenset(args.exclude)
    flags = "".join(f" --fault {f}" for f in config["faults"]) + "".join(f" --exclude {e}" for e in sorted(exclude))
    flags += f" --fault-rate {config['fault_rate']}" if config.get("fault_rate") else ""
    length = f"--steps {steps}" if steps else f"--budget {args.budget:g}s"
    target = f" --target {args.target}" if args.target else ""
    print(f"  rerun with: python -m fuzz.walker run --pool {args.pool} --seed {seed} {length}{target}{flags}")
    result = hunt(config, seed, args.out, steps=steps, budget_s=args.budget, exclude=exclude)
    walk = result.walk
    print(f"  swarm: {walk.swarm.describe()}")
    if config.get("fault_rate"):
        unfired = walk.points.never_fired()
        print(
            f"  fault points: {walk.points.describe()}" + (f"; never failed: {', '.join(unfired)}" if unfired else "")
        )
    rate = walk.steps / walk.seconds if walk.seconds > 0 else 0.0
    print(
        f"  {walk.steps} lockstep steps in {walk.seconds:.1f} s ({rate:.0f} steps/s), {walk.walks} walks "
        f"({walk.ops.get('drain', 0)} drained), {walk.coverage.distinct} distinct transitions"
    )
    if result.counterexample is None or result.shrunk is None or walk.trace is None:
        print("fuzz.walker run: nothing found")
        return EXIT_CLEAN
    failure, path = result.shrunk.failure, shlex.quote(str(result.counterexample))
    print(f"fuzz.walker run: counterexample found: step {failure.step}: {failure.kind} {failure.id}: {failure.message}")
    sizes = f"{len(walk.trace.steps)} to {len(result.shrunk.steps)} steps"
    print(f"  written to {result.counterexample} (shrunk from {sizes})")
    print(f"  replay with: python -m fuzz replay {path}")
    print(f"  rerun the unshrunk run with: python -m fuzz.walker replay-seed {path}")
    return EXIT_FOUND


def _exclude_problem(names: list[str]) -> str | None:
    from fuzz.fault_plans import exclusion_names
    from fuzz.lockstep import OPS
    from properties.vocabulary import KIND_EXCLUSIONS

    unknown = sorted(set(names) - OPS - set(KIND_EXCLUSIONS) - exclusion_names())
    return f"--exclude names no op, kind or fault point: {', '.join(map(ascii, unknown))}" if unknown else None


def _replay_seed(args: argparse.Namespace) -> int:
    from fuzz.walker.rerun import RerunError, rerun

    try:
        trace = load(args.file)
        result = rerun(trace)
    except (TraceError, RerunError) as exc:
        print(f"fuzz.walker replay-seed: invalid walker trace {one_line(str(args.file))}: {exc}", file=sys.stderr)
        return EXIT_INVALID
    print("\n".join(result.lines))
    return EXIT_FOUND if result.reproduced else EXIT_CLEAN


def _mutants(args: argparse.Namespace) -> int:
    from fuzz.walker.mutants import cli

    return cli(args.only or list(FAULTS), args.budget, args.out)
