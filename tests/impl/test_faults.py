"""Fault switches are off by default (proven here), and each one changes behaviour at its named site.

Every in-scope switch has a direct test below that runs the same few calls on a clean pool and on one with the
switch on, and shows the difference the bug makes where its site acts.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest
import torch

from impl.engine import ReferencePool
from impl.fault_points import FaultPlan
from impl.faults import FAULTS, NO_FAULTS, PATTERNS, FaultSet, UnknownFault
from impl.target import PoolConfig, Refused

IMPL = Path(__file__).resolve().parents[2] / "impl"
CHUNK = PoolConfig()
RADIX = PoolConfig(page_size=4, cache="radix")
SPECULATIVE = PoolConfig(page_size=4, cache="radix", speculative=True)


def _pools(config: PoolConfig, fault: str) -> tuple[ReferencePool, ReferencePool]:
    """A clean pool and one with `fault` on, same config."""
    return ReferencePool(config), ReferencePool(config, FaultSet.of([fault]))


def _free_list(pool: ReferencePool) -> list[int]:
    return torch.cat((pool.allocator.free_pages, pool.allocator.release_pages)).tolist()


def _has_duplicates(values: list[int]) -> bool:
    return len(values) != len(set(values))


# -- the registry ----------------------------------------------------------------------------------------------


def test_every_switch_is_off_by_default() -> None:
    pool = ReferencePool(PoolConfig())
    assert pool.faults == NO_FAULTS
    assert pool.req_to_token_pool.faults == pool.cache.faults == NO_FAULTS
    assert not any(pool.faults.on(name) for name in FAULTS)


def test_every_registered_fault_names_its_site_and_origin() -> None:
    for fault in PATTERNS.values():
        assert fault.site and fault.mechanism and fault.origin


def test_every_historical_pattern_is_registered_in_or_out_of_scope() -> None:
    # Section 8's thirty patterns, PR #37167's three, 0.5.18's generation reset and the failed allocation's kept
    # rows; none is dropped silently.
    assert len(PATTERNS) == 35
    assert set(FAULTS) == {name for name, f in PATTERNS.items() if f.in_scope}
    for fault in PATTERNS.values():
        assert bool(fault.out_of_scope) != fault.in_scope, fault.name


def test_unknown_fault_names_are_refused() -> None:
    with pytest.raises(UnknownFault, match="no_such_fault"):
        FaultSet.of(["no_such_fault"])


def test_an_out_of_scope_pattern_is_refused_with_its_reason() -> None:
    with pytest.raises(UnknownFault, match="mamba_slot_leak_on_reject is out of scope: needs mamba slots"):
        FaultSet.of(["mamba_slot_leak_on_reject"])


def test_each_switch_acts_at_one_place_in_the_pool() -> None:
    sites = Counter(name for path in IMPL.glob("*.py") for name in re.findall(r'\.on\("(\w+)"\)', path.read_text()))
    assert sites == Counter(list(FAULTS))


def test_each_switch_has_a_direct_test() -> None:
    tests = [name for name in globals() if name.startswith("test_")]
    assert [f for f in FAULTS if not any(f in t for t in tests)] == []


# -- PR #37167 ---------------------------------------------------------------------------------------------------


def _released_then_reused(faults: FaultSet) -> ReferencePool:
    pool = ReferencePool(PoolConfig(), faults)
    pool.admit(0, 4)
    pool.finish(0)
    pool.reuse_released(0, stale_row=4, extend_len=1)
    return pool


def test_reuse_guard_refuses_a_stale_record_without_the_fault() -> None:
    with pytest.raises(Refused, match="reused row must carry allocated KV"):
        _released_then_reused(NO_FAULTS)


def test_legacy_reuse_guard_lets_the_stale_record_through() -> None:
    pool = _released_then_reused(FaultSet.of(["legacy_reuse_guard"]))
    assert pool.reqs[0].kv.req_pool_idx == 4
    assert 4 in pool.req_to_token_pool.free_slots  # the row it "reuses" is free


def test_pp_manual_release_frees_only_up_to_the_profiling_extend() -> None:
    clean, faulty = _pools(CHUNK, "pp_manual_release")
    for pool in (clean, faulty):
        pool.admit(0, 1, prompt_len=1)
        pool.decode(0)  # kv_committed_len 2, extend_range.end still 1
        pool.pp_release(0)
    assert clean.allocator.available_size() == 64
    assert faulty.allocator.available_size() == 63  # the decoded slot leaks


def test_pp_manual_release_keeps_the_tree_lock() -> None:
    clean, faulty = _pools(RADIX, "pp_manual_release")
    for pool in (clean, faulty):
        pool.admit(0, 5, prompt_len=5)
        pool.pp_release(0)
    assert clean.snapshot().protected_size == 0
    assert faulty.snapshot().protected_size == 4


@pytest.mark.parametrize("path", ["finish", "pp_release"])
def test_raw_row_free_leaves_req_pool_idx_set(path: str) -> None:
    clean, faulty = _pools(CHUNK, "raw_row_free")
    for pool in (clean, faulty):
        pool.admit(0, 4)
        getattr(pool, path)(0)
    assert clean.reqs[0].kv.req_pool_idx is None
    assert faulty.reqs[0].kv.req_pool_idx == 4
    assert faulty.reqs[0].kv.kv_allocated_len == 0
    assert sorted(faulty.req_to_token_pool.free_slots) == sorted(clean.req_to_token_pool.free_slots)


@pytest.mark.parametrize("config", [CHUNK, RADIX], ids=["chunk", "radix"])
def test_offload_presence_guard_releases_a_record_carrying_the_sentinel_again(config: PoolConfig) -> None:
    clean, faulty = _pools(config, "offload_presence_guard")
    for pool in (clean, faulty):
        pool.admit(0, 5, prompt_len=5)
        pool.finish(0)
        pool.admit(1, 3, prompt_len=3)
    with pytest.raises(Refused, match="req_pool_idx is -1; the offload release returns early"):
        clean.offload_release(0, sentinel=1)
    protected_before = faulty.snapshot().protected_size
    free_before = _free_list(faulty)
    faulty.offload_release(0, sentinel=1)
    assert -1 in faulty.req_to_token_pool.free_slots  # the sentinel went back as a row
    assert len(_free_list(faulty)) > len(free_before)  # the row read through -1 had its slots freed again
    decremented = faulty.reqs[0].kv.cache_protected_len if config.cache == "radix" else 0
    assert decremented == (4 if config.cache == "radix" else 0)
    assert faulty.snapshot().protected_size == protected_before - decremented  # a second decrement with a tree
    assert clean.reqs[0].kv.req_pool_idx is None and -1 not in clean.req_to_token_pool.free_slots


def test_manual_release_skips_mark_leaves_the_allocated_length() -> None:
    clean, faulty = _pools(CHUNK, "manual_release_skips_mark")
    for pool in (clean, faulty):
        pool.admit(0, 2, prompt_len=2)
        pool.pp_release_manual(0)
    assert clean.reqs[0].kv.kv_allocated_len == 0
    assert faulty.reqs[0].kv.kv_allocated_len == 2
    assert not faulty.reqs[0].kv.holds_kv
    assert faulty.allocator.available_size() == clean.allocator.available_size() == 64


# -- section 8 -----------------------------------------------------------------------------------------------------


def test_chunk_row_free_between_chunks_runs_the_chunked_request_rowless() -> None:
    clean, faulty = _pools(CHUNK, "chunk_row_free_between_chunks")
    for pool in (clean, faulty):
        pool.admit(0, 1, prompt_len=3)
    assert clean.reqs[0].kv.req_pool_idx == 4
    assert faulty.reqs[0].kv.req_pool_idx is None
    assert faulty.reqs[0].kv.kv_allocated_len == 1
    assert 4 in faulty.req_to_token_pool.free_slots
    assert faulty.extend(0, 1) == 4  # the next chunk takes a row again
    assert faulty.reqs[0].kv.req_pool_idx is None  # and gives it back at its stash


def test_release_len_from_token_counts_frees_the_last_decode_slot_twice() -> None:
    clean, faulty = _pools(CHUNK, "release_len_from_token_counts")
    for pool in (clean, faulty):
        pool.admit(0, 1, prompt_len=1)
        pool.decode(0)
        pool.finish(0)
    assert not _has_duplicates(_free_list(clean))
    assert _has_duplicates(_free_list(faulty))


def test_release_len_from_token_counts_changes_nothing_before_a_decode() -> None:
    clean, faulty = _pools(CHUNK, "release_len_from_token_counts")
    for pool in (clean, faulty):
        pool.admit(0, 2, prompt_len=2)
        pool.finish(0)
    assert _free_list(faulty) == _free_list(clean)


def test_finish_skips_row_free_in_the_prefill_result_only() -> None:
    clean, faulty = _pools(CHUNK, "finish_skips_row_free")
    for pool in (clean, faulty):
        pool.admit(0, 2, prompt_len=2)
        pool.finish(0)
        pool.admit(1, 2, prompt_len=2)
        pool.decode(1)
        pool.finish(1)
    assert clean.reqs[0].kv.req_pool_idx is None
    assert faulty.reqs[0].kv.req_pool_idx == 4
    assert 4 not in faulty.req_to_token_pool.free_slots
    assert faulty.reqs[1].kv.req_pool_idx is None  # a request that decoded releases its row


def test_preempt_finished_double_free_reaches_the_release_sentinel() -> None:
    clean, faulty = _pools(CHUNK, "preempt_finished_double_free")
    for pool in (clean, faulty):
        pool.admit(0, 2, prompt_len=2)
        pool.finish(0)
    with pytest.raises(Refused, match="not running"):
        clean.retract(0)
    with pytest.raises(Refused, match="holds no KV to release"):
        faulty.retract(0)


def test_unaligned_spec_alloc_len_records_a_partial_page() -> None:
    clean, faulty = _pools(SPECULATIVE, "unaligned_spec_alloc_len")
    for pool in (clean, faulty):
        pool.admit(0, 1, prompt_len=1)
        pool.spec_prepare(0, 2)
    assert clean.reqs[0].kv.kv_allocated_len == 4
    assert faulty.reqs[0].kv.kv_allocated_len == 3
    assert faulty.allocator.available_size() == clean.allocator.available_size() == 60


def test_skip_overalloc_free_on_finish_leaks_the_draft_pages() -> None:
    clean, faulty = _pools(SPECULATIVE, "skip_overalloc_free_on_finish")
    for pool in (clean, faulty):
        pool.admit(0, 1, prompt_len=1)
        pool.spec_prepare(0, 5)  # A = 8: a second page of drafts
        pool.finish(0)
    assert clean.allocator.available_size() == 64
    assert faulty.allocator.available_size() == 60


def test_chunk_cache_skip_stash_restarts_the_next_chunk_at_zero() -> None:
    clean, faulty = _pools(CHUNK, "chunk_cache_skip_stash")
    for pool in (clean, faulty):
        pool.admit(0, 1, prompt_len=3)
    assert clean.reqs[0].prefix_indices.numel() == 1
    assert faulty.reqs[0].prefix_indices.numel() == 0
    for pool in (clean, faulty):
        pool.extend(0, 1)
    assert clean.reqs[0].kv.kv_committed_len == 2
    assert faulty.reqs[0].kv.kv_committed_len == 1
    assert faulty.allocator.available_size() == 62  # the first chunk's slot is lost


def test_double_lock_on_chunk_retry_leaves_the_prefix_locked() -> None:
    clean, faulty = _pools(RADIX, "double_lock_on_chunk_retry")
    for pool in (clean, faulty):
        pool.admit(0, 9, prompt_len=9)
        pool.finish(0)  # 8 tokens cached, unlocked
        pool.admit(1, 9, prompt_len=9)  # matches them
        pool.finish(1)
    assert clean.snapshot().protected_size == 0
    assert faulty.snapshot().protected_size == 8


def test_chunk_rematch_lock_leak_locks_the_stashed_prefix_again() -> None:
    clean, faulty = _pools(RADIX, "chunk_rematch_lock_leak")
    for pool in (clean, faulty):
        pool.admit(0, 4, prompt_len=12)
        pool.extend(0, 4)
        pool.abort(0)
    assert clean.snapshot().protected_size == 0
    assert faulty.snapshot().protected_size == 4


def test_overalloc_free_unaligned_start_frees_the_boundary_page_twice() -> None:
    clean, faulty = _pools(SPECULATIVE, "overalloc_free_unaligned_start")
    for pool in (clean, faulty):
        pool.admit(0, 1, prompt_len=1)
        pool.spec_prepare(0, 2)  # C = 1, A = 4: tail and drafts on one page
        pool.retract(0)
    assert not _has_duplicates(_free_list(clean))
    assert _has_duplicates(_free_list(faulty))


def test_radix_counter_double_add_counts_the_shared_prefix_twice() -> None:
    clean, faulty = _pools(RADIX, "radix_counter_double_add")
    for pool in (clean, faulty):
        pool.admit(0, 4, prompt_len=12)
        pool.extend(0, 4)  # inserts 8 tokens, 4 of them cached already
    snap = clean.snapshot()
    assert (snap.evictable_size + snap.protected_size, snap.evictable_recount + snap.protected_recount) == (8, 8)
    snap = faulty.snapshot()
    assert (snap.evictable_size + snap.protected_size, snap.evictable_recount + snap.protected_recount) == (12, 8)


def test_stale_last_node_after_reset_keeps_the_handle() -> None:
    clean, faulty = _pools(RADIX, "stale_last_node_after_reset")
    for pool in (clean, faulty):
        pool.admit(0, 5, prompt_len=5)
        pool.finish(0)
    assert clean.reqs[0].last_node is None
    assert faulty.reqs[0].last_node is not None
    faulty.flush()
    assert faulty.reqs[0].last_node is not None  # it outlives the tree it points into
    assert faulty.snapshot().records[0].tree_locked


def test_clear_zeroes_generations_repeats_a_row_generation_pair() -> None:
    clean, faulty = _pools(CHUNK, "clear_zeroes_generations")
    for pool in (clean, faulty):
        pool.admit(0, 4, prompt_len=4)
        pool.finish(0)
        pool.flush()
    assert clean.snapshot().row_generation[4] == 1  # monotonic across the flush
    assert faulty.snapshot().row_generation == [0] * 5
    faulty.admit(1, 4, prompt_len=4)  # row 4 again, generation 1 again: request 0's pair
    assert (faulty.snapshot().records[1].row, faulty.snapshot().row_generation[4]) == (4, 1)


def test_skip_continuing_chunk_count_ends_prefill_early() -> None:
    clean, faulty = _pools(CHUNK, "skip_continuing_chunk_count")
    for pool in (clean, faulty):
        pool.admit(0, 1, prompt_len=3)
        pool.extend(0, 1)  # a middle chunk of a request that kept its row
    assert clean.reqs[0].status.value == "running"
    assert faulty.reqs[0].status.value == "decoding"
    assert faulty.reqs[0].kv.kv_committed_len == 2  # of a 3-token prompt


def test_drop_chunked_without_release_keeps_row_and_slots() -> None:
    clean, faulty = _pools(CHUNK, "drop_chunked_without_release")
    for pool in (clean, faulty):
        pool.admit(0, 1, prompt_len=3)
        pool.abort(0)
    assert clean.reqs[0].kv.req_pool_idx is None
    assert clean.allocator.available_size() == 64
    assert faulty.reqs[0].status.value == "finished"
    assert faulty.reqs[0].kv.req_pool_idx == 4
    assert faulty.allocator.available_size() == 63


def test_double_free_within_group_lists_the_last_slot_twice() -> None:
    clean, faulty = _pools(CHUNK, "double_free_within_group")
    for pool in (clean, faulty):
        pool.admit(0, 2, prompt_len=2)
        pool.finish(0)
    assert not _has_duplicates(_free_list(clean))
    assert _has_duplicates(_free_list(faulty))


def test_release_order_row_first_breaks_the_over_allocation_free() -> None:
    clean, faulty = _pools(SPECULATIVE, "release_order_row_first")
    for pool in (clean, faulty):
        pool.admit(0, 1, prompt_len=1)
        pool.spec_prepare(0, 5)
    clean.finish(0)
    with pytest.raises(AssertionError) as crash:  # the row lookup's own assert, not a contract refusal
        faulty.finish(0)
    assert type(crash.value) is AssertionError


def test_release_order_row_first_changes_nothing_without_over_allocation() -> None:
    clean, faulty = _pools(SPECULATIVE, "release_order_row_first")
    for pool in (clean, faulty):
        pool.admit(0, 5, prompt_len=5)
        pool.finish(0)
    assert _free_list(faulty) == _free_list(clean)
    assert faulty.reqs[0].kv.req_pool_idx is None


def test_lock_walk_off_by_one_leaves_the_handle_node_unlocked() -> None:
    clean, faulty = _pools(RADIX, "lock_walk_off_by_one")
    for pool in (clean, faulty):
        pool.admit(0, 5, prompt_len=5)
    assert clean.reqs[0].last_node.lock_ref == 1  # type: ignore[union-attr]
    assert faulty.reqs[0].last_node.lock_ref == 0  # type: ignore[union-attr]
    assert faulty.evict(4) == 4  # evicted while the request reads it
    with pytest.raises(Refused):
        faulty.finish(0)


# -- failures from inside a call ---------------------------------------------------------------------------------


def test_failed_alloc_keeps_rows_leaves_the_row_a_failed_extend_took() -> None:
    clean, faulty = _pools(CHUNK, "failed_alloc_keeps_rows")
    for pool in (clean, faulty):
        with pool.fault_points.armed(FaultPlan("kv_alloc")), pytest.raises(Refused):
            pool.admit(0, 4, prompt_len=4)
    assert clean.req_to_token_pool.available_size() == 4  # the row went back
    assert faulty.req_to_token_pool.available_size() == 3  # kept by a call that failed
