"""Each invariant, in both its forms, passes on a clean pool and catches a violation planted there: the concrete
check on the pool's snapshot, the symbolic form on the model state stepped in lockstep with it (the two plants
are one corruption: the model observes of its state what the abstraction reads off the snapshot). The symbolic
forms also hold on every state the executable model reaches in lockstep with a real pool."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from itertools import product

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fuzz.lockstep import Lockstep
from fuzz.profiles import POOLS
from impl.target import PoolSnapshot
from model.concrete import Model
from model.interp import PY
from model.state import Sizes, State
from properties.abstraction import observe
from properties.check import check_snapshot
from properties.invariants import BY_ID, INVARIANTS, check_every, page_lists, page_snapshot
from properties.page_check import PageCheckResult, check_page_lists, check_pages
from properties.vocabulary import STATUS_CODES

BUSY_POOL = {"chunk": "chunk-p1", "radix": "radix-p4"}


def _busy_lockstep(cache: str) -> Lockstep:
    """A pool and the model stepped together: request 0 between prefill chunks, 1 decoding, 2 released."""
    lock = Lockstep({**POOLS[BUSY_POOL[cache]], "faults": []})
    steps = [
        ("admit", {"req": 0, "prompt": 9, "n": 5, "family": 0}),
        ("admit", {"req": 1, "prompt": 3, "n": 3, "family": 0}),
        ("decode", {"req": 1}),
        ("admit", {"req": 2, "prompt": 2, "n": 2, "family": 0}),
        ("finish", {"req": 2}),
    ]
    for op, inputs in steps:
        assert lock.step(op, inputs) is None, f"{op} {inputs}"
    return lock


def _busy(cache: str) -> PoolSnapshot:
    return _busy_lockstep(cache).snap


def _rec(snap: PoolSnapshot, rid: int, **changes: object) -> PoolSnapshot:
    records = dict(snap.records)
    records[rid] = dataclasses.replace(records[rid], **changes)  # type: ignore[arg-type]
    return dataclasses.replace(snap, records=records)


# A record field of the snapshot, and the model's array that holds it.
STATE_FIELD = {
    "row": "rec_row",
    "protected_len": "rec_P",
    "committed_len": "rec_C",
    "allocated_len": "rec_A",
    "inflight_middle_chunks": "rec_inflight",
    "extend_end": "rec_end",
    "tree_locked": "rec_locked",
    "status": "rec_status",
}


def _state_value(field: str, value: object) -> object:
    """A snapshot field's value as the model holds it (no row is row 0, a lock is 0 or 1, a status its code)."""
    if field == "row":
        return 0 if value is None else value
    if field == "tree_locked":
        return int(bool(value))
    return STATUS_CODES[value] if field == "status" else value  # type: ignore[index]


def _srec(state: State, rid: int, **changes: object) -> State:
    arrays = {STATE_FIELD[f]: getattr(state, STATE_FIELD[f]).set(rid, _state_value(f, v)) for f, v in changes.items()}
    return state.but(**arrays)


Fields = Callable[[PoolSnapshot], dict[str, object]]


@dataclass(frozen=True)
class Planted:
    """One corruption on the busy pool, written for both forms of its invariant: on the pool's snapshot (the
    concrete check) and on the model's state (the symbolic form; None where the invariant has none)."""

    cache: str
    snapshot: Callable[[PoolSnapshot], PoolSnapshot]
    state: Callable[[State, PoolSnapshot], State] | None


def _record(cache: str, rid: int, fields: Fields) -> Planted:
    """The same change to record `rid` on both sides; `fields` may read the clean snapshot."""
    return Planted(cache, lambda s: _rec(s, rid, **fields(s)), lambda m, s: _srec(m, rid, **fields(s)))


def _row_freed(cache: str, rid: int) -> Planted:
    """Record `rid`'s row back in the free list while the record still names it."""

    def state(m: State, s: PoolSnapshot) -> State:
        return m.but(row_held=m.row_held.set(s.records[rid].row, False), n_free_rows=m.n_free_rows + 1)

    return Planted(cache, lambda s: dataclasses.replace(s, free_rows=[*s.free_rows, s.records[rid].row]), state)


def _free_row_leaked(s: PoolSnapshot) -> PoolSnapshot:
    return dataclasses.replace(s, free_rows=s.free_rows[1:])


def _free_row_leaked_state(m: State, s: PoolSnapshot) -> State:
    return m.but(row_held=m.row_held.set(s.free_rows[0], True), n_free_rows=m.n_free_rows - 1)


def _page_owned_and_free(s: PoolSnapshot) -> PoolSnapshot:
    return dataclasses.replace(s, free_slots=torch.cat((s.free_slots, torch.tensor([s.row_slots[0][0]]))))


