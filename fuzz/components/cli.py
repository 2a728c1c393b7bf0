"""`python -m fuzz.components`: fuzz every component unit of a target and print what each reached.

The parameters come first (target, version, seed, test cases, contract, units), so a run can be repeated
exactly; then one row per unit (test cases, steps, steps/s, the refusal paths it reached) and each failure with
its shrunk counterexample. Exit status: 0 nothing found, 1 found, 2 usage (an unknown unit, sglang missing).
"""

from __future__ import annotations

import argparse
import sys

from fuzz.components.contract import differences
from fuzz.components.search import (
    DEFAULT_EXAMPLES,
    UnitResult,
    fuzz_unit,
    target_key,
    unavailable_units,
    units_for,
)

# The coverage keys that name a refusal path: a None for want of rows or pages, a forbidden call refused, or a
# call short of pages the contract says not to make (0.5.18's paged kernels).
REFUSAL_MARKERS = (":None", "refused", "skipped")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m fuzz.components", description=__doc__.splitlines()[0])
    p.add_argument("--target", choices=("reference", "sglang"), default="reference")
    p.add_argument("--unit", action="append", default=None, help="fuzz only this unit (repeatable)")
    p.add_argument("--examples", type=int, default=DEFAULT_EXAMPLES, help="test cases per unit")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--strict", action="store_true", help="judge every unit by the strict contract")
    p.add_argument("--coverage", action="store_true", help="print every coverage counter of each unit")
    return p


def refusal_paths(result: UnitResult) -> str:
    """The refusal paths a unit reached, with counts, as one field."""
    paths = sorted((key, n) for key, n in result.coverage.items() if any(m in key for m in REFUSAL_MARKERS))
    return " ".join(f"{key}={n}" for key, n in paths) or "-"


def _row(result: UnitResult) -> str:
    rate = result.steps / result.seconds if result.seconds else 0.0
    verdict = "ok" if result.failure is None else f"FOUND {result.failure.kind}"
    return (
        f"{result.name:<22} {result.cases:>6} {result.steps:>7} {result.seconds:>8.1f} {rate:>8.0f}  {verdict:<28} "
        f"{refusal_paths(result)}"
    )


def main(argv: list[str]) -> int:
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exit_:
        return 0 if exit_.code == 0 else 2
    try:
        key = target_key(args.target)
        specs = units_for(args.target)
    except RuntimeError as error:  # sglang absent or an unsupported version
        print(f"components: {error}", file=sys.stderr)
        return 2
    unknown = sorted(set(args.unit or ()) - {spec.name for spec in specs})
    if unknown:
        print(
            f"components: unknown unit(s) {', '.join(unknown)}; known: {', '.join(s.name for s in specs)}",
            file=sys.stderr,
        )
        return 2
    specs = [spec for spec in specs if args.unit is None or spec.name in args.unit]
    contract = "the strict" if args.strict else f"{key}'s own"
    print(f"components: target {args.target} ({key}), seed {args.seed}, {args.examples} test cases per unit")
    print(f"contract: {contract}")
    print(f"units: {' '.join(spec.name for spec in specs)}")
    for line in unavailable_units(args.target) + ([] if args.strict else differences(key)):
        print(f"  not driven: {line}")
    print(f"{'unit':<22} {'cases':>6} {'steps':>7} {'seconds':>8} {'steps/s':>8}  {'result':<28} refusal paths reached")
    results = []
    for spec in specs:
        result = fuzz_unit(spec, args.target, args.examples, args.seed, strict=args.strict)
        results.append(result)
        print(_row(result), flush=True)
        if args.coverage:
            print("    " + " ".join(f"{k}={n}" for k, n in sorted(result.coverage.items())))
    for result in results:
        if result.failure is not None:
            print(f"{result.line(args.target)}\n{result.counterexample()}")
    return 1 if any(result.failure for result in results) else 0
