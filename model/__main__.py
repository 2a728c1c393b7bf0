"""`python -m model prove`: settle every theorem and compare each with its manifest row (`model.manifest`).

Exit status: 0 every outcome and assumption matches the manifest; 1 some differ (an `unknown` always differs),
or the manifest and the theorems in code are not one set (checked under `--only` too); 2 bad usage or an
unreadable manifest; 70 kvlife itself failed (`model.exits`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from model import manifest
from model.exits import internal_error
from model.manifest import MANIFEST, Row
from model.prove import SOLVER_TIMEOUT_MS, Result
from model.settle import settle, write_trace
from model.theorems import THEOREMS, Theorem


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return _prove(args)
    except Exception as exc:
        return internal_error("model prove", exc)


def _prove(args: argparse.Namespace) -> int:
    try:
        rows = manifest.load(args.manifest)
    except ValueError as exc:
        print(f"model prove: {exc}", file=sys.stderr)
        return 2
    chosen = _select(args.only)
    if chosen is None:
        print(f"model prove: unknown theorem in --only; known: {', '.join(t.name for t in THEOREMS)}", file=sys.stderr)
        return 2
    unpaired = manifest.unpaired(rows, THEOREMS)
    for line in unpaired:
        print(f"MISMATCH {line}")
    timeout_ms = int(args.timeout * 1000)
    print(f"{'theorem':<46} {'outcome':<9} {'depth':>5} {'seconds':>8}  expected")
    results, mismatches = [], []
    for theorem in chosen:
        settled = settle(theorem, timeout_ms)
        result = settled.result
        results.append(result)
        differences = manifest.differences(theorem, result, rows.get(theorem.name))
        print(_row(result, rows.get(theorem.name), differences), flush=True)
        if differences:
            mismatches.append(result)
        unsettled = _unsettled(theorem, chosen)
        if unsettled:
            print(f"  assumes {', '.join(unsettled)}, whose theorems this run does not settle")
        if args.export_traces and settled.trace is not None:
            print(f"  trace: {write_trace(settled, args.export_traces)}")
    if args.record_seconds:
        _record(args.manifest, results, matched=not (mismatches or unpaired))
    return _summary(chosen, mismatches, unpaired)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m model")
    sub = parser.add_subparsers(dest="command", required=True)
    prove = sub.add_parser("prove", help="settle every theorem and check the manifest")
    prove.add_argument("--only", action="append", metavar="THEOREM", help="settle only this theorem (repeatable)")
    prove.add_argument("--export-traces", type=Path, metavar="DIR", help="write each refuting trace to DIR")
    prove.add_argument(
        "--timeout",
        type=_positive,
        default=SOLVER_TIMEOUT_MS / 1000,
        help="solver timeout per query, seconds (an exceeded one is reported unknown)",
    )
    prove.add_argument("--manifest", type=Path, default=MANIFEST, help="expected outcomes (JSON)")
    prove.add_argument(
        "--record-seconds",
        action="store_true",
        help="after a run that matches the manifest, write each settled theorem's runtime into its row",
    )
    return parser


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 < value <= 3600:
        raise argparse.ArgumentTypeError(f"must be in (0, 3600] seconds, got {text}")
    return value


def _select(only: list[str] | None) -> list[Theorem] | None:
    if not only:
        return list(THEOREMS)
    by_name = {t.name: t for t in THEOREMS}
    if any(name not in by_name for name in only):
        return None
    return [by_name[name] for name in only]


def _unsettled(theorem: Theorem, chosen: list[Theorem]) -> list[str]:
    """The invariants `theorem` assumes whose own `inductive:*` theorem is not among those settled now."""
    names = {t.name for t in THEOREMS} - {t.name for t in chosen}
    return [a for a in theorem.assumes if f"inductive:{a}@{theorem.shape}" in names]


def _row(result: Result, row: Row | None, differences: list[str]) -> str:
    depth = "-" if result.depth is None else str(result.depth)
    expect = "(none in manifest)" if row is None else row.outcome + ("" if row.depth is None else f"@{row.depth}")
    line = f"{result.theorem:<46} {result.outcome:<9} {depth:>5} {result.seconds:>8.3f}  {expect}"
    if differences:
        line += "  MISMATCH" + "".join(f"\n    {d}" for d in differences if d != "no manifest row")
    if result.detail and (differences or result.outcome != "proved"):
        line += "\n" + "\n".join("    " + d for d in result.detail.splitlines())
    return line


def _record(path: Path, results: list[Result], matched: bool) -> None:
    if not matched:
        print("prove: runtimes not recorded: the run differs from the manifest")
        return
    manifest.record_seconds(path, results)
    print(f"prove: recorded the runtimes of {len(results)} theorems in {path}")


def _summary(chosen: list[Theorem], mismatches: list[Result], unpaired: list[str]) -> int:
    if not mismatches and not unpaired:
        print(f"prove: {len(chosen)} theorems, every outcome matches the manifest")
        return 0
    if unpaired:
        print(f"prove: the manifest and the theorems in code are not one set: {'; '.join(unpaired)}")
    if mismatches:
        names = ", ".join(r.theorem for r in mismatches)
        print(f"prove: {len(mismatches)} of {len(chosen)} theorems differ from the manifest: {names}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
