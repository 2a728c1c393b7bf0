"""`ReferencePool.clone`, the copy the release-path differential runs each path on: it must behave exactly as
the pool it copies (judged against a fresh pool driven through the same steps, which needs no copying at all) and
as a `copy.deepcopy`, and share nothing mutable with the original."""

from __future__ import annotations

import contextlib
import copy
from typing import Any

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from impl.engine import ReferencePool
from impl.target import PoolConfig, PoolSnapshot, Refused

OPS = ["admit", "extend", "decode", "spec_prepare", "spec_commit", "finish", "retract", "abort", "pp_release", "evict"]
op_lists = st.lists(st.tuples(st.sampled_from(OPS), st.integers(0, 3), st.integers(1, 12)), max_size=25)


def _apply(pool: ReferencePool, op: str, rid: int, n: int) -> None:
    calls: dict[str, Any] = {
        "admit": lambda: pool.admit(rid, n, prompt_len=n + 2, family=rid % 2),
        "extend": lambda: pool.extend(rid, n),
        "spec_prepare": lambda: pool.spec_prepare(rid, n % 4 + 1),
        "spec_commit": lambda: pool.spec_commit(rid, n % 4 + 1),
        "evict": lambda: pool.evict(n),
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


def _pool(page_size: int) -> ReferencePool:
    return ReferencePool(PoolConfig(rows=4, tokens=64, width=32, page_size=page_size, cache="radix", speculative=True))


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


def test_tensors_that_shared_storage_still_share_it_in_the_clone() -> None:
    pool = _pool(1)
    base = torch.arange(8, dtype=torch.int64)
    pool.reqs_aux = (base, base[2:6])  # type: ignore[attr-defined]
    copied_base, copied_view = pool.clone().reqs_aux  # type: ignore[attr-defined]
    copied_base[3] = 99
    assert copied_view[1] == 99 and base[3] == 3
    assert copied_base.data_ptr() != base.data_ptr()
