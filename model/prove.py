"""The prover: induction and bounded model checking over the Z3 interpretation of the model.

Invariants are quantified over request and row indices; induction is kept quantifier-free by instantiating
the pre-state invariants at the indices a step touches (its arguments, the post-state's Skolem indices,
and the rows and owners they name), never with `ForAll`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from itertools import product
from typing import Any

import z3

from model.actions import Action
from model.interp import Z3, Cells
from model.state import ARRAY_FIELDS, Sizes, State, initial, initial_cells, symbolic
from model.trace import Step

SOLVER_TIMEOUT_MS = 30_000


@dataclass
class Result:
    """A theorem's outcome: proved, refuted (with a trace or a counterexample to induction) or unknown."""

    theorem: str
    outcome: str
    depth: int | None
    seconds: float
    detail: str = ""
    steps: list[Step] | None = None


def symbolic_sizes(shape: Sizes) -> tuple[Sizes, list[Any]]:
    """Sizes as Z3 constants with their domain, keeping `shape`'s page size, cache and speculation: a proof
    over them holds for every pool size of that shape."""
    pages = z3.Int("token_pages")
    sizes = Sizes(
        z3.Int("rows"), pages * shape.page_size, z3.Int("width"), shape.page_size, shape.radix, shape.speculative
    )
    return sizes, [sizes.rows >= 1, pages >= 1, sizes.width >= 1]


def _solver(timeout_ms: int) -> z3.Solver:
    solver = z3.Solver()
    solver.set("timeout", timeout_ms)
    return solver


def _bmc_solver(timeout_ms: int) -> z3.Solver:
    """A solver that simplifies and eliminates the unrolling's equalities before each query: incremental Z3 skips
    that preprocessing, and at depth 20 it is the difference between seconds and many minutes per query."""
    solver = z3.Then("simplify", "propagate-values", "solve-eqs", "smt").solver()
    solver.set("timeout", timeout_ms)
    return solver


def _arg_vars(actions: Iterable[Action], tag: str) -> dict[str, Any]:
    """One Z3 variable per parameter name, shared by every action at this step."""
    return {name: z3.Int(f"{name}@{tag}") for a in actions for name, _ in a.params}


def _instances(invariants: Iterable[Any], sizes: Sizes, s: State, pools: dict[str, list[Any]]) -> list[Any]:
    """The invariants over `s`, each instantiated at every tuple of index terms of its sorts."""
    out = []
    for inv in invariants:
        for idx in product(*(pools[sort] for sort in inv.index)):
            out.append(inv.symbolic(Z3, sizes, s, *idx))
    return out


def assume_invariants(assumed: list[Any], sizes: Sizes, s: State, reqs: list[Any], rows: list[Any]) -> list[Any]:
    """The invariants over `s`, instantiated at the given index terms and the rows and owners they name."""
    return _instances(assumed, sizes, s, _pools(s, reqs, rows))


def _pools(s: State, reqs: list[Any], rows: list[Any]) -> dict[str, list[Any]]:
    """Index terms for instantiation: the given ones, plus the owners of rows and the rows of records."""
    owners = [z3.Select(s.row_owner, r) for r in rows]
    named_rows = [z3.Select(s.rec_row, i) for i in reqs]
    owners_of_named = [z3.Select(s.row_owner, r) for r in named_rows]
    return {"req": reqs + owners + owners_of_named, "row": rows + named_rows}


def _skolems(sorts: tuple[str, ...], tag: str) -> list[Any]:
    return [z3.Int(f"k{n}_{sort}@{tag}") for n, sort in enumerate(sorts)]


def induction(
    name: str,
    shape: Sizes,
    actions: list[Action],
    assumed: list[Any],
    target: Any,
    timeout_ms: int = SOLVER_TIMEOUT_MS,
) -> Result:
    """Prove `target` holds initially and is preserved by every action, given all of `assumed` before the step."""
    start = time.perf_counter()
    sizes, domain = symbolic_sizes(shape)
    base = _check_base(sizes, domain, target, timeout_ms)
    if base is not None:
        return Result(name, base[0], 0, time.perf_counter() - start, base[1])
    for action in actions:
        verdict, detail = _check_step(sizes, domain, action, assumed, target, timeout_ms)
        if verdict != "proved":
            return Result(name, verdict, 1, time.perf_counter() - start, f"{action.name}: {detail}")
    return Result(name, "proved", None, time.perf_counter() - start)


