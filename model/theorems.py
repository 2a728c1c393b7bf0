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
from model.state import SENTINEL_ROW, Sizes, State, symbolic
from model.trace import Step
from properties.invariants import BY_ID, INVARIANTS
from properties.vocabulary import STATUS_DECODE, holds, live

# Pool shapes theorems are stated over, and the concrete pools bounded searches run on (the fuzzer's pools).
SHAPES = {
    "chunk": Sizes(rows=4, tokens=64, width=32),
    "radix": Sizes(rows=4, tokens=64, width=32, page_size=4, radix=True, speculative=True),
}
BMC_DEPTH = 8

# Stated over the contract with the raw row free present: what the record-based guard alone must prevent.
RECORD_GUARD_INVARIANTS = (
    "row-exclusive",
    "live-row-owned",
    "row-held-by-owner",
    "released-unallocated",
    "never-admitted-empty",
    "record-domain",
)
SYMBOLIC = [inv for inv in INVARIANTS if inv.symbolic is not None]


Ops = frozenset[str] | None  # the actions a search may take (None: every one the contract has)


@dataclass(frozen=True)
class Theorem:
    """A named claim; `run` settles it. `faults` are the model's fault variants it is stated over; `assumes` is
    what its proof takes as given (invariant ids, each settled by its own `inductive:*` theorem, and
    restrictions on the record or the steps, as stated). A bounded search from the initial state assumes nothing."""

    name: str
    statement: str
    shape: str
    faults: frozenset[str]
    search: Callable[[str, int, Ops], Result]
    violates: str | None = None
    assumes: tuple[str, ...] = ()

    def run(self, name: str, timeout_ms: int, ops: Ops = None) -> Result:
        """Settle the claim. With `ops`, its transition relation has only those actions: a refuting trace then
        uses only them, and a *proved* outcome means nothing (the relation is smaller than the contract's), so
        that is for traces a target lacking some ops can run (`model.settle.settle_named`)."""
        return self.search(name, timeout_ms, ops)


def _ids(invariants: list[Any]) -> tuple[str, ...]:
    return tuple(inv.id for inv in invariants)


def trace_config(shape: str, faults: frozenset[str]) -> dict[str, Any]:
    """The counterexample-file config of a pool of this shape."""
    s = SHAPES[shape]
    return {
        "target": "reference",
        "device": "cpu",
        "rows": s.rows,
        "tokens": s.tokens,
        "width": s.width,
        "page_size": s.page_size,
        "cache": "radix" if s.radix else "chunk",
        "speculative": s.speculative,
        "faults": sorted(faults),
    }


def steps_of(faults: frozenset[str], ops: Ops = None) -> list[Any]:
    """The actions a scheduler can take (negative steps are calls only made to be refused), those in `ops` only
    where given."""
    return [a for a in actions_for(faults).values() if not a.negative and (ops is None or a.name in ops)]


def _inductive(inv_id: str, shape: str) -> Theorem:
    def run(name: str, timeout_ms: int, ops: Ops) -> Result:
        return induction(name, SHAPES[shape], steps_of(frozenset(), ops), SYMBOLIC, BY_ID[inv_id], timeout_ms)

    others = tuple(i for i in _ids(SYMBOLIC) if i != inv_id)
    statement = f"{BY_ID[inv_id].statement} is inductive"
    return Theorem(f"inductive:{inv_id}@{shape}", statement, shape, frozenset(), run, assumes=others)


def two_live_on_one_row(s: State, tag: str) -> Any:
    """Two distinct live records name the same row."""
    i, j = z3.Int(f"i@{tag}"), z3.Int(f"j@{tag}")
    same = Z3.select(s.rec_row, i) == Z3.select(s.rec_row, j)
    return z3.And(i >= 0, j >= 0, i != j, live(Z3, s, i), live(Z3, s, j), same)


