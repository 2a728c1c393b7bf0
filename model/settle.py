"""The prover as a library: settle theorems by name, their searches restricted to given ops where asked, and turn
each refutation with a trace into a counterexample file. `python -m model prove` and the upstream check use it."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from model.prove import SOLVER_TIMEOUT_MS, Result
from model.theorems import THEOREMS, Ops, Theorem, trace_config
from model.trace import Failure, Trace, dump


@dataclass(frozen=True)
class Settled:
    """A theorem's outcome, and its refuting trace as a counterexample file holds it (None without one)."""

    theorem: Theorem
    result: Result
    trace: Trace | None


def settle(theorem: Theorem, timeout_ms: int = SOLVER_TIMEOUT_MS, ops: Ops = None) -> Settled:
    """Settle `theorem` (with `ops`, over those actions only: see `Theorem.run`)."""
    result = theorem.run(theorem.name, timeout_ms, ops)
    return Settled(theorem, result, refuting_trace(theorem, result))


def settle_named(names: Iterable[str], timeout_ms: int = SOLVER_TIMEOUT_MS, ops: Ops = None) -> list[Settled]:
    """Settle the theorems named, in that order; KeyError naming the first one that is not a theorem."""
    by_name = {t.name: t for t in THEOREMS}
    chosen = [by_name[name] for name in names]
    return [settle(theorem, timeout_ms, ops) for theorem in chosen]


def refuting_trace(theorem: Theorem, result: Result) -> Trace | None:
    """The trace of a refutation found by a bounded search, ending in the theorem's bad state; None for an outcome
    without steps (a proof, an unknown, a counterexample to induction)."""
    if result.steps is None:
        return None
    failure = Failure(
        step=len(result.steps) - 1,
        kind="invariant",
        id=theorem.violates or "theorem",
        message=f"{theorem.statement} (found by Z3 at depth {result.depth}): {result.detail}".rstrip(": "),
    )
    config = trace_config(theorem.shape, theorem.faults)
    return Trace(config, None, result.steps, failure, {"source": "z3", "theorem": theorem.name})


def write_trace(settled: Settled, out_dir: Path) -> Path:
    """Write the refuting trace to `out_dir`, named after its theorem; the file's path."""
    assert settled.trace is not None
    path = out_dir / f"{re.sub(r'[^A-Za-z0-9_.-]+', '_', settled.theorem.name)}.json"
    dump(settled.trace, path)
    return path
