"""The theorems `python -m model prove` settles, each with the pool shape and fault variants it is stated over."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import z3

from model.actions import MANUAL_PRECONDITIONS, actions_for, manual_release_preconditions
from model.concrete import Model
from model.interp import PY, Z3
from model.prove import Result, _solver, assume_invariants, bmc, induction, symbolic_sizes
from model.state import Sizes, State, symbolic
from model.trace import Step
from properties.invariants import BY_ID, INVARIANTS, live

# Pool shapes theorems are stated over, and the concrete pools bounded searches run on (the fuzzer's pools).
SHAPES = {
    "chunk": Sizes(rows=4, tokens=64, width=32),
    "radix": Sizes(rows=4, tokens=64, width=32, page_size=4, radix=True, speculative=True),
}
BMC_DEPTH = 8

# Stated over the contract with the raw row free present: what the record-based guard alone must prevent.
RECORD_GUARD_INVARIANTS = (
    "row-exclusive", "live-row-owned", "row-held-by-owner", "released-unallocated", "never-admitted-empty",
    "record-domain",
)
SYMBOLIC = [inv for inv in INVARIANTS if inv.symbolic is not None]


@dataclass(frozen=True)
class Theorem:
    """A named claim; `run` settles it. `faults` are the model's fault variants it is stated over."""

    name: str
    statement: str
    shape: str
    faults: frozenset[str]
    run: Callable[[str, int], Result]
    violates: str | None = None


def trace_config(shape: str, faults: frozenset[str]) -> dict[str, Any]:
    """The counterexample-file config of a pool of this shape."""
    s = SHAPES[shape]
    return {"target": "reference", "device": "cpu", "rows": s.rows, "tokens": s.tokens, "width": s.width,
            "page_size": s.page_size, "cache": "radix" if s.radix else "chunk", "speculative": s.speculative,
            "faults": sorted(faults)}


def steps_of(faults: frozenset[str]) -> list[Any]:
    """The actions a scheduler can take (negative steps are calls only made to be refused)."""
    return [a for a in actions_for(faults).values() if not a.negative]


def _inductive(inv_id: str, shape: str) -> Theorem:
    def run(name: str, timeout_ms: int) -> Result:
        return induction(name, SHAPES[shape], steps_of(frozenset()), SYMBOLIC, BY_ID[inv_id], timeout_ms)

    return Theorem(f"inductive:{inv_id}@{shape}", f"{BY_ID[inv_id].statement} is inductive", shape, frozenset(), run)


def two_live_on_one_row(s: State, tag: str) -> Any:
    """Two distinct live records name the same row."""
    i, j = z3.Int(f"i@{tag}"), z3.Int(f"j@{tag}")
    same = Z3.select(s.rec_row, i) == Z3.select(s.rec_row, j)
    return z3.And(i >= 0, j >= 0, i != j, live(Z3, s, i), live(Z3, s, j), same)


def _stale_reuse_legacy() -> Theorem:
    faults = frozenset({"legacy_reuse_guard", "raw_row_free"})

    def run(name: str, timeout_ms: int) -> Result:
        return bmc(name, steps_of(faults), SHAPES["chunk"], two_live_on_one_row, BMC_DEPTH, timeout_ms)

    statement = "with the pre-#37167 reuse guard and a raw row free, two live records end up on one row"
    return Theorem("stale-reuse:legacy-guard", statement, "chunk", faults, run, violates="row-exclusive")


def _stale_reuse_record() -> Theorem:
    faults = frozenset({"raw_row_free"})
    invariants = [BY_ID[i] for i in RECORD_GUARD_INVARIANTS]

    def run(name: str, timeout_ms: int) -> Result:
        result = Result(name, "proved", None, 0.0)
        for inv in invariants:
            step = induction(name, SHAPES["chunk"], steps_of(faults), invariants, inv, timeout_ms)
            if step.outcome != "proved":
                step.detail = f"{inv.id}: {step.detail}"
                return step
            result.seconds += step.seconds
        return result

    statement = "with the record-based reuse guard, even with a raw row free, no row is held by two live records"
    return Theorem("stale-reuse:record-guard", statement, "chunk", faults, run)


def _releases(sizes: Sizes, s: State, req: Any) -> tuple[State, State]:
    """The post-states of the hand-written PP-profiling release and of `release_kv_cache(is_insert=False)`."""
    table = actions_for()
    args = {"req": req}
    return table["pp_release_manual"].update(Z3, sizes, s, args), table["pp_release"].update(Z3, sizes, s, args)


def same_pool_state(a: State, b: State) -> Any:
    return z3.And(*[getattr(a, f.name) == getattr(b, f.name) for f in dataclasses.fields(State)])