def _stale_reuse_legacy() -> Theorem:
    faults = frozenset({"legacy_reuse_guard", "raw_row_free"})

    def run(name: str, timeout_ms: int, ops: Ops) -> Result:
        return bmc(name, steps_of(faults, ops), SHAPES["chunk"], two_live_on_one_row, BMC_DEPTH, timeout_ms)

    statement = "with the pre-#37167 reuse guard and a raw row free, two live records end up on one row"
    return Theorem("stale-reuse:legacy-guard", statement, "chunk", faults, run, violates="row-exclusive")


def _stale_reuse_record() -> Theorem:
    faults = frozenset({"raw_row_free"})
    invariants = [BY_ID[i] for i in RECORD_GUARD_INVARIANTS]

    # The offload release reads req_pool_idx raw, so a raw row free defeats its guard: a second release, which
    # no reuse guard can prevent (theorem sentinel-boundary:raw-row-free).
    left_out = "offload_release"

    def run(name: str, timeout_ms: int, ops: Ops) -> Result:
        steps = [a for a in steps_of(faults, ops) if a.name != left_out]
        result = Result(name, "proved", None, 0.0)
        for inv in invariants:
            step = induction(name, SHAPES["chunk"], steps, invariants, inv, timeout_ms)
            if step.outcome != "proved":
                step.detail = f"{inv.id}: {step.detail}"
                return step
            result.seconds += step.seconds
        return result

    statement = "with the record-based reuse guard, even with a raw row free, no row is held by two live records"
    return Theorem("stale-reuse:record-guard", statement, "chunk", faults, run, assumes=(f"no {left_out} step",))


def _releases(sizes: Sizes, s: State, req: Any) -> tuple[State, State]:
    """The post-states of the hand-written PP-profiling release and of `release_kv_cache(is_insert=False)`."""
    table = actions_for()
    args = {"req": req}
    return table["pp_release_manual"].update(Z3, sizes, s, args), table["pp_release"].update(Z3, sizes, s, args)


def same_pool_state(a: State, b: State) -> Any:
    return z3.And(*[getattr(a, f.name) == getattr(b, f.name) for f in dataclasses.fields(State)])


def _release_equivalence(shape: str) -> Theorem:
    def run(name: str, timeout_ms: int, ops: Ops) -> Result:
        sizes, domain = symbolic_sizes(SHAPES[shape])
        pre, req = symbolic("pre"), z3.Int("req")
        solver = _solver(timeout_ms)
        solver.add(*domain, *assume_invariants(SYMBOLIC, sizes, pre, [req], []))
        solver.add(live(Z3, pre, req), *manual_release_preconditions(Z3, sizes, pre, req))
        solver.add(z3.Not(same_pool_state(*_releases(sizes, pre, req))))
        return _verdict(name, solver, "the two releases differ on a state satisfying the preconditions")

    statement = "under PR #37167's preconditions the hand-written PP release equals release_kv_cache(is_insert=False)"
    assumes = (*_ids(SYMBOLIC), "live(req)", *MANUAL_PRECONDITIONS)
    return Theorem(f"release-equivalence@{shape}", statement, shape, frozenset(), run, assumes=assumes)


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
        differ = z3.Or(
            manual.n_free_slots != unified.n_free_slots,
            manual.tree_slots != unified.tree_slots,
            Z3.select(manual.rec_locked, req) != Z3.select(unified.rec_locked, req),
        )
        return z3.And(req >= 0, live(Z3, s, req), *kept, z3.Not(conds[dropped]), differ)

    return bad


def _manual_release_of_witness(m: z3.ModelRef, tag: str) -> Step:
    return Step("pp_release_manual", {"req": m.eval(z3.Int(f"req@{tag}"), model_completion=True).as_long()})


DIVERGENCE_LABELS = ("protected-prefix", "over-allocated", "decoded-past-extend", "tree-lock")


