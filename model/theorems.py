"""The theorems `python -m model prove` settles, each with the model configuration it is stated over."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import z3

from model.actions import actions_for
from model.interp import Z3
from model.prove import Result, bmc, induction
from model.state import Sizes, State
from properties.invariants import BY_ID, INVARIANTS, live

# The pool the bounded searches run on, and the one their traces replay on: the fuzzer's `ci` pool.
TRACE_SIZES = Sizes(rows=4, tokens=64, width=32)
TRACE_CONFIG = {"target": "reference", "device": "cpu", "rows": 4, "tokens": 64, "width": 32,
                "page_size": 1, "cache": "chunk"}
BMC_DEPTH = 8

# Stated over the contract with the raw row free present: what the record-based guard alone must prevent.
RECORD_GUARD_INVARIANTS = (
    "row-exclusive", "live-row-owned", "row-held-by-owner", "released-unallocated", "never-admitted-empty",
    "record-domain",
)


@dataclass(frozen=True)
class Theorem:
    """A named claim; `run` settles it. `faults` are the model's fault variants it is stated over."""

    name: str
    statement: str
    faults: frozenset[str]
    run: Callable[[str, int], Result]
    violates: str | None = None


def _steps(faults: frozenset[str]) -> list[Any]:
    """The actions a scheduler can take (negative steps are calls only made to be refused)."""
    return [a for a in actions_for(faults).values() if not a.negative]


def _inductive(inv_id: str) -> Theorem:
    symbolic = [inv for inv in INVARIANTS if inv.symbolic is not None]

    def run(name: str, timeout_ms: int) -> Result:
        return induction(name, _steps(frozenset()), symbolic, BY_ID[inv_id], timeout_ms)

    return Theorem(f"inductive:{inv_id}", f"{BY_ID[inv_id].statement} is inductive", frozenset(), run)


def two_live_on_one_row(s: State, tag: str) -> Any:
    """Two distinct live records name the same row."""
    i, j = z3.Int(f"i@{tag}"), z3.Int(f"j@{tag}")
    same = z3.Select(s.rec_row, i) == z3.Select(s.rec_row, j)
    return z3.And(i >= 0, j >= 0, i != j, live(Z3, s, i), live(Z3, s, j), same)


def _stale_reuse_legacy() -> Theorem:
    faults = frozenset({"legacy_reuse_guard", "raw_row_free"})

    def run(name: str, timeout_ms: int) -> Result:
        return bmc(name, _steps(faults), TRACE_SIZES, two_live_on_one_row, BMC_DEPTH, timeout_ms)

    return Theorem(
        "stale-reuse:legacy-guard",
        "with the pre-#37167 reuse guard and a raw row free, two live records end up on one row",
        faults,
        run,
        violates="row-exclusive",
    )


def _stale_reuse_record() -> Theorem:
    faults = frozenset({"raw_row_free"})
    invariants = [BY_ID[i] for i in RECORD_GUARD_INVARIANTS]

    def run(name: str, timeout_ms: int) -> Result:
        for inv in invariants:
            result = induction(name, _steps(faults), invariants, inv, timeout_ms)
            if result.outcome != "proved":
                result.detail = f"{inv.id}: {result.detail}"
                return result
        return result

    return Theorem(
        "stale-reuse:record-guard",
        "with the record-based reuse guard, even with a raw row free, no row is held by two live records",
        faults,
        run,
    )


THEOREMS: tuple[Theorem, ...] = (
    *(_inductive(inv.id) for inv in INVARIANTS if inv.symbolic is not None),
    _stale_reuse_legacy(),
    _stale_reuse_record(),
)
