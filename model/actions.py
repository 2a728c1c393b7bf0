"""The lifecycle actions, each written once as a guard and an update over `State`.

`enabled` is what the caller can know before the call (is it legal at all?); `choice_ok` judges the
implementation's choice (which row it handed out), given as an argument. The transition relation is
`enabled and choice_ok and s' == update(s)`. A fault variant replaces one contract action when its fault
is on; it re-creates a historical bug so the prover can show what the contract's guards prevent.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from model.interp import PyOps
from model.state import NO_OWNER, Sizes, State
from properties.invariants import holds, live_status, row_free
from properties.snapshot import STATUS_DECODE, STATUS_DONE, STATUS_NEW, STATUS_PREFILL

Args = dict[str, Any]
Fn = Callable[[Any, Sizes, State, Args], Any]


def _true(o: Any, p: Sizes, s: State, a: Args) -> Any:
    return True


@dataclass(frozen=True)
class Action:
    """One step of the lifecycle. `params` maps each argument to its sort: 'req', 'row' or 'len'."""

    name: str
    params: tuple[tuple[str, str], ...]
    enabled: Fn
    update: Fn
    choice_ok: Fn = _true
    choice: tuple[str, ...] = ()
    negative: bool = False
    fault: str | None = None

    def transition(self, o: Any, p: Sizes, s: State, a: Args) -> tuple[Any, State]:
        return o.And(self.enabled(o, p, s, a), self.choice_ok(o, p, s, a)), self.update(o, p, s, a)


def ite_state(o: Any, c: Any, then: State, other: State) -> State:
    """`then` where `c` holds, else `other`, field by field for symbolic states."""
    if isinstance(o, PyOps):
        return then if c else other
    fields = {f.name: o.If(c, getattr(then, f.name), getattr(other, f.name)) for f in dataclasses.fields(State)}
    return State(**fields)


def _sel(o: Any, s: State, field: str, i: Any) -> Any:
    return o.select(getattr(s, field), i)


def _set(o: Any, s: State, i: Any, **values: Any) -> State:
    """Store `values` at index `i` of the named array fields."""
    return s.but(**{f: o.store(getattr(s, f), i, v) for f, v in values.items()})


# -- guards shared by several actions --------------------------------------------------------------------


def reuse_ok_record(o: Any, s: State, req: Any) -> Any:
    """The reuse guard since PR #37167: a reused row must carry allocated KV."""
    return _sel(o, s, "rec_A", req) > 0


def reuse_ok_legacy(o: Any, s: State, req: Any) -> Any:
    """The reuse guard before PR #37167, read from scheduler fields (stale after release)."""
    return o.Or(_sel(o, s, "rec_inflight", req) > 0, _sel(o, s, "rec_C", req) > 0)


def _slots_ok(o: Any, s: State, n: Any) -> Any:
    return o.And(n >= 1, n <= s.n_free_slots)


def _releasable(o: Any, s: State, req: Any) -> Any:
    """release_kv_cache's asserts on a non-speculative record: it holds KV, and nothing is over-allocated."""
    A = _sel(o, s, "rec_A", req)
    return o.And(holds(o, s, req), A > 0, _sel(o, s, "rec_C", req) == A)


def _running(o: Any, s: State, req: Any) -> Any:
    return live_status(o, _sel(o, s, "rec_status", req))


# -- updates shared by several actions --------------------------------------------------------------------


def _take_row(o: Any, s: State, req: Any, row: Any, n: Any) -> State:
    """Hand `row` to `req` and give it `n` fresh slots from position 0."""
    s = _set(o, s, row, row_held=True, row_owner=req, row_gen=_sel(o, s, "row_gen", row) + 1)
    s = _set(o, s, req, rec_status=STATUS_PREFILL, rec_row=row, rec_P=0, rec_C=n, rec_A=n, rec_inflight=0)
    return s.but(
        n_free_rows=s.n_free_rows - 1,
        n_held_rows=s.n_held_rows + 1,
        n_free_slots=s.n_free_slots - n,
        owned_slots=s.owned_slots + n,
    )


def _grow(o: Any, s: State, req: Any, n: Any) -> State:
    """Extend a holding record in place by `n` committed and allocated slots."""
    C = _sel(o, s, "rec_C", req)
    s = _set(o, s, req, rec_status=STATUS_PREFILL, rec_C=C + n, rec_A=C + n)
    return s.but(n_free_slots=s.n_free_slots - n, owned_slots=s.owned_slots + n)