def _divergence(dropped: int) -> Theorem:
    label = DIVERGENCE_LABELS[dropped]

    def run(name: str, timeout_ms: int, ops: Ops) -> Result:
        result = bmc(
            name,
            steps_of(frozenset(), ops),
            SHAPES["radix"],
            _diverges_without(dropped),
            BMC_DEPTH,
            timeout_ms,
            final_step=_manual_release_of_witness,
        )
        twins = sorted(COUPLED.get(dropped, {dropped}) - {dropped})
        result.detail = f"drops `{MANUAL_PRECONDITIONS[dropped]}`" + "".join(
            f" (and with it `{MANUAL_PRECONDITIONS[k]}`: a protected prefix always holds a tree lock)" for k in twins
        )
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


# -- the presence/sentinel boundary of the decode-offload release ---------------------------------------------

PRESENCE_FAULTS = frozenset({"offload_presence_guard"})


def _offload(sizes: Sizes, s: State, req: Any, sentinel: int, faults: frozenset[str] = frozenset()) -> Any:
    """The offload release's action, its guard and its post-state on `req` (carrying the `-1` sentinel or not)."""
    action, args = actions_for(faults)["offload_release"], {"req": req, "sentinel": sentinel}
    return action.enabled(Z3, sizes, s, args), action.update(Z3, sizes, s, args)


def owns_row(sizes: Sizes, s: State, req: Any) -> Any:
    """`req` names a row of the pool that is handed out to it."""
    row = Z3.select(s.rec_row, req)
    return z3.And(row >= 1, row <= sizes.rows, Z3.select(s.row_held, row), Z3.select(s.row_owner, row) == req)


def _sentinel_guard() -> Theorem:
    def run(name: str, timeout_ms: int, ops: Ops) -> Result:
        sizes, domain = symbolic_sizes(SHAPES["radix"])
        pre, req = symbolic("pre"), z3.Int("req")
        solver = _solver(timeout_ms)
        solver.add(*domain, *assume_invariants(SYMBOLIC, sizes, pre, [req], []))
        plain, sentinel = _offload(sizes, pre, req, 0)[0], _offload(sizes, pre, req, 1)[0]
        solver.add(z3.Or(z3.And(plain, z3.Not(owns_row(sizes, pre, req))), sentinel))
        return _verdict(name, solver, "the offload release acts on a record that does not own its row")

    statement = (
        "with the raw guard `req_pool_idx is None or == -1`, the offload release acts only on a record that "
        "owns its row: one never given a row or already released (None) and one carrying -1 are refused"
    )
    return Theorem("sentinel-boundary:raw-guard", statement, "radix", frozenset(), run, assumes=_ids(SYMBOLIC))


def _offload_equivalence(shape: str) -> Theorem:
    def run(name: str, timeout_ms: int, ops: Ops) -> Result:
        sizes, domain = symbolic_sizes(SHAPES[shape])
        pre, req = symbolic("pre"), z3.Int("req")
        solver = _solver(timeout_ms)
        solver.add(*domain, *assume_invariants(SYMBOLIC, sizes, pre, [req], []))
        solver.add(Z3.select(pre.rec_status, req) == STATUS_DECODE, holds(Z3, pre, req))
        offload = _offload(sizes, pre, req, 0)[1]
        unified = actions_for()["pp_release"].update(Z3, sizes, pre, {"req": req})
        solver.add(z3.Not(offload_differs_only_by_prefix(offload, unified, req, Z3.select(pre.rec_P, req))))
        return _verdict(name, solver, "the offload release and release_kv_cache(is_insert=False) differ otherwise")

    statement = (
        "on a decoding record that holds a row, the offload release leaves the pool as "
        "release_kv_cache(is_insert=False) does, except that with a protected prefix of P tokens it frees "
        "those P tree-held slots again and keeps the tree lock (equal when P == 0, where it is enabled)"
    )
    assumes = (*_ids(SYMBOLIC), "status(req) == decoding", "holds_kv(req)")
    return Theorem(
        f"sentinel-boundary:release-equivalence@{shape}", statement, shape, frozenset(), run, assumes=assumes
    )