def _freed_outside_group(s: PoolSnapshot) -> PoolSnapshot:
    """A free page parked in a free group that is not open: its slots are neither free nor held."""
    return dataclasses.replace(s, free_slots=s.free_slots[1:], pending_pages=s.free_slots[:1])


def _freed_outside_group_state(m: State, s: PoolSnapshot) -> State:
    return m.but(n_free_slots=m.n_free_slots - s.page_size, pending_slots=m.pending_slots + s.page_size)


PLANTED: dict[str, Planted] = {
    "kv-presence": _record("chunk", 0, lambda s: {"allocated_len": 0, "committed_len": 0}),
    "row-owner": _row_freed("chunk", 0),
    "row-held-by-owner": Planted("chunk", _free_row_leaked, _free_row_leaked_state),
    "row-exclusive": _record("chunk", 1, lambda s: {"row": s.records[0].row}),
    "record-domain": _record("chunk", 2, lambda s: {"inflight_middle_chunks": -1}),
    "live-holds": _record("chunk", 0, lambda s: {"row": None, "allocated_len": 0}),
    "prefill-shape": _record("chunk", 0, lambda s: {"extend_end": 3}),
    "no-overallocation": _record("chunk", 1, lambda s: {"allocated_len": 5}),
    "chunk-unprotected": _record("chunk", 0, lambda s: {"protected_len": 2}),
    "protected-pages": _record("radix", 0, lambda s: {"protected_len": 3}),
    "lock-follows-prefix": _record("radix", 0, lambda s: {"tree_locked": False}),
    "length-order": _record("chunk", 1, lambda s: {"allocated_len": 40, "committed_len": 40}),
    "live-row-owned": _row_freed("chunk", 1),
    "released-unallocated": _record("chunk", 2, lambda s: {"allocated_len": 3}),
    "released-rowless": _record("chunk", 2, lambda s: {"row": 1}),
    "never-admitted-empty": _record("chunk", 2, lambda s: {"status": "waiting", "row": 1, "allocated_len": 1}),
    "row-conservation": Planted(
        "chunk",
        lambda s: dataclasses.replace(s, free_rows=[*s.free_rows, s.free_rows[0]]),  # a double free
        lambda m, s: m.but(n_free_rows=m.n_free_rows + 1),
    ),
    "token-conservation": Planted(
        "chunk",
        lambda s: dataclasses.replace(s, free_slots=s.free_slots[1:]),
        lambda m, s: m.but(n_free_slots=m.n_free_slots - 1),
    ),
    "page-ownership": Planted("chunk", _page_owned_and_free, None),
    "free-group": Planted("chunk", _freed_outside_group, _freed_outside_group_state),
    "tree-counters": Planted("radix", lambda s: dataclasses.replace(s, evictable_size=s.evictable_size + 4), None),
    "tree-lock-holders": Planted(
        "radix", lambda s: dataclasses.replace(s, protected_recount=s.protected_recount + 4), None
    ),
    "allocator-counters": Planted(
        "chunk", lambda s: dataclasses.replace(s, allocator_problem="num_staged_pages 2, staged_pages hold 1"), None
    ),
    "tree-own-check": Planted(
        "radix", lambda s: dataclasses.replace(s, tree_problem="AssertionError: evictable leaf set differs"), None
    ),
}
SYMBOLIC_IDS = sorted(inv.id for inv in INVARIANTS if inv.symbolic is not None)


def _symbolic_violations(inv_id: str, sizes: Sizes, state: State, reqs: list[int]) -> list[tuple[int, ...]]:
    """The indices (over the known requests and every row) where the invariant's symbolic form is false."""
    inv = BY_ID[inv_id]
    assert inv.symbolic is not None
    domain = {"req": reqs, "row": list(range(1, sizes.rows + 1))}
    return [idx for idx in product(*(domain[sort] for sort in inv.index)) if not inv.symbolic(PY, sizes, state, *idx)]


@pytest.mark.parametrize("cache", ["chunk", "radix"])
def test_clean_pool_has_no_violation(cache: str) -> None:
    assert check_snapshot(_busy(cache)) == []


def test_every_invariant_has_a_planted_violation() -> None:
    assert set(PLANTED) == {inv.id for inv in INVARIANTS}
    assert {i for i, plant in PLANTED.items() if plant.state is not None} == set(SYMBOLIC_IDS)


@pytest.mark.parametrize("inv_id", sorted(PLANTED))
def test_planted_violation_is_named(inv_id: str) -> None:
    plant = PLANTED[inv_id]
    clean = _busy(plant.cache)
    assert BY_ID[inv_id].concrete(clean) == []
    planted = plant.snapshot(clean)
    assert BY_ID[inv_id].concrete(planted), f"{inv_id} did not see its planted violation"
    assert inv_id in {i for i, _ in check_snapshot(planted)}, f"check_snapshot missed the planted {inv_id}"
    assert check_snapshot(planted) == check_every(planted)