def _release_equivalence(shape: str) -> Theorem:
    def run(name: str, timeout_ms: int) -> Result:
        sizes, domain = symbolic_sizes(SHAPES[shape])
        pre, req = symbolic("pre"), z3.Int("req")
        solver = _solver(timeout_ms)
        solver.add(*domain, *assume_invariants(SYMBOLIC, sizes, pre, [req], []))
        solver.add(live(Z3, pre, req), *manual_release_preconditions(Z3, sizes, pre, req))
        solver.add(z3.Not(same_pool_state(*_releases(sizes, pre, req))))
        return _verdict(name, solver, "the two releases differ on a state satisfying the preconditions")

    statement = "under PR #37167's preconditions the hand-written PP release equals release_kv_cache(is_insert=False)"
    return Theorem(f"release-equivalence@{shape}", statement, shape, frozenset(), run)


def _verdict(name: str, solver: z3.Solver, sat_detail: str) -> Result:
    start = time.perf_counter()
    verdict = solver.check()
    seconds = time.perf_counter() - start
    if verdict == z3.unsat:
        return Result(name, "proved", None, seconds)
    if verdict == z3.unknown:
        return Result(name, "unknown", None, seconds, f"solver gave up ({solver.reason_unknown()})")
    return Result(name, "refuted", None, seconds, sat_detail)


# A protected prefix always holds a tree lock and vice versa (invariant lock-follows-prefix): on reachable
# states the first and last preconditions fail together, so dropping one drops its twin as well.
COUPLED = {0: {0, 3}, 3: {0, 3}}


def _diverges_without(dropped: int) -> Callable[[State, str], Any]:
    """A live record for which every precondition but `dropped` (and its twin) holds, and the releases differ."""

    def bad(s: State, tag: str) -> Any:
        sizes, req = SHAPES["radix"], z3.Int(f"req@{tag}")
        conds = manual_release_preconditions(Z3, sizes, s, req)
        kept = [c for k, c in enumerate(conds) if k not in COUPLED.get(dropped, {dropped})]
        manual, unified = _releases(sizes, s, req)
        differ = z3.Or(manual.n_free_slots != unified.n_free_slots, manual.tree_slots != unified.tree_slots,
                       Z3.select(manual.rec_locked, req) != Z3.select(unified.rec_locked, req))
        return z3.And(req >= 0, live(Z3, s, req), *kept, z3.Not(conds[dropped]), differ)

    return bad


def _manual_release_of_witness(m: z3.ModelRef, tag: str) -> Step:
    return Step("pp_release_manual", {"req": m.eval(z3.Int(f"req@{tag}"), model_completion=True).as_long()})


DIVERGENCE_LABELS = ("protected-prefix", "over-allocated", "decoded-past-extend", "tree-lock")


def _divergence(dropped: int) -> Theorem:
    label = DIVERGENCE_LABELS[dropped]

    def run(name: str, timeout_ms: int) -> Result:
        result = bmc(name, steps_of(frozenset()), SHAPES["radix"], _diverges_without(dropped), BMC_DEPTH,
                     timeout_ms, final_step=_manual_release_of_witness)
        twins = sorted(COUPLED.get(dropped, {dropped}) - {dropped})
        result.detail = f"drops `{MANUAL_PRECONDITIONS[dropped]}`" + "".join(
            f" (and with it `{MANUAL_PRECONDITIONS[k]}`: a protected prefix always holds a tree lock)" for k in twins)
        if result.steps:
            result.detail += "; " + describe_divergence(result.steps)
        return result

    statement = f"without `{MANUAL_PRECONDITIONS[dropped]}` the hand-written PP release diverges"
    return Theorem(f"release-divergence:{label}", statement, "radix", frozenset(), run, violates="release-divergence")


def describe_divergence(steps: list[Step]) -> str:
    """What the hand-written release does differently at the end of `steps`, on the executable model."""
    model = Model(SHAPES["radix"])
    for step in steps[:-1]:
        model.step(step.op, {**step.args, **step.choice})
    before, req, table = model.state, steps[-1].args["req"], actions_for()
    manual = table["pp_release_manual"].update(PY, model.sizes, before, {"req": req})
    unified = table["pp_release"].update(PY, model.sizes, before, {"req": req})
    freed_m, freed_u = manual.n_free_slots - before.n_free_slots, unified.n_free_slots - before.n_free_slots
    parts = [f"the hand-written release frees {freed_m} slots, release_kv_cache(is_insert=False) frees {freed_u}"]
    if freed_m > freed_u:
        parts.append(f"{freed_m - freed_u} of them belong to the tree, which still holds them (freed twice)")
    elif freed_m < freed_u:
        parts.append(f"{freed_u - freed_m} slots past extend_range.end are never freed (leaked)")
    if manual.rec_locked.get(req):
        parts.append(f"the tree lock request {req} holds on its prefix stays held")
    return "; ".join(parts)


THEOREMS: tuple[Theorem, ...] = (
    *(_inductive(inv.id, shape) for shape in SHAPES for inv in SYMBOLIC),
    _stale_reuse_legacy(),
    _stale_reuse_record(),
    *(_release_equivalence(shape) for shape in SHAPES),
    *(_divergence(k) for k in range(4)),
)