def offload_differs_only_by_prefix(offload: State, unified: State, req: Any, protected: Any) -> Any:
    """Equal states, but for `protected` more freed slots (free, or pending in an open free group) and `req`'s tree
    lock kept after the offload release."""
    kept = dataclasses.fields(State)
    same = [
        getattr(offload, f.name) == getattr(unified, f.name)
        for f in kept
        if f.name not in ("n_free_slots", "pending_slots", "rec_locked")
    ]
    locked = Z3.select(offload.rec_locked, req)
    lock = z3.And(offload.rec_locked == Z3.store(unified.rec_locked, req, locked), locked == z3.If(protected > 0, 1, 0))
    grouped = unified.group_open == 1
    free = offload.n_free_slots == unified.n_free_slots + z3.If(grouped, 0, protected)
    pending = offload.pending_slots == unified.pending_slots + z3.If(grouped, protected, 0)
    return z3.And(*same, free, pending, lock)


def sentinel_row_freed(s: State, tag: str) -> Any:
    """More rows are free than the pool has: a row outside it went back to the free list."""
    return s.n_free_rows > SHAPES["chunk"].rows


def _presence_guard() -> Theorem:
    def run(name: str, timeout_ms: int, ops: Ops) -> Result:
        result = bmc(name, steps_of(PRESENCE_FAULTS, ops), SHAPES["chunk"], sentinel_row_freed, BMC_DEPTH, timeout_ms)
        if result.steps:
            result.detail = describe_sentinel_release(result.steps)
        return result

    statement = (
        "with the presence check holds_kv (the same test as `req_pool_idx is None` alone) in place of the raw "
        "guard, a released record carrying -1 passes and the offload release frees its row and slots again"
    )
    return Theorem(
        "sentinel-boundary:presence-guard", statement, "chunk", PRESENCE_FAULTS, run, violates="row-conservation"
    )


def live_on_a_free_row(s: State, tag: str) -> Any:
    """A live record names a row that is back in the free list."""
    i = z3.Int(f"i@{tag}")
    return z3.And(i >= 0, live(Z3, s, i), z3.Not(Z3.select(s.row_held, Z3.select(s.rec_row, i))))


def _raw_row_free_defeats_the_guard() -> Theorem:
    faults = frozenset({"raw_row_free"})

    def run(name: str, timeout_ms: int, ops: Ops) -> Result:
        return bmc(name, steps_of(faults, ops), SHAPES["chunk"], live_on_a_free_row, BMC_DEPTH, timeout_ms)

    statement = (
        "the raw guard reads only the field: after a raw row free leaves req_pool_idx set, the offload "
        "release passes and returns a row that another live request holds by then"
    )
    return Theorem("sentinel-boundary:raw-row-free", statement, "chunk", faults, run, violates="live-row-owned")


def describe_sentinel_release(steps: list[Step]) -> str:
    """What the offload release did at the end of `steps` to a record carrying the sentinel, on the executable model."""
    model = Model(SHAPES["chunk"], PRESENCE_FAULTS)
    for step in steps[:-1]:
        model.step(step.op, {**step.args, **step.choice})
    before, last = model.state, steps[-1]
    model.step(last.op, {**last.args, **last.choice})
    req, after = last.args["req"], model.state
    return (
        f"request {req} was released; carrying req_pool_idx == {SENTINEL_ROW} it passes holds_kv, and the offload "
        f"release frees {after.n_free_slots - before.n_free_slots} of its stale slots again and returns row "
        f"{SENTINEL_ROW} to the free list ({after.n_free_rows} free rows in a {model.sizes.rows}-row pool)"
    )


THEOREMS: tuple[Theorem, ...] = (
    *(_inductive(inv.id, shape) for shape in SHAPES for inv in SYMBOLIC),
    _stale_reuse_legacy(),
    _stale_reuse_record(),
    *(_release_equivalence(shape) for shape in SHAPES),
    *(_divergence(k) for k in range(4)),
    _sentinel_guard(),
    *(_offload_equivalence(shape) for shape in SHAPES),
    _presence_guard(),
    _raw_row_free_defeats_the_guard(),
)