def _return_row(o: Any, s: State, row: Any) -> State:
    s = _set(o, s, row, row_held=False, row_owner=NO_OWNER)
    return s.but(n_free_rows=s.n_free_rows + 1, n_held_rows=s.n_held_rows - 1)


def _release(o: Any, s: State, req: Any, freed: Any, clear_row: bool = True, status: Any = STATUS_DONE) -> State:
    """Free `freed` slots, return the row, drop the record's ownership and mark it released."""
    P, A, row = (_sel(o, s, f, req) for f in ("rec_P", "rec_A", "rec_row"))
    s = s.but(n_free_slots=s.n_free_slots + freed, owned_slots=s.owned_slots - (A - P))
    s = _return_row(o, s, row)
    s = _set(o, s, req, rec_A=0, rec_status=status)
    return _set(o, s, req, rec_row=0) if clear_row else s


def _own_range(o: Any, s: State, req: Any) -> Any:
    return _sel(o, s, "rec_A", req) - _sel(o, s, "rec_P", req)


# -- the actions -------------------------------------------------------------------------------------------


def _admit_enabled(o: Any, p: Sizes, s: State, a: Args) -> Any:
    req, n = a["req"], a["n"]
    new = _sel(o, s, "rec_status", req) == STATUS_NEW
    return o.And(req >= 0, new, _slots_ok(o, s, n), n <= p.width, s.n_free_rows > 0)


ADMIT = Action(
    "admit",
    (("req", "req"), ("row", "row"), ("n", "len")),
    enabled=_admit_enabled,
    update=lambda o, p, s, a: _take_row(o, s, a["req"], a["row"], a["n"]),
    choice_ok=lambda o, p, s, a: row_free(o, p, s, a["row"]),
    choice=("row",),
)


def _extend_enabled(reuse_ok: Callable[[Any, State, Any], Any]) -> Fn:
    def enabled(o: Any, p: Sizes, s: State, a: Args) -> Any:
        req, n = a["req"], a["n"]
        admitted = o.And(req >= 0, _sel(o, s, "rec_status", req) != STATUS_NEW)
        # The pool's reuse guard alone judges a record that names a row (a chunk continuation, or a released
        # record re-admitted); the scheduler only keeps decoding requests from extending again.
        not_decoding = _sel(o, s, "rec_status", req) != STATUS_DECODE
        reuse = o.And(not_decoding, reuse_ok(o, s, req), _sel(o, s, "rec_C", req) + n <= p.width)
        fresh = o.And(s.n_free_rows > 0, n <= p.width)
        return o.And(admitted, _slots_ok(o, s, n), o.If(holds(o, s, req), reuse, fresh))

    return enabled


def _extend_choice_ok(o: Any, p: Sizes, s: State, a: Args) -> Any:
    req, row = a["req"], a["row"]
    return o.If(holds(o, s, req), row == _sel(o, s, "rec_row", req), row_free(o, p, s, row))


def _extend_update(o: Any, p: Sizes, s: State, a: Args) -> State:
    req = a["req"]
    grown, fresh = _grow(o, s, req, a["n"]), _take_row(o, s, req, a["row"], a["n"])
    return ite_state(o, holds(o, s, req), grown, fresh)


EXTEND_PARAMS = (("req", "req"), ("row", "row"), ("n", "len"))
EXTEND = Action("extend", EXTEND_PARAMS, _extend_enabled(reuse_ok_record), _extend_update,
                _extend_choice_ok, choice=("row",))
EXTEND_LEGACY = dataclasses.replace(EXTEND, enabled=_extend_enabled(reuse_ok_legacy), fault="legacy_reuse_guard")


def _decode_enabled(o: Any, p: Sizes, s: State, a: Args) -> Any:
    req = a["req"]
    fits = _sel(o, s, "rec_C", req) + 1 <= p.width
    return o.And(_running(o, s, req), holds(o, s, req), fits, s.n_free_slots >= 1)


def _decode_update(o: Any, p: Sizes, s: State, a: Args) -> State:
    req = a["req"]
    C, A = _sel(o, s, "rec_C", req), _sel(o, s, "rec_A", req)
    s = _set(o, s, req, rec_C=C + 1, rec_A=A + 1, rec_status=STATUS_DECODE)
    return s.but(n_free_slots=s.n_free_slots - 1, owned_slots=s.owned_slots + 1)


DECODE = Action("decode", (("req", "req"),), _decode_enabled, _decode_update)


def _release_enabled(o: Any, p: Sizes, s: State, a: Args) -> Any:
    return o.And(_running(o, s, a["req"]), _releasable(o, s, a["req"]))