def _check_base(sizes: Sizes, domain: list[Any], target: Any, timeout_ms: int) -> tuple[str, str] | None:
    solver = _solver(timeout_ms)
    k = _skolems(target.index, "init")
    solver.add(*domain, z3.Not(target.symbolic(Z3, sizes, initial(Z3, sizes), *k)))
    verdict = solver.check()
    if verdict == z3.unsat:
        return None
    if verdict == z3.unknown:
        return "unknown", f"initial state: solver gave up ({solver.reason_unknown()})"
    return "refuted", "the initial state violates it"


def _check_step(
    sizes: Sizes, domain: list[Any], action: Action, assumed: list[Any], target: Any, timeout_ms: int
) -> tuple[str, str]:
    pre = symbolic("pre")
    args = _arg_vars([action], "step")
    k = _skolems(target.index, "post")
    reqs = [t for t, sort in zip(k, target.index, strict=True) if sort == "req"]
    rows = [t for t, sort in zip(k, target.index, strict=True) if sort == "row"]
    reqs += [args[n] for n, sort in action.params if sort == "req"]
    rows += [args[n] for n, sort in action.params if sort == "row"]
    ok, post = action.transition(Z3, sizes, pre, args)
    solver = _solver(timeout_ms)
    solver.add(*domain, *assume_invariants(assumed, sizes, pre, reqs, rows), ok)
    solver.add(z3.Not(target.symbolic(Z3, sizes, post, *k)))
    verdict = solver.check()
    if verdict == z3.unsat:
        return "proved", ""
    if verdict == z3.unknown:
        return "unknown", f"solver gave up ({solver.reason_unknown()})"
    return "refuted", _cti(solver.model(), pre, post, args, reqs, rows)


_RECORD_FIELDS = ("rec_status", "rec_row", "rec_P", "rec_C", "rec_A", "rec_end", "rec_prompt", "rec_locked")
_ROW_FIELDS = ("row_held", "row_owner")
_COUNTERS = ("n_free_rows", "n_held_rows", "n_free_slots", "owned_slots", "tree_slots")


def _cti(m: z3.ModelRef, pre: State, post: State, args: dict[str, Any], reqs: list[Any], rows: list[Any]) -> str:
    """A counterexample to induction, readable: arguments, then touched records and rows before and after."""

    def ev(t: Any) -> Any:
        return m.eval(t, model_completion=True)

    lines = ["counterexample to induction: " + ", ".join(f"{n}={ev(v)}" for n, v in args.items())]
    for label, st in (("pre ", pre), ("post", post)):
        counters = ", ".join(f"{c}={ev(getattr(st, c))}" for c in _COUNTERS)
        recs = "; ".join(
            f"req {ev(i)}: " + " ".join(f"{f[4:]}={ev(z3.Select(getattr(st, f), i))}" for f in _RECORD_FIELDS)
            for i in _distinct(reqs, ev)
        )
        rws = "; ".join(
            f"row {ev(r)}: " + " ".join(f"{f[4:]}={ev(z3.Select(getattr(st, f), r))}" for f in _ROW_FIELDS)
            for r in _distinct(rows, ev)
        )
        lines.append(f"  {label}: {counters} | {recs} | {rws}")
    return "\n".join(lines)


def _distinct(terms: list[Any], ev: Callable[[Any], Any]) -> list[Any]:
    seen: dict[str, Any] = {}
    for t in terms:
        seen.setdefault(str(ev(t)), t)
    return list(seen.values())


