"""The `campaign` subcommand: its flags (bad values exit 2 through argparse with a one-line reason), and the run
they describe."""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from fuzz.campaign.plan import (
    DEFAULT_EXAMPLES,
    ENGINES,
    MAX_EXAMPLES,
    MAX_SEED_BASE,
    MAX_SHARDS,
    MAX_WORKERS,
    WALKER_STEPS_PER_EXAMPLE,
    Plan,
    configurations,
)
from fuzz.campaign.supervisor import run_campaign
from fuzz.flags import MAX_SECONDS, whole
from fuzz.lockstep import Lockstep
from fuzz.machine import SWARMS
from fuzz.profiles import POOLS
from fuzz.run import git_commit
from impl.faults import FAULTS
from model.exits import EXIT_INVALID

_DURATION = re.compile(r"^\s*([0-9]{1,9}(?:\.[0-9]{1,9})?)\s*([smh]?)\s*$")
_UNIT_S = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str) -> float:
    """Seconds in `90s`, `10m`, `8h` (a bare number is seconds), at most a week; ValueError with a one-line
    reason otherwise."""
    match = _DURATION.match(text)
    value = float(match.group(1)) * _UNIT_S[match.group(2)] if match else 0.0
    if not 0 < value <= MAX_SECONDS:
        raise ValueError(
            f"a duration is a positive number with s, m or h (90s, 10m, 8h), at most {MAX_SECONDS:g} s, got {text!r}"
        )
    return value


def parse_shard(text: str) -> tuple[int, int]:
    """`I/N` with 1 <= I <= N <= `MAX_SHARDS`; ValueError with a one-line reason otherwise."""
    match = re.fullmatch(r"\s*([0-9]{1,9})\s*/\s*([0-9]{1,9})\s*", text)
    if not match or not 1 <= int(match.group(1)) <= int(match.group(2)) <= MAX_SHARDS:
        raise ValueError(f"a shard is I/N with 1 <= I <= N <= {MAX_SHARDS} (e.g. 2/4), got {text!r}")
    return int(match.group(1)), int(match.group(2))


def parse_engines(text: str) -> tuple[str, ...]:
    """`walker,hypothesis`, `walker` or `hypothesis` (any order, each once), in `ENGINES` order; ValueError with a
    one-line reason otherwise."""
    names = [name.strip() for name in text.split(",")]
    if not names or len(set(names)) != len(names) or not set(names) <= set(ENGINES):
        raise ValueError(f"engines are a comma-separated list of {', '.join(ENGINES)}, each once, got {text!r}")
    return tuple(engine for engine in ENGINES if engine in names)


def add_flags(c: argparse.ArgumentParser) -> None:
    """The `campaign` subcommand's flags."""
    c.add_argument(
        "--budget",
        type=_arg(parse_duration),
        required=True,
        metavar="DURATION",
        help="how long to fuzz: 90s, 10m, 8h (units in flight finish after it)",
    )
    c.add_argument(
        "--workers",
        type=whole(1, MAX_WORKERS),
        default=min(os.cpu_count() or 1, MAX_WORKERS),
        metavar="N",
        help=f"worker processes, at most {MAX_WORKERS} (default: all cores)",
    )
    c.add_argument(
        "--shard",
        type=_arg(parse_shard),
        default=(1, 1),
        metavar="I/N",
        help="run only shard I of N of the seed space (CI matrix jobs)",
    )
    c.add_argument("--target", choices=("reference", "sglang"), default="reference", help="the pool to fuzz")
    c.add_argument(
        "--engines",
        type=_arg(parse_engines),
        default=ENGINES,
        metavar="LIST",
        help=f"the engines whose units the workers run, comma-separated (default {','.join(ENGINES)}: two walker "
        "units to one Hypothesis unit)",
    )
    c.add_argument("--db", type=Path, default=Path(".hypothesis/campaign"), help="shared example database")
    c.add_argument("--out", type=Path, default=Path("reports/campaign"), help="counterexamples and the report")
    c.add_argument(
        "--seed", type=whole(0, MAX_SEED_BASE), metavar="BASE", help="seed base (default: drawn and printed)"
    )
    c.add_argument(
        "--fault",
        action="append",
        default=[],
        choices=sorted(FAULTS),
        metavar="NAME",
        help="turn on a fault switch (repeatable)",
    )
    c.add_argument(
        "--fault-rate",
        type=whole(0, 100),
        default=0,
        metavar="P",
        help="fault plans (inner calls failed on purpose) in P%% of the walker's steps, and Hypothesis's arm_fault "
        "rule; each point the pools install must fail at least once, or the campaign fails (default 0: none)",
    )
    c.add_argument(
        "--examples",
        type=whole(1, MAX_EXAMPLES),
        default=DEFAULT_EXAMPLES,
        metavar="N",
        help=f"test cases per unit (default {DEFAULT_EXAMPLES}: about 10 s on one core); a walker unit walks "
        + " and ".join(f"{n} steps per test case on the {t} target" for t, n in WALKER_STEPS_PER_EXAMPLE.items()),
    )


def cli(args: Any) -> int:
    """Run `python -m fuzz campaign` from parsed arguments; its exit code."""
    faults = tuple(sorted(set(args.fault)))
    torch.set_num_threads(1)  # before the pools below are built: see `fuzz.campaign.supervisor.supervise`
    pools, problems = buildable_pools(args.target, faults)
    if not pools:
        print(
            f"fuzz campaign: no pool of target {args.target} can be built here: {next(iter(problems.values()))}",
            file=sys.stderr,
        )
        return EXIT_INVALID
    for pool, problem in problems.items():
        print(f"fuzz campaign: {pool} left out: {problem}", file=sys.stderr)
    seed_base = args.seed if args.seed is not None else int.from_bytes(os.urandom(4), "little")
    plan = Plan(
        args.budget,
        args.workers,
        args.shard,
        seed_base,
        args.target,
        faults,
        args.db,
        args.out,
        args.examples,
        tuple(configurations(pools, SWARMS)),
        git_commit(),
        args.engines,
        args.fault_rate,
    )
    return run_campaign(plan).exit_code


def buildable_pools(target: str, faults: tuple[str, ...]) -> tuple[list[str], dict[str, str]]:
    """The pools of `POOLS` this target can be built with here, and why each other one cannot (one line)."""
    pools, problems = [], {}
    for pool in sorted(POOLS):
        try:
            Lockstep({**POOLS[pool], "target": target, "faults": list(faults)})
        except ValueError as exc:
            problems[pool] = str(exc)
            continue
        pools.append(pool)
    return pools, problems


def _arg(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    def convert(text: str) -> Any:
        try:
            return parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return convert
