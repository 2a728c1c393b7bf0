"""Each concrete invariant check passes on a clean pool and names a planted violation; the symbolic forms
hold on every state the executable model reaches in lockstep with a real pool."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fuzz.lockstep import Lockstep
from fuzz.profiles import POOLS
from impl.engine import ReferencePool
from impl.target import PoolConfig, PoolSnapshot
from properties.invariants import BY_ID, INVARIANTS, check_snapshot, page_lists, page_snapshot
from properties.page_check import PageCheckResult, check_page_lists, check_pages


def _busy(cache: str) -> PoolSnapshot:
    page = 4 if cache == "radix" else 1
    pool = ReferencePool(PoolConfig(cache=cache, page_size=page, evict_on_demand=False))
    pool.admit(0, 5, prompt_len=9)
    pool.admit(1, 3, prompt_len=3)
    pool.decode(1)
    pool.admit(2, 2, prompt_len=2)
    pool.finish(2)
    return pool.snapshot()


def _rec(snap: PoolSnapshot, rid: int, **changes: object) -> PoolSnapshot:
    records = dict(snap.records)
    records[rid] = dataclasses.replace(records[rid], **changes)  # type: ignore[arg-type]
    return dataclasses.replace(snap, records=records)


Plant = Callable[[PoolSnapshot], PoolSnapshot]
PLANTED: dict[str, tuple[str, Plant]] = {
    "kv-presence": ("chunk", lambda s: _rec(s, 0, allocated_len=0, committed_len=0)),
    "row-owner": ("chunk", lambda s: dataclasses.replace(s, free_rows=[*s.free_rows, s.records[0].row])),
    "row-held-by-owner": ("chunk", lambda s: dataclasses.replace(s, free_rows=s.free_rows[1:])),
    "row-exclusive": ("chunk", lambda s: _rec(s, 1, row=s.records[0].row)),
    "record-domain": ("chunk", lambda s: _rec(s, 2, status="lost")),
    "live-holds": ("chunk", lambda s: _rec(s, 0, row=None, allocated_len=0)),
    "prefill-shape": ("chunk", lambda s: _rec(s, 0, extend_end=3)),
    "no-overallocation": ("chunk", lambda s: _rec(s, 1, allocated_len=5)),
    "chunk-unprotected": ("chunk", lambda s: _rec(s, 0, protected_len=2)),
    "protected-pages": ("radix", lambda s: _rec(s, 0, protected_len=3)),
    "lock-follows-prefix": ("radix", lambda s: _rec(s, 0, tree_locked=False)),
    "length-order": ("chunk", lambda s: _rec(s, 1, allocated_len=40, committed_len=40)),
    "live-row-owned": ("chunk", lambda s: dataclasses.replace(s, free_rows=[*s.free_rows, s.records[1].row])),
    "released-unallocated": ("chunk", lambda s: _rec(s, 2, allocated_len=3)),
    "released-rowless": ("chunk", lambda s: _rec(s, 2, row=1)),
    "never-admitted-empty": ("chunk", lambda s: _rec(s, 2, status="waiting", row=1, allocated_len=1)),
    "row-conservation": ("chunk", lambda s: dataclasses.replace(s, free_rows=[*s.free_rows, s.free_rows[0]])),
    "token-conservation": ("chunk", lambda s: dataclasses.replace(s, free_slots=s.free_slots[1:])),
    "page-ownership": (
        "chunk",
        lambda s: dataclasses.replace(s, free_slots=torch.cat((s.free_slots, torch.tensor([s.row_slots[0][0]])))),
    ),
    "tree-counters": ("radix", lambda s: dataclasses.replace(s, evictable_size=s.evictable_size + 4)),
    "tree-lock-holders": ("radix", lambda s: dataclasses.replace(s, protected_recount=s.protected_recount + 4)),
}


@pytest.mark.parametrize("cache", ["chunk", "radix"])
def test_clean_pool_has_no_violation(cache: str) -> None:
    assert check_snapshot(_busy(cache)) == []


def test_every_invariant_has_a_planted_violation() -> None:
    assert set(PLANTED) == {inv.id for inv in INVARIANTS}


@pytest.mark.parametrize("inv_id", sorted(PLANTED))
def test_planted_violation_is_named(inv_id: str) -> None:
    cache, plant = PLANTED[inv_id]
    clean = _busy(cache)
    assert BY_ID[inv_id].concrete(clean) == []
    assert BY_ID[inv_id].concrete(plant(clean)), f"{inv_id} did not see its planted violation"


def test_messages_name_the_request_and_row() -> None:
    snap = _busy("chunk")
    (message,) = BY_ID["row-exclusive"].concrete(_rec(snap, 1, row=snap.records[0].row))
    assert f"row {snap.records[0].row}" in message and "0, 1" in message
    page, gap = BY_ID["page-ownership"].concrete(PLANTED["page-ownership"][1](snap))
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


PAGE_PLANTS: list[Plant] = [
    lambda s: s,
    PLANTED["page-ownership"][1],
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
