"""`ReferencePool.clone`, the copy the release-path differential runs each path on: it must behave exactly as
the pool it copies (judged against a fresh pool driven through the same steps, which needs no copying at all) and
as a `copy.deepcopy`, and share nothing mutable with the original."""

from __future__ import annotations

import contextlib
import copy
import enum
from typing import Any

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from impl.engine import ReferencePool
from impl.faults import FAULTS, NO_FAULTS, FaultSet
from impl.records import ReqKvInfo
from impl.target import PoolConfig, PoolSnapshot, Refused

# Every op the pool implements, and the dLLM stash (a pool method no lockstep op names).
OPS = sorted(ReferencePool.OPS | {"dllm_stash"})
# A request finished into the tree, another holding a row and a lock: tensors of every kind before the ops run.
PROLOGUE = [("admit", 0, 6), ("extend", 0, 2), ("decode", 0, 1), ("finish", 0, 1), ("admit", 1, 6)]
op_lists = st.lists(st.tuples(st.sampled_from(OPS), st.integers(0, 3), st.integers(1, 12)), max_size=25)


def _apply(pool: ReferencePool, op: str, rid: int, n: int) -> None:
    calls: dict[str, Any] = {
        "admit": lambda: pool.admit(rid, n, prompt_len=n + 2, family=rid % 2),
        "extend": lambda: pool.extend(rid, n),
        "spec_prepare": lambda: pool.spec_prepare(rid, n % 4 + 1),
        "spec_commit": lambda: pool.spec_commit(rid, n % 4 + 1),
        "decode_finish": lambda: pool.decode_finish(rid, n % 4),
        "spec_finish": lambda: pool.spec_finish(rid, n % 4 + 1, n % 3 + 1, n % 4),
        "evict": lambda: pool.evict(n),
        "offload_release": lambda: pool.offload_release(rid, n % 2),
        "flush": pool.flush,
        "retract_decode": pool.retract_decode,
        "decode_round": pool.decode_round,
        "pause_retract": pool.pause_retract,
        "prefill_round": pool.prefill_round,
        "queue": lambda: pool.queue(rid, n + 2, family=rid % 2),
        "group_begin": pool.group_begin,
        "group_end": pool.group_end,
        "reuse_released": lambda: pool.reuse_released(rid, n % 4 + 1, n),
        "pd_prealloc": lambda: pool.pd_prealloc(rid, n),
        "batch": lambda: pool.batch([("admit", {"req": rid, "n": n, "family": 0}), ("decode", {"req": (rid + 1) % 4})]),
    }
    with contextlib.suppress(Refused):
        calls.get(op, lambda: getattr(pool, op)(rid))()


def _state(snap: PoolSnapshot) -> tuple[Any, ...]:
    return (
        snap.free_rows,
        snap.row_generation,
        snap.records,
        snap.row_slots,
        snap.free_slots.tolist(),
        snap.release_slots.tolist(),
        snap.tree_slots.tolist(),
        snap.evictable_size,
        snap.protected_size,
        snap.req_to_token.tolist(),
    )


def _pool(page_size: int, faults: FaultSet = NO_FAULTS) -> ReferencePool:
    config = PoolConfig(rows=4, tokens=64, width=32, page_size=page_size, cache="radix", speculative=True)
    return ReferencePool(config, faults)


@settings(max_examples=40, deadline=None)
@given(page_size=st.sampled_from([1, 4]), before=op_lists, after=op_lists)
def test_a_clone_behaves_as_the_pool_and_shares_nothing_with_it(
    page_size: int, before: list[Any], after: list[Any]
) -> None:
    pool, fresh = _pool(page_size), _pool(page_size)
    for step in before:
        _apply(pool, *step)
        _apply(fresh, *step)
    original = _state(pool.snapshot())
    clone, deep = pool.clone(), copy.deepcopy(pool)
    for step in after:
        _apply(clone, *step)
        _apply(deep, *step)
        _apply(fresh, *step)
        assert _state(clone.snapshot()) == _state(fresh.snapshot()) == _state(deep.snapshot())
    assert _state(pool.snapshot()) == original
    cloned = _state(clone.snapshot())
    for step in after:
        _apply(pool, *step)
    assert _state(clone.snapshot()) == cloned


def test_a_view_of_the_row_table_is_the_same_view_of_the_copy() -> None:
    pool = _pool(1)
    pool.reqs_aux = pool.req_to_token_pool.req_to_token[2, 4:8]  # type: ignore[attr-defined]
    clone = pool.clone()
    clone.req_to_token_pool.req_to_token[2, 5] = 99
    assert clone.reqs_aux[1] == 99  # type: ignore[attr-defined]
    assert pool.req_to_token_pool.req_to_token[2, 5] != 99 and pool.reqs_aux[1] != 99  # type: ignore[attr-defined]