def bmc(
    name: str,
    actions: list[Action],
    sizes: Sizes,
    bad: Callable[[State, str], Any],
    max_depth: int,
    timeout_ms: int = SOLVER_TIMEOUT_MS,
    final_step: Callable[[z3.ModelRef, str], Step] | None = None,
    lemmas: Sequence[Any] = (),
    budget_s: float | None = None,
) -> Result:
    """Search the unrolling of the transition relation from the initial state, depth 0 to `max_depth`, for `bad`.

    `lemmas` are invariants already proved inductive for these actions: every reachable state satisfies them,
    so asserting them at each unrolled state is sound, and it spares the solver rediscovering them. One solver
    holds the unrolling; `bad` is pushed and popped at each depth. `budget_s` bounds the whole search: one that
    runs out of it is unknown, with the depth it had settled.
    """
    start = time.perf_counter()
    solver = _bmc_solver(timeout_ms)
    states = [initial_cells(Z3, sizes, 1)]
    solver.add(*_lemma_instances(lemmas, sizes, states[0], []))
    selectors: list[Any] = []
    arg_vars: list[dict[str, Any]] = []
    newest: Any = z3.IntVal(-1)  # the largest request id named so far
    for depth in range(max_depth + 1):
        left_ms = _left_ms(start, budget_s, timeout_ms)
        if left_ms <= 0:
            return _out_of_budget(name, depth, start)
        solver.set("timeout", left_ms)
        solver.push()
        solver.add(bad(states[-1], str(depth)))
        verdict = solver.check()
        if verdict == z3.sat:
            steps = _trace(solver.model(), actions, selectors, arg_vars)
            if final_step is not None:
                steps.append(final_step(solver.model(), str(depth)))
            return Result(name, "refuted", depth, time.perf_counter() - start, steps=steps)
        reason = solver.reason_unknown() if verdict == z3.unknown else ""
        solver.pop()
        if verdict == z3.unknown:
            if budget_s is not None and time.perf_counter() - start >= budget_s:
                return _out_of_budget(name, depth, start)
            return Result(name, "unknown", depth, time.perf_counter() - start, reason)
        if depth < max_depth:
            sel, args, nxt = _unroll(solver, actions, sizes, _grown(states[-1], depth + 1), depth)
            if "req" in args:
                # Request ids are interchangeable: a trace can always name them in order of first use.
                solver.add(args["req"] <= newest + 1)
                newest = z3.If(args["req"] > newest, args["req"], newest)
            solver.add(*_lemma_instances(lemmas, sizes, nxt, [args[n] for n in args if n == "row"]))
            states.append(nxt)
            selectors.append(sel)
            arg_vars.append(args)
    detail = f"no counterexample up to depth {max_depth}"
    return Result(name, "bounded", max_depth, time.perf_counter() - start, detail)


def _left_ms(start: float, budget_s: float | None, timeout_ms: int) -> int:
    """The solver timeout for the next query: `timeout_ms`, cut to what is left of the whole budget."""
    if budget_s is None:
        return timeout_ms
    return min(timeout_ms, int((budget_s - (time.perf_counter() - start)) * 1000))


def _out_of_budget(name: str, depth: int, start: float) -> Result:
    seconds = time.perf_counter() - start
    return Result(name, "unknown", depth, seconds, f"timeout after {seconds:.0f} s, depths below {depth} settled")


def _grown(s: State, cells: int) -> State:
    """`s` with its record cells extended by unknown requests up to `cells` of them."""

    def grow(c: Cells) -> Cells:
        return Cells(c.items + [c.default] * (cells - len(c.items)), c.default)

    return s.but(**{f: grow(getattr(s, f)) for f in ARRAY_FIELDS if f.startswith("rec_")})


def _lemma_instances(lemmas: Sequence[Any], sizes: Sizes, s: State, rows: list[Any]) -> list[Any]:
    """The lemmas over `s` at every request cell, and at the rows those records and this step name."""
    if not lemmas:
        return []
    reqs = [z3.IntVal(k) for k in range(len(s.rec_status.items))]
    named = [Z3.select(s.rec_row, k) for k in reqs]
    return _instances(lemmas, sizes, s, {"req": reqs, "row": named + rows})


def _unroll(solver: z3.Solver, actions: list[Action], sizes: Sizes, s: State, t: int) -> tuple[Any, Any, State]:
    """Add one step of the transition relation from `s` to a fresh state; return its selector and arguments."""
    sel = z3.Int(f"act@{t}")
    args = _arg_vars(actions, str(t))
    nxt = symbolic(f"s{t + 1}", len(s.rec_status.items))
    cases = [_readable(n, v, actions, t) for n, v in args.items()]
    choices = []
    for k, action in enumerate(actions):
        ok, post = action.transition(Z3, sizes, s, args)
        same = [getattr(nxt, f) == getattr(post, f) for f in post.__dataclass_fields__]
        choices.append(z3.And(sel == k, ok, *same))
    solver.add(*cases, z3.Or(*choices))
    return sel, args, nxt


def _readable(name: str, var: Any, actions: list[Action], t: int) -> Any:
    """Request ids are interchangeable and lengths only need to be small: keeping them so keeps traces readable."""
    if _sort_of(actions, name) == "req":
        return z3.And(var >= 0, var <= t)
    return z3.And(var >= 0, var <= 1 << 12)


def _sort_of(actions: list[Action], param: str) -> str:
    return next(sort for a in actions for name, sort in a.params if name == param)


def _trace(m: z3.ModelRef, actions: list[Action], selectors: list[Any], arg_vars: list[Any]) -> list[Step]:
    steps = []
    for sel, args in zip(selectors, arg_vars, strict=True):
        action = actions[m.eval(sel, model_completion=True).as_long()]
        values = {n: m.eval(args[n], model_completion=True).as_long() for n, _ in action.params}
        steps.append(
            Step(
                action.name,
                {n: v for n, v in values.items() if n not in action.choice},
                {n: values[n] for n in action.choice},
            )
        )
    return steps
