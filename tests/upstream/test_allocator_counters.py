"""The allocator's own counters against its lists: 0.5.23's paged allocator counts its staged pages beside
`staged_pages` (`available_size` adds the count); a drift planted in-process is the `allocator-counters`
invariant's finding, and an allocator without such a counter (0.5.18) never reports one."""

from __future__ import annotations

import importlib.util

import pytest

if importlib.util.find_spec("sglang") is None:
    pytest.skip(
        "needs upstream sglang, which the main venv deliberately lacks; run `make sglang-test`",
        allow_module_level=True,
    )

from impl.target import PoolConfig
from impl.upstream.target import SglangPool
from properties.check import check_snapshot

PAGED = PoolConfig(rows=4, tokens=32, width=16, page_size=4, kernel_backend="triton", need_sort=True)


def _pool_after_a_release() -> SglangPool:
    pool = SglangPool(PAGED)
    pool.admit(0, 8, prompt_len=8)
    pool.decode(0)
    pool.finish(0)  # under need_sort its pages wait, staged, for a merge
    return pool


def test_the_counter_agrees_with_the_list_through_a_lifecycle() -> None:
    pool = _pool_after_a_release()
    assert pool.snapshot().allocator_problem is None
    assert not [inv for inv, _ in check_snapshot(pool.snapshot()) if inv == "allocator-counters"]


def test_a_drifted_counter_is_found_where_the_allocator_keeps_one() -> None:
    pool = _pool_after_a_release()
    if not hasattr(pool.allocator, "num_staged_pages"):
        assert pool.dialect.allocator_problem(pool.allocator) is None  # nothing to drift: no counter kept
        return
    assert pool.snapshot().release_slots.numel() > 0, "the release staged no pages"
    pool.allocator.num_staged_pages += 1  # planted: a staged page counted that no list holds
    found = dict(check_snapshot(pool.snapshot()))
    assert "num_staged_pages" in found["allocator-counters"]