@pytest.mark.parametrize("inv_id", SYMBOLIC_IDS)
def test_both_forms_pass_the_clean_pool_and_catch_its_planted_violation(inv_id: str) -> None:
    plant, lock = PLANTED[inv_id], _busy_lockstep(PLANTED[inv_id].cache)
    assert plant.state is not None
    reqs, sizes = lock.model.known_requests(), lock.model.sizes
    assert BY_ID[inv_id].concrete(lock.snap) == []
    assert _symbolic_violations(inv_id, sizes, lock.model.state, reqs) == []
    assert BY_ID[inv_id].concrete(plant.snapshot(lock.snap)), f"the concrete check missed {inv_id}"
    planted = plant.state(lock.model.state, lock.snap)
    assert _symbolic_violations(inv_id, sizes, planted, reqs), f"the symbolic form missed {inv_id}"


@pytest.mark.parametrize("inv_id", SYMBOLIC_IDS)
def test_the_two_plants_are_one_corruption(inv_id: str) -> None:
    """What the model observes of the planted state is what the abstraction reads off the planted snapshot."""
    plant, lock = PLANTED[inv_id], _busy_lockstep(PLANTED[inv_id].cache)
    assert plant.state is not None
    model = Model(lock.model.sizes)
    model.state = plant.state(lock.model.state, lock.snap)
    assert model.observe() == observe(plant.snapshot(lock.snap))


def test_an_unknown_status_is_outside_the_record_domain() -> None:
    (message,) = BY_ID["record-domain"].concrete(_rec(_busy("chunk"), 2, status="lost"))
    assert "request 2: status 'lost'" in message


def test_messages_name_the_request_and_row() -> None:
    snap = _busy("chunk")
    (message,) = BY_ID["row-exclusive"].concrete(_rec(snap, 1, row=snap.records[0].row))
    assert f"row {snap.records[0].row}" in message and "0, 1" in message
    page, gap = BY_ID["page-ownership"].concrete(_page_owned_and_free(snap))
    assert page == f"page {snap.row_slots[0][0]} owned and free: held by row {snap.records[0].row}, free"
    assert "exceed the 64 pages by 1" in gap


STEP = st.tuples(
    st.sampled_from(
        [
            "admit",
            "extend",
            "decode",
            "spec_prepare",
            "spec_commit",
            "finish",
            "retract",
            "abort",
            "pp_release",
            "evict",
            "pd_prealloc",
        ]
    ),
    st.integers(0, 3),
    st.integers(1, 12),
    st.integers(1, 12),
)


def _inputs(op: str, req: int, a: int, b: int) -> dict[str, int]:
    return {
        "admit": {"req": req, "prompt": a, "n": b, "family": req % 2},
        "extend": {"req": req, "n": a},
        "spec_prepare": {"req": req, "reserve": a},
        "spec_commit": {"req": req, "accepted": a},
        "evict": {"n": a},
        "pd_prealloc": {"req": req, "fill": a},
    }.get(op, {"req": req})


@pytest.mark.parametrize("pool", sorted(POOLS))
@settings(max_examples=25, deadline=None)
@given(steps=st.lists(STEP, max_size=20))
def test_symbolic_forms_hold_on_reached_states(pool: str, steps: list[tuple[str, int, int, int]]) -> None:
    lock = Lockstep({**POOLS[pool], "faults": []})
    for op, req, a, b in steps:
        assert lock.step(op, _inputs(op, req, a, b)) is None
        assert lock.model.violated_invariants() == []


PAGE_PLANTS: list[Callable[[PoolSnapshot], PoolSnapshot]] = [
    lambda s: s,
    _page_owned_and_free,
    lambda s: dataclasses.replace(s, free_slots=s.free_slots[1:]),  # a leak
    lambda s: dataclasses.replace(s, free_slots=torch.cat((s.free_slots, s.free_slots[:1]))),  # a double free
    lambda s: _rec(s, 1, row=s.records[0].row),  # two records on one row: owned twice
    lambda s: _rec(s, 0, allocated_len=40),  # past the row width: malformed
]


@pytest.mark.parametrize("cache", ["chunk", "radix"])
@pytest.mark.parametrize("plant", range(len(PAGE_PLANTS)))
def test_the_list_path_of_the_page_check_finds_what_the_tensor_path_finds(cache: str, plant: int) -> None:
    snap = PAGE_PLANTS[plant](_busy(cache))
    lists = page_lists(snap)
    assert lists is not None  # a small CPU pool takes the list path in check_snapshot

    def findings(check: Callable[[], PageCheckResult]) -> object:
        try:
            result = check()
        except ValueError as exc:
            return f"malformed: {exc}"
        return result.violations, result.conservation_gap_pages

    expected = findings(lambda: check_pages(page_snapshot(snap), backend="torch"))
    assert findings(lambda: check_page_lists(lists)) == expected
    assert (plant == 0) == (expected == ([], 0))
