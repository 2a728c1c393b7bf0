"""`python -m model prove`: settle every theorem and compare each outcome with the manifest.

Exit status: 0 every outcome matches the manifest; 1 some outcome differs (an `unknown` always differs);
2 bad usage or an unreadable manifest; 70 kvlife itself failed (`model.exits`).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

from model.exits import internal_error
from model.prove import SOLVER_TIMEOUT_MS, Result
from model.theorems import THEOREMS, Theorem, trace_config
from model.trace import Failure, Trace, dump

MANIFEST = Path(__file__).with_name("manifest.json")


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return _prove(args)
    except Exception as exc:
        return internal_error("model prove", exc)


def _prove(args: argparse.Namespace) -> int:
    try:
        expected = _load_manifest(args.manifest)
    except ValueError as exc:
        print(f"model prove: {exc}", file=sys.stderr)
        return 2
    chosen = _select(args.only)
    if chosen is None:
        print(f"model prove: unknown theorem in --only; known: {', '.join(t.name for t in THEOREMS)}", file=sys.stderr)
        return 2
    timeout_ms = int(args.timeout * 1000)
    print(f"{'theorem':<46} {'outcome':<9} {'depth':>5} {'seconds':>8}  expected")
    mismatches = []
    for theorem in chosen:
        result = theorem.run(theorem.name, timeout_ms)
        want = expected.get(theorem.name)
        ok = want is not None and _matches(result, want)
        print(_row(result, want, ok), flush=True)
        if not ok:
            mismatches.append(result)
        if args.export_traces and result.steps is not None:
            print(f"  trace: {_export(theorem, result, args.export_traces)}")
    return _summary(chosen, mismatches)


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
    return parser


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 < value <= 3600:
        raise argparse.ArgumentTypeError(f"must be in (0, 3600] seconds, got {text}")
    return value


def _load_manifest(path: Path) -> dict[str, dict[str, Any]]:
    try:
        doc = json.loads(path.read_text())
        theorems = doc["theorems"]
        assert isinstance(theorems, dict)
    except (OSError, ValueError, KeyError, TypeError, AssertionError) as exc:
        raise ValueError(f"cannot read manifest {path}: {exc}") from None
    return theorems


def _select(only: list[str] | None) -> list[Theorem] | None:
    if not only:
        return list(THEOREMS)
    by_name = {t.name: t for t in THEOREMS}
    if any(name not in by_name for name in only):
        return None
    return [by_name[name] for name in only]


def _matches(result: Result, want: dict[str, Any]) -> bool:
    return result.outcome == want.get("outcome") and result.depth == want.get("depth", result.depth)


def _row(result: Result, want: dict[str, Any] | None, ok: bool) -> str:
    depth = "-" if result.depth is None else str(result.depth)
    expect = "(none in manifest)"
    if want is not None:
        expect = want["outcome"] + (f"@{want['depth']}" if "depth" in want else "")
    line = f"{result.theorem:<46} {result.outcome:<9} {depth:>5} {result.seconds:>8.3f}  {expect}"
    if not ok:
        line += "  MISMATCH"
    if result.detail and (not ok or result.outcome != "proved"):
        line += "\n" + "\n".join("    " + d for d in result.detail.splitlines())
    return line


def _export(theorem: Theorem, result: Result, out_dir: Path) -> Path:
    assert result.steps is not None
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", theorem.name)
    failure = Failure(
        step=len(result.steps) - 1,
        kind="invariant",
        id=theorem.violates or "theorem",
        message=f"{theorem.statement} (found by Z3 at depth {result.depth}): {result.detail}".rstrip(": "),
    )
    config = trace_config(theorem.shape, theorem.faults)
    trace = Trace(config, None, result.steps, failure, {"source": "z3", "theorem": theorem.name})
    path = out_dir / f"{name}.json"
    dump(trace, path)
    return path


def _summary(chosen: list[Theorem], mismatches: list[Result]) -> int:
    if not mismatches:
        print(f"prove: {len(chosen)} theorems, every outcome matches the manifest")
        return 0
    names = ", ".join(r.theorem for r in mismatches)
    print(f"prove: {len(mismatches)} of {len(chosen)} theorems differ from the manifest: {names}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