def _children(obj: Any) -> list[Any]:
    """What `obj` holds: a dict's keys and values, a collection's items, else its attributes and slots."""
    if isinstance(obj, dict):
        return [*obj.keys(), *obj.values()]
    if isinstance(obj, (list, tuple, set, frozenset)):
        return list(obj)
    fields = dict(getattr(obj, "__dict__", {}))
    fields.update((name, getattr(obj, name)) for name in getattr(type(obj), "__slots__", ()) if hasattr(obj, name))
    return list(fields.values())


def _tensors(obj: Any, seen: set[int] | None = None) -> list[torch.Tensor]:
    """Every tensor reachable from `obj` through attributes, slots, dicts, lists and tuples."""
    seen = set() if seen is None else seen
    if id(obj) in seen or isinstance(obj, (int, str, float, bool, type(None))):
        return []
    seen.add(id(obj))
    if isinstance(obj, torch.Tensor):
        return [obj]
    return [t for child in _children(obj) for t in _tensors(child, seen)]


@settings(max_examples=80, deadline=None)
@given(
    page_size=st.sampled_from([1, 4]),
    fault=st.sampled_from([None, *sorted(FAULTS)]),
    before=op_lists,
    after=op_lists,
)
def test_the_pool_writes_no_tensor_in_place_but_its_row_table(
    page_size: int, fault: str | None, before: list[Any], after: list[Any]
) -> None:
    """What lets `clone` share every other tensor: no op writes into one (each change makes a new tensor), with
    no fault switch on or any one of them (the differential clones faulty pools too; what a fault breaks otherwise
    is not this test's business, so any exception of an op is let pass)."""
    pool = _pool(page_size, FaultSet.of([fault] if fault else []))
    for step in PROLOGUE:
        _apply(pool, *step)
    assert pool.tree is not None and pool.tree.census().slots.numel() > 0
    for step in before:
        with contextlib.suppress(Exception):
            _apply(pool, *step)
    table = pool.req_to_token_pool.req_to_token
    kept = [(t, t.clone()) for t in _tensors(pool) if t is not table and t._base is not table]
    for step in after:
        with contextlib.suppress(Exception):
            _apply(pool, *step)
    for tensor, was in kept:
        assert torch.equal(tensor, was), "an op wrote into a tensor the pool keeps, which clones share"


def _mutables(obj: Any, seen: dict[int, Any] | None = None) -> dict[int, Any]:
    """Every object reachable from `obj` that a step could change in place: all but atoms, enum members, tensors
    (which `test_the_pool_writes_no_tensor_in_place_but_its_row_table` covers) and the immutable config and
    fault set, which a clone shares by design."""
    seen = {} if seen is None else seen
    immutable = (int, str, float, bool, type(None), enum.Enum, torch.Tensor, PoolConfig, FaultSet)
    if id(obj) in seen or isinstance(obj, immutable):
        return seen
    if not isinstance(obj, (tuple, frozenset)):
        seen[id(obj)] = obj
    for child in _children(obj):
        _mutables(child, seen)
    return seen


@settings(max_examples=30, deadline=None)
@given(page_size=st.sampled_from([1, 4]), before=op_lists)
def test_a_clone_and_its_pool_share_no_mutable_object(page_size: int, before: list[Any]) -> None:
    """Structural, beside the behavioural test above: no list, dict, record or tree node is reachable from both
    (a field the copy forgot to copy would be)."""
    pool = _pool(page_size)
    for step in [*PROLOGUE, *before]:
        _apply(pool, *step)
    mine, theirs = _mutables(pool), _mutables(pool.clone())
    shared = [type(mine[i]).__name__ for i in mine.keys() & theirs.keys()]
    assert not shared, f"the clone shares {shared} with its pool"
    assert len(mine) == len(theirs)


def test_a_field_copy_keeps_two_names_of_one_list_one_list() -> None:
    pool = _pool(1)
    pool.alias = pool.req_to_token_pool.free_slots  # type: ignore[attr-defined]
    for copied in (pool.clone(), copy.deepcopy(pool)):
        assert copied.alias is copied.req_to_token_pool.free_slots  # type: ignore[attr-defined]
        assert copied.alias is not pool.req_to_token_pool.free_slots  # type: ignore[attr-defined]


def test_a_record_copy_copies_every_field_of_the_record() -> None:
    """`ReqKvInfo.copy` names its fields one by one (the clone copies every request's record): a field added to
    the record and not to the copy fails here."""
    record = ReqKvInfo(**{name: 3 + i for i, name in enumerate(ReqKvInfo.__slots__)})
    copied = record.copy()
    assert copied is not record
    assert {name: getattr(copied, name) for name in ReqKvInfo.__slots__} == {
        name: getattr(record, name) for name in ReqKvInfo.__slots__
    }
