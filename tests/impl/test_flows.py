"""Every lifecycle flow of the reference pool, step by step against SGLang's table of who writes which length
(§1.1 of the lifecycle notes), each ending idle-clean; page sizes 1 and 4, chunk cache and radix tree."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from impl.engine import RETRACT_DECODE_STEPS, ReferencePool
from impl.records import output_token, prompt_token
from impl.target import PoolConfig, PoolSnapshot, Refused

PAGE_SIZES = (1, 4)
REPO_ROOT = Path(__file__).resolve().parents[2]


def make_pool(**config: object) -> ReferencePool:
    return ReferencePool(PoolConfig(**config))  # type: ignore[arg-type]


def lengths(pool: ReferencePool, rid: int) -> tuple[int | None, int, int, int]:
    """(row, P, C, A) of a request's record."""
    kv = pool.reqs[rid].kv
    return kv.req_pool_idx, kv.cache_protected_len, kv.kv_committed_len, kv.kv_allocated_len


def row_of(pool: ReferencePool, rid: int, end: int) -> list[int]:
    row = pool.reqs[rid].kv.req_pool_idx
    assert row is not None
    return pool.req_to_token_pool.req_to_token[row, :end].tolist()


def tree_pages(snap: PoolSnapshot) -> set[int]:
    """Pages the tree holds; a tree value always covers whole pages, each slot once."""
    ps = snap.page_size
    slots = Counter(snap.tree_slots.tolist())
    assert all(n == 1 for n in slots.values()), "a slot is cached twice in the tree"
    per_page = Counter(slot // ps for slot in slots)
    assert all(n == ps for n in per_page.values()), f"the tree holds part of a page: {per_page}"
    return set(per_page)


def page_problems(snap: PoolSnapshot) -> list[str]:
    """Every page has exactly one holder (free list, tree, or one holding record's own `[P, A)`), the row's
    `[0, P)` reads tree pages, and the tree counters equal their recount."""
    ps, tree = snap.page_size, tree_pages(snap)
    holders: dict[int, list[str]] = {page: [] for page in range(snap.num_pages + 1)}
    for page in snap.free_slots.tolist() + snap.release_slots.tolist():
        holders.setdefault(page, []).append("free")
    for page in tree:
        holders.setdefault(page, []).append("tree")
    problems = []
    for rid, rec in snap.records.items():
        if rec.row is None:
            continue
        slots = snap.row_slots[rid]
        for page in {slot // ps for slot in slots[rec.protected_len : rec.allocated_len]}:
            holders.setdefault(page, []).append(f"request {rid}")
        problems += [
            f"request {rid} prefix reads page {s // ps}, not the tree's"
            for s in slots[: rec.protected_len]
            if s // ps not in tree
        ]
    problems += [f"page {page} held by nobody" for page, who in holders.items() if page and not who]
    problems += [f"page {page} held by {who}" for page, who in holders.items() if len(who) > 1 or (who and not page)]
    if (snap.evictable_size, snap.protected_size) != (snap.evictable_recount, snap.protected_recount):
        problems.append(
            f"tree counters {snap.evictable_size}/{snap.protected_size} != recount "
            f"{snap.evictable_recount}/{snap.protected_recount}"
        )
    return problems


def assert_idle_clean(pool: ReferencePool) -> None:
    """No request holds anything: every row free, every page free or cached once, nothing protected."""
    snap = pool.snapshot()
    assert sorted(snap.free_rows) == list(range(1, snap.rows_total + 1))
    free = snap.free_slots.tolist() + snap.release_slots.tolist()
    assert len(free) == len(set(free)), f"pages freed twice: {sorted(p for p, n in Counter(free).items() if n > 1)}"
    tree = tree_pages(snap)
    assert sorted(free + list(tree)) == list(range(1, snap.num_pages + 1))
    assert (snap.evictable_size, snap.protected_size) == (snap.evictable_recount, snap.protected_recount)
    assert snap.protected_size == 0
    assert snap.evictable_size == len(tree) * snap.page_size
    for rid, rec in snap.records.items():
        assert (rec.row, rec.allocated_len, rec.tree_locked) == (None, 0, False), f"request {rid}: {rec}"
    assert page_problems(snap) == []


def assert_unchanged(before: PoolSnapshot, after: PoolSnapshot) -> None:
    assert after.records == before.records
    assert after.free_rows == before.free_rows
    assert after.row_generation == before.row_generation
    for name in ("free_slots", "release_slots", "tree_slots", "req_to_token"):
        assert torch.equal(getattr(after, name), getattr(before, name)), name
    assert (after.evictable_size, after.protected_size) == (before.evictable_size, before.protected_size)


# -- admission, chunked prefill, decode ---------------------------------------------------------------------


@pytest.mark.parametrize("ps", PAGE_SIZES)
def test_chunked_prefill_keeps_the_row_and_stashes_each_chunk_in_the_tree(ps: int) -> None:
    pool = make_pool(page_size=ps, cache="radix")
    row = pool.admit(0, 6, prompt_len=14)
    # alloc_for_extend: A = C = 6; the stash caches [0, page_floor(6)) and protects it.
    assert lengths(pool, 0) == (row, 6 - 6 % ps, 6, 6)
    assert pool.reqs[0].status.value == "running"
    assert pool.snapshot().protected_size == 6 - 6 % ps
    assert pool.reqs[0].prefix_indices.numel() == 6  # the cached part plus the request's own tail
    assert pool.extend(0, 5) == row  # the middle chunk keeps its row (A > 0)
    assert lengths(pool, 0) == (row, 11 - 11 % ps, 11, 11)
    assert pool.extend(0, 9) == row  # the last chunk stops at the prompt's end
    assert lengths(pool, 0) == (row, 14 - 14 % ps, 14, 14)
    assert pool.reqs[0].status.value == "decoding"
    assert pool.reqs[0].fill_ids == [prompt_token(0, p) for p in range(14)]
    assert page_problems(pool.snapshot()) == []
    with pytest.raises(Refused, match="decoding"):
        pool.extend(0, 1)
    pool.finish(0)
    assert lengths(pool, 0) == (None, 14 - 14 % ps, 14, 0)  # P and C stay stale after release
    assert_idle_clean(pool)


@pytest.mark.parametrize("ps", PAGE_SIZES)
def test_chunk_cache_stash_keeps_the_own_slots_in_prefix_indices(ps: int) -> None:
    pool = make_pool(page_size=ps)
    row = pool.admit(0, 5)
    assert pool.reqs[0].prefix_indices.tolist() == row_of(pool, 0, 5)
    assert pool.extend(0, 3) == row
    assert lengths(pool, 0) == (row, 0, 8, 8)
    assert pool.reqs[0].prefix_indices.tolist() == row_of(pool, 0, 8)
    slots = row_of(pool, 0, 8)
    assert len(set(slots)) == 8
    assert all(slots[p] // ps == slots[p - 1] // ps for p in range(1, 8) if p % ps)  # pages run on in the row
    assert page_problems(pool.snapshot()) == []
    pool.finish(0)
    assert_idle_clean(pool)


@pytest.mark.parametrize("ps", PAGE_SIZES)
def test_admission_matches_a_cached_prefix_locks_it_and_shares_its_slots(ps: int) -> None:
    pool = make_pool(page_size=ps, cache="radix")
    pool.admit(0, 32, prompt_len=12)
    assert pool.peek_prefix(0, 20) == 12
    assert pool.peek_prefix(0, 12) == 11 - 11 % ps  # one prompt token is always computed
    assert pool.peek_prefix(1, 20) == 0
    pool.admit(1, 2, prompt_len=20)  # same family: matches the 12 cached tokens, computes 2
    assert pool.peek_prefix_of(1) == 14  # a continuation starts at its stashed prefix
    assert lengths(pool, 1)[1:] == (14 - 14 % ps, 14, 14)
    assert row_of(pool, 1, 12) == row_of(pool, 0, 12)
    assert pool.snapshot().records[1].tree_locked
    assert pool.snapshot().protected_size == 14 - 14 % ps
    pool.admit(2, 32, prompt_len=12, family=1)  # another family shares nothing
    assert set(row_of(pool, 2, 12)).isdisjoint(row_of(pool, 0, 12))
    assert lengths(pool, 2)[1:] == (12, 12, 12)
    assert page_problems(pool.snapshot()) == []
    for rid in (0, 2):
        pool.finish(rid)
    pool.abort(1)
    assert_idle_clean(pool)


def test_admission_keeps_one_prompt_token_to_compute() -> None:
    pool = make_pool(page_size=4, cache="radix")
    pool.admit(0, 32, prompt_len=8)
    pool.finish(0)
    pool.admit(1, 32, prompt_len=8)  # the whole prompt is cached, but the match stops a page short
    assert lengths(pool, 1)[1:] == (8, 8, 8)
    assert pool.reqs[1].prefix_indices.tolist() == row_of(pool, 1, 8)
    pool.finish(1)
    assert_idle_clean(pool)


@pytest.mark.parametrize("ps", PAGE_SIZES)
def test_decode_takes_a_new_page_only_when_it_starts_one(ps: int) -> None:
    pool = make_pool(page_size=ps, cache="radix", tokens=32)
    pool.admit(0, 32, prompt_len=3)
    free_pages = pool.allocator.free_pages.numel()
    for position in range(3, 10):
        pool.decode(0)
        assert lengths(pool, 0)[2:] == (position + 1, position + 1)  # A += 1, C += 1
        taken = free_pages - pool.allocator.free_pages.numel()
        assert taken == -(-(position + 1) // ps) - -(-3 // ps)
        assert pool.reqs[0].fill_ids[position] == output_token(0, position)
    assert pool.reqs[0].status.value == "decoding"
    assert page_problems(pool.snapshot()) == []
    pool.finish(0)
    snap = pool.snapshot()
    assert snap.evictable_size == 10 - 10 % ps  # the finished sequence is cached, page-floored
    assert_idle_clean(pool)


def test_decode_refuses_a_request_mid_prefill() -> None:
    pool = make_pool(cache="radix")
    pool.admit(0, 4, prompt_len=10)
    with pytest.raises(Refused, match="mid-prefill"):
        pool.decode(0)
    with pytest.raises(Refused, match="mid-prefill"):
        pool.finish(0)


# -- eviction before allocation ----------------------------------------------------------------------------


@pytest.mark.parametrize("ps", PAGE_SIZES)
def test_allocation_evicts_the_tree_shortfall_first(ps: int) -> None:
    pool = make_pool(page_size=ps, cache="radix", tokens=32)
    for family in range(3):
        pool.admit(family, 32, prompt_len=8, family=family)
        pool.finish(family)
    assert pool.snapshot().evictable_size == 24
    pool.admit(3, 16, prompt_len=16, family=3)  # 8 free: the tree gives up at least 8 more
    snap = pool.snapshot()
    assert snap.evictable_size <= 16
    assert lengths(pool, 3)[2:] == (16, 16)
    assert page_problems(pool.snapshot()) == []
    pool.finish(3)
    assert_idle_clean(pool)


def test_admission_never_evicts_the_prefix_it_matched() -> None:
    pool = make_pool(page_size=4, cache="radix", tokens=24)
    pool.admit(0, 32, prompt_len=8)
    cached = row_of(pool, 0, 8)
    pool.finish(0)
    pool.admit(1, 32, prompt_len=8, family=1)
    pool.finish(1)
    pool.admit(2, 32, prompt_len=20)  # locks family 0's 8 cached tokens, needs 12 more: evicts family 1
    assert lengths(pool, 2)[1:] == (20, 20, 20)
    assert row_of(pool, 2, 8) == cached
    assert (pool.snapshot().evictable_size, pool.snapshot().protected_size) == (0, 20)
    with pytest.raises(Refused, match="slots asked for"):
        pool.admit(3, 32, prompt_len=8, family=2)
    pool.finish(2)
    assert_idle_clean(pool)


def test_without_eviction_on_demand_only_evict_makes_room() -> None:
    pool = make_pool(page_size=4, cache="radix", tokens=16, evict_on_demand=False)
    pool.admit(0, 32, prompt_len=8)
    pool.finish(0)
    pool.admit(1, 32, prompt_len=4, family=1)
    pool.decode(1)
    before = pool.snapshot()
    with pytest.raises(Refused, match="0 evictable"):
        pool.admit(2, 32, prompt_len=8, family=2)
    assert_unchanged(before, pool.snapshot())
    pool.retract(1)  # no eviction for the requests still running either
    assert pool.snapshot().evictable_size == 12
    assert pool.evict(8) == 8
    pool.admit(2, 32, prompt_len=8, family=2)
    pool.finish(2)
    pool.abort(1)
    assert_idle_clean(pool)


def test_evict_frees_unlocked_leaves_only() -> None:
    pool = make_pool(page_size=4, cache="radix")
    pool.admit(0, 32, prompt_len=8)
    pool.admit(1, 32, prompt_len=8, family=1)
    pool.finish(1)
    assert pool.evict(100) == 8  # family 1 is free to go; family 0 is locked by request 0
    snap = pool.snapshot()
    assert (snap.evictable_size, snap.protected_size) == (0, 8)
    assert pool.evict(0) == 0
    with pytest.raises(Refused):
        pool.evict(-1)
    pool.finish(0)
    assert pool.evict(4) == 8  # a whole leaf goes
    assert_idle_clean(pool)
    assert make_pool().evict(8) == 0  # a chunk cache holds nothing


# -- speculative decoding ----------------------------------------------------------------------------------


@pytest.mark.parametrize("ps", PAGE_SIZES)
@pytest.mark.parametrize("cache", ["chunk", "radix"])
def test_speculative_over_allocation_is_page_aligned_and_freed_at_release(ps: int, cache: str) -> None:
    pool = make_pool(page_size=ps, cache=cache, speculative=True)
    pool.admit(0, 32, prompt_len=5)
    pool.spec_prepare(0, 3)
    # A = max(A, ceil_align(C + reserve)); C unchanged.
    assert lengths(pool, 0)[2:] == (5, -(-8 // ps) * ps)
    with pytest.raises(Refused, match="draft slots"):
        pool.decode(0)
    pool.spec_commit(0, 2)
    assert lengths(pool, 0)[2:] == (7, -(-8 // ps) * ps)
    assert pool.reqs[0].fill_ids[5:] == [output_token(0, 5), output_token(0, 6)]
    pool.spec_prepare(0, 1)  # C + 1 = 8 fits in what is already allocated
    assert lengths(pool, 0)[3] == -(-8 // ps) * ps
    with pytest.raises(Refused, match="do not fit"):
        pool.spec_commit(0, 9)
    assert page_problems(pool.snapshot()) == []
    pool.finish(0)  # [ceil_align(C), A) goes back as over-allocation, the tail page once
    assert_idle_clean(pool)


@pytest.mark.parametrize("ps", PAGE_SIZES)
def test_retracting_a_speculative_request_frees_the_shared_tail_page_once(ps: int) -> None:
    # No free group here (unlike a finish): without ceil_align the tail page would be listed free twice (#31616).
    pool = make_pool(page_size=ps, cache="radix", speculative=True)
    pool.admit(0, 32, prompt_len=5)
    pool.spec_prepare(0, 2)
    pool.spec_commit(0, 1)
    assert lengths(pool, 0)[2:] == (6, -(-7 // ps) * ps)
    pool.retract(0)
    assert_idle_clean(pool)


def test_finish_frees_in_one_group_and_an_ungrouped_release_in_two_calls() -> None:
    # A finish runs in the result pass's free group: its pages come back as one sorted batch at the head. The
    # PP-profiling release runs outside any group: the over-allocated pages land in front of the tail's.
    grouped, plain = (make_pool(page_size=4, speculative=True) for _ in range(2))
    for pool in (grouped, plain):
        pool.admit(0, 32, prompt_len=5)  # pages 1, 2
        pool.spec_prepare(0, 8)  # A = 16: pages 3, 4
        pool.spec_commit(0, 1)
    grouped.finish(0)
    plain.pp_release(0)
    assert grouped.allocator.free_pages[:4].tolist() == [1, 2, 3, 4]
    assert plain.allocator.free_pages[:4].tolist() == [3, 4, 1, 2]


def test_speculative_steps_are_refused_when_speculation_is_off() -> None:
    pool = make_pool()
    pool.admit(0, 4)
    with pytest.raises(Refused, match="speculative"):
        pool.spec_prepare(0, 2)
    with pytest.raises(Refused):
        pool.spec_commit(0, 1)


# -- release paths ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("ps", PAGE_SIZES)
def test_finish_inserts_the_sequence_and_unlocks(ps: int) -> None:
    pool = make_pool(page_size=ps, cache="radix")
    pool.admit(0, 32, prompt_len=9)
    pool.decode(0)
    pool.decode(0)
    assert lengths(pool, 0)[1:] == (9 - 9 % ps, 11, 11)  # decode moves C and A, not P
    pool.finish(0)
    snap = pool.snapshot()
    assert lengths(pool, 0) == (None, 9 - 9 % ps, 11, 0)
    assert not snap.records[0].tree_locked
    assert (snap.evictable_size, snap.protected_size) == (11 - 11 % ps, 0)
    assert_idle_clean(pool)


@pytest.mark.parametrize("ps", PAGE_SIZES)
@pytest.mark.parametrize("cache", ["chunk", "radix"])
def test_retract_resets_the_record_and_readmission_recomputes_the_outputs(ps: int, cache: str) -> None:
    pool = make_pool(page_size=ps, cache=cache)
    pool.admit(0, 32, prompt_len=6)
    for _ in range(3):
        pool.decode(0)
    tokens = list(pool.reqs[0].fill_ids)
    pool.retract(0)
    assert lengths(pool, 0) == (None, 0, 0, 0)
    req = pool.reqs[0]
    assert (req.status.value, req.prefix_indices.numel(), req.extend_range_end) == ("waiting", 0, 0)
    assert req.last_node is None
    assert pool.snapshot().records[0].prompt_len == 9  # the outputs so far join the prompt
    with pytest.raises(Refused):
        pool.decode(0)
    pool.extend(0, 32)  # re-admitted: prompt plus outputs, matched against the tree again
    expected_p = 9 - 9 % ps if cache == "radix" else 0
    assert lengths(pool, 0)[1:] == (expected_p, 9, 9)
    assert pool.reqs[0].fill_ids == tokens
    assert pool.reqs[0].status.value == "decoding"
    pool.decode(0)
    assert pool.reqs[0].fill_ids[9] == output_token(0, 9)
    pool.finish(0)
    assert_idle_clean(pool)


def test_retraction_readmission_reuses_the_cached_prompt() -> None:
    pool = make_pool(page_size=4, cache="radix")
    pool.admit(0, 32, prompt_len=8)
    pool.admit(1, 32, prompt_len=8)
    pool.decode(1)
    pool.retract(1)
    assert pool.peek_prefix_of(1) == 8
    pool.extend(1, 32)
    assert lengths(pool, 1)[1:] == (8, 9, 9)
    assert row_of(pool, 1, 8) == row_of(pool, 0, 8)
    pool.finish(0)
    pool.finish(1)
    assert_idle_clean(pool)


def test_retraction_evicts_room_for_the_requests_still_running() -> None:
    pool = make_pool(cache="radix", tokens=32)
    pool.admit(0, 32, prompt_len=12)
    pool.finish(0)  # 12 evictable
    pool.admit(1, 32, prompt_len=10, family=1)
    pool.admit(2, 32, prompt_len=8, family=2)
    pool.decode(2)
    assert pool.allocator.available_size() == 1
    pool.retract(2)  # one request still runs: the tree gives up RETRACT_DECODE_STEPS tokens' worth
    assert pool.allocator.available_size() >= RETRACT_DECODE_STEPS
    assert page_problems(pool.snapshot()) == []


@pytest.mark.parametrize("ps", PAGE_SIZES)
def test_abort_in_each_state(ps: int) -> None:
    pool = make_pool(page_size=ps, cache="radix", rows=4)
    pool.admit(0, 32, prompt_len=9)  # decoding: released as a normal finish (inserted)
    pool.admit(1, 5, prompt_len=20, family=1)  # mid-chunk: pending chunked abort, no insert
    pool.admit(2, 32, prompt_len=4, family=2)
    pool.retract(2)  # waiting: dropped
    before_tree = pool.snapshot().evictable_size + pool.snapshot().protected_size
    pool.abort(0)
    assert pool.snapshot().evictable_size + pool.snapshot().protected_size == before_tree
    assert pool.snapshot().protected_size == 5 - 5 % ps  # request 1 still holds its stashed chunk
    pool.abort(1)
    cached = [n - n % ps for n in (9, 5, 4)]  # each family's stashed or inserted pages; the rest was freed
    assert pool.snapshot().evictable_size == sum(cached)
    pool.abort(2)
    assert lengths(pool, 2) == (None, 0, 0, 0)
    assert {r.status for r in pool.snapshot().records.values()} == {"finished"}
    with pytest.raises(Refused, match="already finished"):
        pool.abort(0)
    assert_idle_clean(pool)


@pytest.mark.parametrize("cache", ["chunk", "radix"])
def test_pp_release_paths_agree_under_the_pr_preconditions(cache: str) -> None:
    manual, unified = make_pool(page_size=4, cache=cache), make_pool(page_size=4, cache=cache)
    for pool in (manual, unified):
        pool.admit(0, 3)  # P == 0, C == A == extend end, no lock below the root
        pool.admit(1, 2)
    manual.pp_release_manual(0)
    unified.pp_release(0)
    assert_unchanged(manual.snapshot(), unified.snapshot())


def test_manual_pp_release_frees_tree_pages_when_a_prefix_is_protected() -> None:
    pool = make_pool(page_size=4, cache="radix")
    pool.admit(0, 32, prompt_len=8)
    pool.admit(1, 4, prompt_len=12)  # protects the 8 cached tokens
    pool.pp_release_manual(1)  # frees [0, C) raw: the tree's pages too, and keeps the lock
    assert any("free" in p and "tree" in p for p in page_problems(pool.snapshot()))
    assert pool.snapshot().records[1].tree_locked


# -- flush, PD decode, dLLM --------------------------------------------------------------------------------


def test_flush_only_when_idle_then_everything_is_free() -> None:
    pool = make_pool(page_size=4, cache="radix")
    pool.admit(0, 32, prompt_len=8)
    pool.decode(0)
    pool.admit(1, 32, prompt_len=4)
    pool.retract(1)
    with pytest.raises(Refused, match="idle"):
        pool.flush()
    pool.finish(0)
    with pytest.raises(Refused, match=r"\[1\]"):  # a waiting request keeps the pool busy
        pool.flush()
    pool.abort(1)
    assert pool.snapshot().evictable_size == 8
    generations = pool.snapshot().row_generation
    pool.flush()
    snap = pool.snapshot()
    assert snap.tree_slots.numel() == 0 and snap.evictable_size == 0
    assert sorted(snap.free_slots.tolist()) == list(range(1, snap.num_pages + 1))
    assert snap.row_generation == generations and sum(generations) == 2  # they only grow (0.5.23 keeps them)
    assert_idle_clean(pool)


@pytest.mark.parametrize("ps", PAGE_SIZES)
def test_pd_prealloc_then_decode_and_finish_on_the_decode_row_pool(ps: int) -> None:
    pool = make_pool(page_size=ps, cache="radix", row_pool="decode", rows=2, pre_alloc_size=2)
    assert pool.snapshot().rows_total == 4
    rows = [pool.pd_prealloc(rid, 6 + rid) for rid in range(4)]
    assert rows == [1, 2, 3, 4]  # head pop: FIFO
    assert lengths(pool, 3) == (4, 0, 9, 9)
    with pytest.raises(Refused, match="no free row"):
        pool.pd_prealloc(9, 1)
    pool.decode(0)
    assert lengths(pool, 0) == (1, 0, 7, 7)
    pool.finish(0)
    with pytest.raises(Refused, match="reused row must carry allocated KV"):
        pool.reuse_released(0, 1, 1)  # the same reuse assert as ReqToTokenPool
    pool.finish(2)
    assert pool.pd_prealloc(5, 4) == 1  # the row freed first comes back first
    for rid in (1, 3, 5):
        pool.abort(rid)
    assert_idle_clean(pool)


@pytest.mark.parametrize("ps", PAGE_SIZES)
def test_offload_release_frees_prompt_decode_and_draft_ranges_then_returns_early_on_none_and_sentinel(ps: int) -> None:
    pool = make_pool(page_size=ps, cache="radix", speculative=True, row_pool="decode", rows=2, pre_alloc_size=1)
    pool.pd_prealloc(0, 6)
    pool.decode(0)
    pool.spec_prepare(0, 3)  # A = ceil_align(7 + 3): draft slots past the committed length
    row, protected_len, committed_len, allocated_len = lengths(pool, 0)
    assert (protected_len, committed_len) == (0, 7) and allocated_len > committed_len
    pool.offload_release(0)
    assert lengths(pool, 0) == (None, 0, 7, 0)
    assert pool.reqs[0].status.value == "finished"
    assert row in pool.req_to_token_pool.free_slots
    for sentinel in (0, 1):  # released (None), then carrying -1: both return early and change nothing
        before = pool.snapshot()
        with pytest.raises(Refused, match=f"req_pool_idx is {'-1' if sentinel else 'None'}; .* returns early"):
            pool.offload_release(0, sentinel)
        assert_unchanged(before, pool.snapshot())
    assert_idle_clean(pool)


def test_offload_release_leaves_the_pool_as_release_kv_cache_without_insert() -> None:
    pools = [make_pool(page_size=4, cache="radix") for _ in range(2)]
    for pool in pools:
        pool.pd_prealloc(0, 9)
        pool.decode(0)
    pools[0].offload_release(0)
    pools[1].pp_release(0)  # release_kv_cache(req, tree, is_insert=False)
    offloaded, released = (p.snapshot() for p in pools)
    assert offloaded.records == released.records
    assert sorted(offloaded.free_slots.tolist()) == sorted(released.free_slots.tolist())
    assert (offloaded.free_rows, offloaded.protected_size) == (released.free_rows, released.protected_size)


def test_offload_release_refuses_a_request_still_in_prefill_or_a_sentinel_on_a_held_row() -> None:
    pool = make_pool()
    pool.admit(0, 2, prompt_len=4)
    pool.pd_prealloc(1, 3)
    with pytest.raises(Refused, match="is running; the offload manager releases finished requests"):
        pool.offload_release(0)
    with pytest.raises(Refused, match="holds a row; only a record without one carries the sentinel"):
        pool.offload_release(1, sentinel=1)
    with pytest.raises(Refused, match="sentinel must be 0 or 1"):
        pool.offload_release(1, sentinel=2)


@pytest.mark.parametrize("cache", ["chunk", "radix"])
def test_dllm_stash_frees_the_row_but_not_the_record_then_reuses_a_fresh_row(cache: str) -> None:
    pool = make_pool(page_size=4, cache=cache)
    row = pool.admit(0, 6)
    pool.dllm_stash(0)
    # The 0.5.19 hazard: no row, yet A > 0 (release's entry sentinel refuses it).
    assert lengths(pool, 0)[0] is None and lengths(pool, 0)[3] == 6
    assert row in pool.req_to_token_pool.free_slots
    with pytest.raises(Refused, match="holds_kv disagrees"):
        pool.release_again(0)
    with pytest.raises(Refused, match="holds no row"):
        pool.decode(0)
    pool.admit(1, 2)  # takes the freed row
    new_row = pool.extend(0, 4)  # the next block: a fresh row, the stashed prefix written back
    assert new_row != pool.reqs[1].kv.req_pool_idx
    assert row_of(pool, 0, 6) == pool.reqs[0].prefix_indices[:6].tolist()
    assert lengths(pool, 0)[2:] == (10, 10)
    assert page_problems(pool.snapshot()) == []
    pool.finish(0)
    pool.finish(1)
    assert_idle_clean(pool)


def test_dllm_abort_between_blocks_skips_the_release_and_leaks() -> None:
    pool = make_pool(page_size=4, cache="radix")
    pool.admit(0, 6)
    pool.dllm_stash(0)
    pool.abort(0)  # the dLLM abort path releases only a record that holds a row
    snap = pool.snapshot()
    assert snap.records[0].status == "finished" and snap.records[0].allocated_len == 6
    assert snap.records[0].tree_locked and snap.protected_size == 4
    assert any("nobody" in p for p in page_problems(pool.snapshot()))  # the own tail page has no holder


# -- refusals change nothing -------------------------------------------------------------------------------


def _decoding(pool: ReferencePool) -> None:
    pool.admit(0, 32, prompt_len=7)
    pool.decode(0)


REFUSED: dict[str, tuple[Callable[[ReferencePool], object], Callable[[ReferencePool], object]]] = {
    "admit-twice": (_decoding, lambda p: p.admit(0, 1)),
    "prompt-past-width": (_decoding, lambda p: p.admit(1, 1, prompt_len=33)),
    "negative-family": (_decoding, lambda p: p.admit(1, 1, family=-1)),
    "no-slots-even-after-eviction": (_decoding, lambda p: p.admit(1, 32, prompt_len=30, family=1)),
    "extend-decoding": (_decoding, lambda p: p.extend(0, 1)),
    "finish-twice": (lambda p: (_decoding(p), p.finish(0)), lambda p: p.finish(0)),
    "retract-waiting": (lambda p: (_decoding(p), p.retract(0)), lambda p: p.retract(0)),
    "release-twice": (lambda p: (_decoding(p), p.finish(0)), lambda p: p.release_again(0)),
    "free-row-twice": (lambda p: (_decoding(p), p.finish(0)), lambda p: p.free_row(0)),
    "reuse-released": (lambda p: (_decoding(p), p.finish(0)), lambda p: p.reuse_released(0, 4, 1)),
    "decode-past-width": (lambda p: p.admit(0, 32, prompt_len=32), lambda p: p.decode(0)),
    "spec-past-width": (_decoding, lambda p: p.spec_prepare(0, 30)),
    "commit-without-reserve": (_decoding, lambda p: p.spec_commit(0, 1)),
    "flush-busy": (_decoding, lambda p: p.flush()),
    "pd-prealloc-existing": (_decoding, lambda p: p.pd_prealloc(0, 4)),
    "pd-prealloc-no-slots": (_decoding, lambda p: p.pd_prealloc(1, 30)),
    "dllm-stash-decoding": (_decoding, lambda p: p.dllm_stash(0)),
    "abort-unknown": (_decoding, lambda p: p.abort(7)),
}


@pytest.mark.parametrize("ps", PAGE_SIZES)
@pytest.mark.parametrize("name", sorted(REFUSED))
def test_refused_calls_change_nothing(name: str, ps: int) -> None:
    pool = make_pool(page_size=ps, cache="radix", speculative=True, tokens=32)
    pool.admit(5, 32, prompt_len=9, family=1)  # something cached, to see that refusals do not evict it
    pool.finish(5)
    setup, call = REFUSED[name]
    setup(pool)
    before = pool.snapshot()
    with pytest.raises(Refused):
        call(pool)
    assert_unchanged(before, pool.snapshot())


def tree_nodes(pool: ReferencePool) -> list[tuple[int, int, int]]:
    """(node id, key length, last access) of every tree node, parents first."""
    assert pool.tree is not None
    out, stack = [], list(pool.tree.root.children.values())
    while stack:
        node = stack.pop()
        out.append((node.node_id, len(node.key), node.last_access))
        stack.extend(node.children.values())
    return out


def test_a_refused_admission_does_not_split_or_touch_the_tree() -> None:
    pool = make_pool(page_size=4, cache="radix", tokens=36)
    pool.admit(0, 32, prompt_len=12)
    for _ in range(4):
        pool.decode(0)
    pool.finish(0)  # one node of 16 tokens: the prompt and 4 outputs
    pool.admit(1, 32, prompt_len=16, family=1)  # 4 of 9 pages left free
    nodes_before = tree_nodes(pool)
    with pytest.raises(Refused, match="slots asked for"):
        pool.admit(2, 32, prompt_len=24)  # would match 12 of the node's 16 tokens (a split), then lack slots
    assert tree_nodes(pool) == nodes_before


# -- allocator variants ------------------------------------------------------------------------------------


def _mixed_run(pool: ReferencePool) -> None:
    pool.admit(0, 6, prompt_len=14)
    pool.admit(1, 32, prompt_len=9)
    pool.extend(0, 32)
    for _ in range(5):
        pool.decode(1)
    pool.spec_prepare(0, 5)
    pool.spec_commit(0, 3)
    pool.finish(1)
    pool.retract(0)
    pool.extend(0, 32)


@pytest.mark.parametrize("backend", ["oracle", "triton"])
def test_kernel_backends_hand_out_the_same_slots_as_torch(backend: str) -> None:
    config = {"page_size": 4, "cache": "radix", "speculative": True}
    reference, other = make_pool(**config), make_pool(**config, kernel_backend=backend)
    for pool in (reference, other):
        _mixed_run(pool)
    assert_unchanged(reference.snapshot(), other.snapshot())


@pytest.mark.parametrize("ps", PAGE_SIZES)
def test_need_sort_defers_frees_and_merges_when_short(ps: int) -> None:
    pool = make_pool(page_size=ps, need_sort=True, tokens=16)
    pool.admit(0, 8)
    pool.admit(1, 8)
    pool.finish(0)
    snap = pool.snapshot()
    assert snap.free_slots.numel() == 0 and snap.release_slots.numel() == 8 // ps
    pool.admit(2, 4)  # the head is empty: released pages are merged, sorted, then taken
    assert pool.snapshot().release_slots.numel() == 0
    assert page_problems(pool.snapshot()) == []
    pool.finish(1)
    pool.finish(2)
    assert_idle_clean(pool)


def test_every_supported_page_size_builds_and_runs() -> None:
    for ps in (1, 2, 4, 8, 16, 32, 64):
        pool = make_pool(page_size=ps, cache="radix", tokens=256, width=64)
        pool.admit(0, 64, prompt_len=40)
        pool.decode(0)
        pool.finish(0)
        assert_idle_clean(pool)


def compare_cuda_with_cpu(backend: str) -> None:
    """The mixed run on CUDA with `backend` hands out exactly the slots the CPU torch path does."""
    config = {"page_size": 4, "cache": "radix", "speculative": True}
    cpu, cuda = make_pool(**config), make_pool(**config, device="cuda", kernel_backend=backend)
    for pool in (cpu, cuda):
        _mixed_run(pool)
    a, b = cpu.snapshot(), cuda.snapshot()
    assert a.records == b.records
    for name in ("free_slots", "release_slots", "tree_slots", "req_to_token"):
        assert torch.equal(getattr(a, name), getattr(b, name).cpu()), name


@pytest.mark.gpu
@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_the_same_run_on_cuda_matches_cpu(backend: str) -> None:
    # This process may already hold interpreted kernels, so the compiled ones run in a fresh one.
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    script = (
        f"import sys; sys.path[:0] = [{str(REPO_ROOT)!r}, {str(Path(__file__).parent)!r}]; "
        f"import test_flows; test_flows.compare_cuda_with_cpu({backend!r})"
    )
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
