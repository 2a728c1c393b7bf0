"""Each concrete invariant check passes on a clean pool and names a planted violation; the symbolic forms
agree with the checks on the states the executable model reaches."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from impl.engine import PoolConfig, PoolSnapshot, ReferencePool
from model.concrete import Model
from model.state import Sizes
from properties.invariants import BY_ID, INVARIANTS, check_snapshot


def _busy_snapshot() -> PoolSnapshot:
    pool = ReferencePool(PoolConfig())
    pool.admit(0, 5)
    pool.admit(1, 3)
    pool.decode(1)
    pool.admit(2, 2)
    pool.finish(2)
    return pool.snapshot()


def _with_record(snap: PoolSnapshot, rid: int, **changes: object) -> PoolSnapshot:
    records = dict(snap.records)
    records[rid] = dataclasses.replace(records[rid], **changes)  # type: ignore[arg-type]
    return dataclasses.replace(snap, records=records)


def test_clean_pool_has_no_violation() -> None:
    assert check_snapshot(_busy_snapshot()) == []


PLANTED = {
    "kv-presence": lambda s: _with_record(s, 0, allocated_len=0, committed_len=0),
    "row-owner": lambda s: dataclasses.replace(s, free_rows=[*s.free_rows, s.records[0].row]),
    "row-held-by-owner": lambda s: dataclasses.replace(s, free_rows=s.free_rows[1:]),
    "row-exclusive": lambda s: _with_record(s, 1, row=s.records[0].row),
    "record-domain": lambda s: _with_record(s, 2, status="lost"),
    "no-overallocation": lambda s: _with_record(s, 0, allocated_len=6),
    "chunk-unprotected": lambda s: _with_record(s, 0, protected_len=2),
    "length-order": lambda s: _with_record(s, 0, allocated_len=40, committed_len=40),
    "live-row-owned": lambda s: dataclasses.replace(s, free_rows=[*s.free_rows, s.records[1].row]),
    "released-unallocated": lambda s: _with_record(s, 2, allocated_len=3),
    "released-rowless": lambda s: _with_record(s, 2, row=1),
    "never-admitted-empty": lambda s: _with_record(s, 2, status="waiting", row=1, allocated_len=1),
    "row-conservation": lambda s: dataclasses.replace(s, free_rows=[*s.free_rows, s.free_rows[0]]),
    "token-conservation": lambda s: dataclasses.replace(s, free_slots=s.free_slots[1:]),
    "slot-exclusive": lambda s: dataclasses.replace(
        s, free_slots=torch.cat((s.free_slots[1:], torch.tensor([s.row_slots[0][0]])))
    ),
}


def test_every_invariant_has_a_planted_violation() -> None:
    assert set(PLANTED) == {inv.id for inv in INVARIANTS}


@pytest.mark.parametrize("inv_id", sorted(PLANTED))
def test_planted_violation_is_named(inv_id: str) -> None:
    broken = PLANTED[inv_id](_busy_snapshot())
    assert BY_ID[inv_id].concrete(broken), f"{inv_id} did not see its planted violation"


def test_messages_name_the_request_and_row() -> None:
    snap = _busy_snapshot()
    broken = _with_record(snap, 1, row=snap.records[0].row)
    (message,) = BY_ID["row-exclusive"].concrete(broken)
    assert f"row {snap.records[0].row}" in message and "0, 1" in message


OPS = st.sampled_from(["admit", "extend", "decode", "finish", "pp_release", "pp_release_manual"])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(OPS, st.integers(0, 3), st.integers(1, 12)), max_size=25))
def test_symbolic_forms_hold_on_every_state_the_model_reaches(steps: list[tuple[str, int, int]]) -> None:
    model = Model(Sizes(rows=3, tokens=40, width=16))
    for op, req, n in steps:
        args = {"req": req, "n": n, "row": 0}
        if not model.enabled(op, args):
            continue
        if model.action(op).choice:
            args["row"] = model.state.rec_row.get(req) or _first_free(model)
        model.step(op, args)
        assert model.violated_invariants() == []


def _first_free(model: Model) -> int:
    return next(r for r in range(1, model.sizes.rows + 1) if not model.state.row_held.get(r))