def _release_update(o: Any, p: Sizes, s: State, a: Args) -> State:
    return _release(o, s, a["req"], _own_range(o, s, a["req"]))


def _raw_release_update(o: Any, p: Sizes, s: State, a: Args) -> State:
    return _release(o, s, a["req"], _own_range(o, s, a["req"]), clear_row=False)


REQ_ONLY = (("req", "req"),)
FINISH = Action("finish", REQ_ONLY, _release_enabled, _release_update)
PP_RELEASE = Action("pp_release", REQ_ONLY, _release_enabled, _release_update)
FINISH_RAW = dataclasses.replace(FINISH, update=_raw_release_update, fault="raw_row_free")
PP_RELEASE_RAW = dataclasses.replace(PP_RELEASE, update=_raw_release_update, fault="raw_row_free")


def _manual_enabled(o: Any, p: Sizes, s: State, a: Args) -> Any:
    return o.And(_running(o, s, a["req"]), holds(o, s, a["req"]))


PP_RELEASE_MANUAL = Action(
    "pp_release_manual",
    REQ_ONLY,
    _manual_enabled,
    # Frees [0, C) raw, whatever the record owns: equal to release_kv_cache only when P == 0 and C == A.
    lambda o, p, s, a: _release(o, s, a["req"], _sel(o, s, "rec_C", a["req"])),
)


# -- negative steps: calls the contract forbids, made to check that the pool refuses them ----------------


def _reuse_released_enabled(reuse_ok: Callable[[Any, State, Any], Any]) -> Fn:
    def enabled(o: Any, p: Sizes, s: State, a: Args) -> Any:
        req, row, n = a["req"], a["row"], a["n"]
        released = o.And(_sel(o, s, "rec_status", req) == STATUS_DONE, o.Not(holds(o, s, req)))
        fits = o.And(row >= 1, row <= p.rows, _sel(o, s, "rec_C", req) + n <= p.width)
        return o.And(released, fits, _slots_ok(o, s, n), reuse_ok(o, s, req))

    return enabled


def _reuse_released_update(o: Any, p: Sizes, s: State, a: Args) -> State:
    req, n = a["req"], a["n"]
    C, P = _sel(o, s, "rec_C", req), _sel(o, s, "rec_P", req)
    s = _set(o, s, req, rec_row=a["row"], rec_status=STATUS_PREFILL, rec_A=C + n, rec_C=C + n)
    return s.but(n_free_slots=s.n_free_slots - n, owned_slots=s.owned_slots + C + n - P)


REUSE_RELEASED = Action(
    "reuse_released", EXTEND_PARAMS, _reuse_released_enabled(reuse_ok_record), _reuse_released_update,
    negative=True,
)
REUSE_RELEASED_LEGACY = dataclasses.replace(
    REUSE_RELEASED, enabled=_reuse_released_enabled(reuse_ok_legacy), fault="legacy_reuse_guard"
)
RELEASE_AGAIN = Action(
    "release_again", REQ_ONLY,
    lambda o, p, s, a: _releasable(o, s, a["req"]),
    lambda o, p, s, a: _release(o, s, a["req"], _own_range(o, s, a["req"]), status=_sel(o, s, "rec_status", a["req"])),
    negative=True,
)
FREE_ROW = Action(
    "free_row", REQ_ONLY,
    lambda o, p, s, a: holds(o, s, a["req"]),
    lambda o, p, s, a: _set(o, _return_row(o, s, _sel(o, s, "rec_row", a["req"])), a["req"], rec_row=0),
    negative=True,
)

CONTRACT: tuple[Action, ...] = (
    ADMIT, EXTEND, DECODE, FINISH, PP_RELEASE, PP_RELEASE_MANUAL, REUSE_RELEASED, RELEASE_AGAIN, FREE_ROW,
)
VARIANTS: tuple[Action, ...] = (EXTEND_LEGACY, FINISH_RAW, PP_RELEASE_RAW, REUSE_RELEASED_LEGACY)
MODELED_FAULTS = frozenset(v.fault for v in VARIANTS if v.fault)


def actions_for(faults: frozenset[str] = frozenset()) -> dict[str, Action]:
    """The action table with each named fault's variants in place of the contract definitions."""
    unknown = faults - MODELED_FAULTS
    if unknown:
        raise ValueError(f"the model has no variant for faults {sorted(unknown)}")
    table = {a.name: a for a in CONTRACT}
    for variant in VARIANTS:
        if variant.fault in faults:
            table[variant.name] = variant
    return table
