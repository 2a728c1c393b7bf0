"""`RadixCache`: tree operations, lock and size accounting, request lifecycles through `release_kv_cache`."""

from __future__ import annotations

import pytest
import torch
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from impl.allocator import BaseTokenToKVPoolAllocator, TokenToKVPoolAllocator
from impl.radix_cache import RadixCache, TreeNode
from impl.records import Req
from impl.release import release_kv_cache
from impl.req_pool import ContractViolation, ReqToTokenPool

ROWS = 4
WIDTH = 32


class FakePagedAllocator(BaseTokenToKVPoolAllocator):
    """Whole pages only (page 0 is padding): alloc hands out whole pages, freeing any slot frees its page."""

    def __init__(self, size: int, page_size: int):
        super().__init__(size, page_size)

    def clear(self) -> None:
        self.free_pages = torch.arange(1, self.size // self.page_size + 1, dtype=torch.int64)
        self.release_pages = self._empty()
        self.free_group = None

    def alloc(self, need_size: int) -> torch.Tensor | None:
        assert need_size % self.page_size == 0, "the fake hands out whole pages only"
        num_pages = need_size // self.page_size
        if num_pages > len(self.free_pages):
            return None
        pages, self.free_pages = self.free_pages[:num_pages], self.free_pages[num_pages:]
        return (pages[:, None] * self.page_size + torch.arange(self.page_size)).flatten()

    def free(self, indices: torch.Tensor) -> None:
        pages = torch.unique(indices // self.page_size)
        # A page freed while already free is a double free; the real allocators would not notice.
        assert not torch.isin(pages, self.free_pages).any(), f"pages freed twice: {pages.tolist()}"
        self.free_pages = torch.cat((self.free_pages, pages))


def make_cache(tokens: int = 64, page_size: int = 1) -> RadixCache:
    pool = ReqToTokenPool(ROWS, WIDTH)
    allocator = TokenToKVPoolAllocator(tokens) if page_size == 1 else FakePagedAllocator(tokens, page_size)
    return RadixCache(pool, allocator, page_size)


def free_slot_ids(cache: RadixCache) -> list[int]:
    pages = cache.allocator.free_pages
    ps = cache.page_size
    return (pages[:, None] * ps + torch.arange(ps)).flatten().tolist()


def cache_key(cache: RadixCache, key: list[int]) -> torch.Tensor:
    """Insert `key` with fresh slots, as a finished request would; duplicates go back. Returns its slots."""
    slots = alloc_slots(cache, len(key))
    prefix_len = cache.insert(key, slots)
    cache.allocator.free(slots[:prefix_len])
    indices, _ = cache.match_prefix(key)
    return indices


def alloc_slots(cache: RadixCache, num_tokens: int) -> torch.Tensor:
    """`num_tokens` fresh slots, evicting the shortfall first as the allocation paths do."""
    shortfall = num_tokens - cache.allocator.available_size()
    if shortfall > 0:
        cache.evict(shortfall)
    allocator = cache.allocator
    assert isinstance(allocator, TokenToKVPoolAllocator | FakePagedAllocator)
    out = allocator.alloc(num_tokens)
    assert out is not None, f"{num_tokens} slots do not fit even after eviction"
    return out


def assert_counters(cache: RadixCache) -> None:
    assert (cache.evictable_size(), cache.protected_size()) == cache.recount_sizes()


def assert_idle_clean(cache: RadixCache) -> None:
    """Nothing running: every cached token evictable, none protected, and every slot free or cached, once."""
    assert_counters(cache)
    owned = cache.owned_slots().tolist()
    free = free_slot_ids(cache)
    assert cache.protected_size() == 0
    assert cache.evictable_size() == len(owned)
    assert len(set(owned)) == len(owned)
    assert not set(owned) & set(free)
    assert len(owned) + len(free) == cache.allocator.size
    assert cache.req_to_token_pool.available_size() == ROWS


def child(node: TreeNode, *first_page: int) -> TreeNode:
    return node.children[tuple(first_page)]


# -- the tree -----------------------------------------------------------------------------------------------


def test_insert_then_match_returns_the_inserted_slots() -> None:
    cache = make_cache()
    slots = alloc_slots(cache, 4)
    assert cache.insert([1, 2, 3, 4], slots) == 0
    indices, node = cache.match_prefix([1, 2, 3, 4, 5])
    assert indices.tolist() == slots.tolist()
    assert node.key == [1, 2, 3, 4]
    assert cache.evictable_size() == 4
    assert cache.insert([1, 2, 3, 4], slots) == 4
    assert cache.evictable_size() == 4


def test_insert_splits_on_partial_match_and_reports_the_cached_prefix() -> None:
    cache = make_cache()
    first = cache_key(cache, [1, 2, 3, 4])
    slots = alloc_slots(cache, 4)
    assert cache.insert([1, 2, 7, 8], slots) == 2
    upper = child(cache.root, 1)
    assert upper.key == [1, 2]
    assert sorted(upper.children) == [(3,), (7,)]
    assert child(upper, 3).value.tolist() == first[2:].tolist()
    assert child(upper, 7).value.tolist() == slots[2:].tolist()
    assert cache.evictable_size() == 6
    assert_counters(cache)


def test_match_splits_a_node_so_the_returned_node_ends_at_the_match() -> None:
    cache = make_cache()
    slots = cache_key(cache, [1, 2, 3, 4])
    indices, node = cache.match_prefix([1, 2, 9])
    assert indices.tolist() == slots[:2].tolist()
    assert node.key == [1, 2]
    assert child(node, 3).key == [3, 4]
    assert_counters(cache)


def test_match_caps_at_max_prefix_len() -> None:
    cache = make_cache()
    cache_key(cache, [1, 2, 3])
    assert cache.match_prefix([1, 2, 3], max_prefix_len=2)[0].numel() == 2
    assert cache.match_prefix([1, 2, 3], max_prefix_len=0)[1] is cache.root


def test_keys_are_cut_to_whole_pages() -> None:
    cache = make_cache(page_size=4)
    slots = alloc_slots(cache, 8)
    assert cache.insert([1, 2, 3, 4, 5, 6], slots[:6]) == 0
    assert cache.evictable_size() == 4
    indices, _ = cache.match_prefix([1, 2, 3, 4, 5, 6, 7, 8])
    assert indices.tolist() == slots[:4].tolist()
    # A key that differs inside the second page matches only the first page.
    assert cache.match_prefix([1, 2, 3, 9])[0].numel() == 0


def test_lock_moves_sizes_only_at_the_first_and_last_lock() -> None:
    cache = make_cache()
    cache_key(cache, [1, 2, 3])
    _, node = cache.match_prefix([1, 2, 3])
    cache.inc_lock_ref(node)
    cache.inc_lock_ref(node)
    assert (cache.evictable_size(), cache.protected_size()) == (0, 3)
    cache.dec_lock_ref(node)
    assert (cache.evictable_size(), cache.protected_size()) == (0, 3)
    cache.dec_lock_ref(node)
    assert (cache.evictable_size(), cache.protected_size()) == (3, 0)
    assert cache.root.lock_ref == 1


def test_split_of_a_locked_node_copies_its_lock_to_the_new_parent() -> None:
    cache = make_cache()
    cache_key(cache, [1, 2, 3, 4])
    _, leaf = cache.match_prefix([1, 2, 3, 4])
    cache.inc_lock_ref(leaf)
    cache_key(cache, [1, 2, 7, 8])
    upper = child(cache.root, 1)
    assert upper.lock_ref == 1 and leaf.lock_ref == 1 and child(upper, 7).lock_ref == 0
    assert (cache.evictable_size(), cache.protected_size()) == (2, 4)
    assert_counters(cache)
    cache.dec_lock_ref(leaf)
    assert (cache.evictable_size(), cache.protected_size()) == (6, 0)


def test_unlock_without_a_lock_is_refused_and_changes_nothing() -> None:
    cache = make_cache()
    cache_key(cache, [1, 2, 3, 4])
    _, upper = cache.match_prefix([1, 2])
    _, leaf = cache.match_prefix([1, 2, 3, 4])
    cache.inc_lock_ref(upper)
    with pytest.raises(ContractViolation):
        cache.dec_lock_ref(leaf)  # the leaf is unlocked even though its parent is locked
    assert (upper.lock_ref, leaf.lock_ref) == (1, 0)
    assert (cache.evictable_size(), cache.protected_size()) == (2, 2)


def test_a_node_from_a_previous_tree_is_refused_after_reset() -> None:
    # §8 item 22 (#29291): a lock handle kept across a flush walks another tree's parent chain.
    cache = make_cache()
    cache_key(cache, [1, 2])
    _, stale = cache.match_prefix([1, 2])
    cache.inc_lock_ref(stale)
    cache.reset()
    with pytest.raises(ContractViolation, match="not in this tree"):
        cache.dec_lock_ref(stale)
    with pytest.raises(ContractViolation, match="not in this tree"):
        cache.inc_lock_ref(stale)
    assert (cache.evictable_size(), cache.protected_size()) == (0, 0)


def test_an_evicted_node_cannot_be_locked() -> None:
    cache = make_cache()
    cache_key(cache, [1, 2])
    _, node = cache.match_prefix([1, 2])
    assert cache.evict(2) == 2
    with pytest.raises(ContractViolation, match="not in this tree"):
        cache.inc_lock_ref(node)


def test_evict_takes_the_least_recently_used_leaf_first() -> None:
    cache = make_cache()
    a = cache_key(cache, [1, 1])
    b = cache_key(cache, [2, 2])
    cache_key(cache, [3, 3])
    cache.match_prefix([1, 1])  # touch A: B is now the oldest
    assert cache.evict(1) == 2
    assert sorted(cache.root.children) == [(1,), (3,)]
    assert set(b.tolist()) <= set(free_slot_ids(cache))
    assert cache.evict(1) == 2
    assert sorted(cache.root.children) == [(1,)]
    assert cache.match_prefix([1, 1])[0].tolist() == a.tolist()


def test_evict_breaks_access_ties_by_node_age() -> None:
    cache = make_cache()
    cache_key(cache, [1, 2, 3])
    slots = alloc_slots(cache, 3)
    cache.insert([1, 2, 4], slots)  # [3] and [4] are both touched by this insert
    assert cache.evict(1) == 1
    assert sorted(child(cache.root, 1).children) == [(4,)]


def test_evict_spares_locked_paths_and_frees_parents_that_become_leaves() -> None:
    # §8 item 30: the lock walk must start at the handle node itself, or the node it names is evicted.
    cache = make_cache()
    cache_key(cache, [1, 2, 3, 4])
    cache_key(cache, [1, 2, 7, 8])
    cache_key(cache, [5, 6])
    _, locked = cache.match_prefix([1, 2, 3, 4])
    cache.inc_lock_ref(locked)
    assert cache.evict(100) == 4
    assert cache.owned_slots().numel() == 4
    assert cache.match_prefix([1, 2, 3, 4])[1] is locked
    cache.dec_lock_ref(locked)
    assert cache.evict(100) == 4
    assert cache.root.children == {}
    assert len(free_slot_ids(cache)) == cache.allocator.size
    assert_counters(cache)


def test_evict_stops_once_enough_tokens_are_freed() -> None:
    cache = make_cache()
    for first in range(1, 5):
        cache_key(cache, [first, first])
    assert cache.evict(3) == 4
    assert cache.evictable_size() == 4


# -- request lifecycles -------------------------------------------------------------------------------------


def admit(cache: RadixCache, rid: int, tokens: list[int]) -> Req:
    """Admission: match the prompt (at least one token left to compute) and lock the matched node."""
    req = Req(rid, fill_ids=list(tokens))
    prefix, node = cache.match_prefix(tokens, max_prefix_len=len(tokens) - 1)
    req.prefix_indices, req.last_node = prefix, node
    req.kv.cache_protected_len = prefix.numel()
    cache.inc_lock_ref(node)
    return req


def extend(cache: RadixCache, req: Req, end: int) -> None:
    """One extend up to `end`: row kept or new, new slots page by page, then the between-chunk stash."""
    pool = cache.req_to_token_pool
    rows = pool.alloc([req])
    assert rows is not None
    row, start, ps = rows[0], req.prefix_indices.numel(), cache.page_size
    pool.write(row, 0, req.prefix_indices)
    pages = alloc_slots(cache, ps * sum(1 for p in range(start, end) if p % ps == 0)).view(-1, ps)
    fresh, out = iter(pages[:, 0].tolist()), list[int]()
    for pos in range(start, end):
        # A position inside a page continues the page of the slot before it.
        prev = out[-1] if out else int(pool.req_to_token[row, pos - 1]) if pos else -1
        out.append(next(fresh) if pos % ps == 0 else prev + 1)
    pool.write(row, start, torch.tensor(out, dtype=torch.int64))
    req.kv.kv_allocated_len = req.kv.kv_committed_len = req.extend_range_end = end
    cache.cache_unfinished_req(req)
    assert_counters(cache)


def decode(cache: RadixCache, req: Req, token: int) -> None:
    """One decode step (page size 1): KV for the last sampled token at position `kv_committed_len`."""
    req.fill_ids.append(token)
    kv = req.kv
    assert kv.req_pool_idx is not None
    cache.req_to_token_pool.write(kv.req_pool_idx, kv.kv_committed_len, alloc_slots(cache, 1))
    kv.kv_allocated_len += 1
    kv.kv_committed_len += 1


def release(req: Req, cache: RadixCache, is_insert: bool) -> None:
    # release_kv_cache is annotated with ChunkCache; RadixCache offers the same release interface.
    release_kv_cache(req, cache, is_insert=is_insert)  # type: ignore[arg-type]


def row_of(cache: RadixCache, req: Req, end: int) -> list[int]:
    return cache.row_slots(req, 0, end).tolist()


def test_two_requests_share_a_prefix_and_release_with_and_without_insert() -> None:
    cache = make_cache()
    r1 = admit(cache, 1, [1, 2, 3, 4, 5, 6, 7, 8])
    extend(cache, r1, 8)
    assert r1.kv.cache_protected_len == 8
    assert (cache.evictable_size(), cache.protected_size()) == (0, 8)
    r2 = admit(cache, 2, [1, 2, 3, 4, 5, 6, 20, 21])
    assert r2.kv.cache_protected_len == 6
    assert r2.prefix_indices.tolist() == row_of(cache, r1, 6)
    extend(cache, r2, 8)
    assert row_of(cache, r2, 6) == row_of(cache, r1, 6)
    assert (cache.evictable_size(), cache.protected_size()) == (0, 10)
    decode(cache, r1, 9)
    decode(cache, r2, 22)
    release(r1, cache, is_insert=True)
    assert_counters(cache)
    assert cache.match_prefix([1, 2, 3, 4, 5, 6, 7, 8, 9])[0].numel() == 9
    r2_own = row_of(cache, r2, 9)[8:]
    release(r2, cache, is_insert=False)
    assert cache.match_prefix([1, 2, 3, 4, 5, 6, 20, 21, 22])[0].numel() == 8
    assert set(r2_own) <= set(free_slot_ids(cache))
    assert cache.owned_slots().numel() == 11
    assert_idle_clean(cache)


def test_identical_prompts_in_flight_keep_one_copy_and_free_the_duplicate() -> None:
    cache = make_cache()
    tokens = [4, 4, 5, 5, 6]
    r1, r2 = admit(cache, 1, tokens), admit(cache, 2, tokens)
    extend(cache, r1, 5)
    extend(cache, r2, 5)  # r2 computed the same prompt: its copy of [0, 5) is a duplicate
    assert row_of(cache, r2, 5) == row_of(cache, r1, 5)
    assert r2.last_node is r1.last_node
    assert isinstance(r1.last_node, TreeNode) and r1.last_node.lock_ref == 2
    assert cache.owned_slots().numel() == 5
    assert len(free_slot_ids(cache)) == cache.allocator.size - 5
    release(r1, cache, is_insert=True)
    release(r2, cache, is_insert=True)
    assert_idle_clean(cache)
    assert cache.owned_slots().numel() == 5


def test_chunked_prefill_moves_the_lock_to_each_new_chunk() -> None:
    cache = make_cache()
    req = admit(cache, 1, list(range(10, 20)))
    extend(cache, req, 4)
    first = req.last_node
    assert isinstance(first, TreeNode) and first.key == [10, 11, 12, 13] and first.lock_ref == 1
    extend(cache, req, 8)
    second = req.last_node
    assert isinstance(second, TreeNode) and second.parent is first
    assert (first.lock_ref, second.lock_ref) == (1, 1)
    assert req.kv.cache_protected_len == 8 and req.prefix_indices.tolist() == row_of(cache, req, 8)
    extend(cache, req, 10)
    assert (cache.evictable_size(), cache.protected_size()) == (0, 10)
    release(req, cache, is_insert=False)
    # The chunks already cached stay cached: only [P, n) is the request's to free, and P == n here.
    assert cache.evictable_size() == 10
    assert_idle_clean(cache)


def test_finish_without_insert_frees_the_request_range_and_leaves_the_tree() -> None:
    cache = make_cache()
    r1 = admit(cache, 1, [1, 2, 3])
    extend(cache, r1, 3)
    release(r1, cache, is_insert=True)
    r2 = admit(cache, 2, [1, 2, 3, 7])
    extend(cache, r2, 4)
    decode(cache, r2, 8)
    assert r2.kv.cache_protected_len == 4
    own = row_of(cache, r2, 5)[4:]
    release(r2, cache, is_insert=False)
    assert cache.owned_slots().numel() == 4
    assert set(own) <= set(free_slot_ids(cache))
    assert_idle_clean(cache)


def test_eviction_under_pressure_frees_old_prefixes_but_not_locked_ones() -> None:
    cache = make_cache(tokens=16)
    old = admit(cache, 1, [1, 2, 3, 4, 5, 6, 7, 8])
    extend(cache, old, 8)
    release(old, cache, is_insert=True)
    live = admit(cache, 2, [9, 9, 9, 9])
    extend(cache, live, 4)
    big = admit(cache, 3, [1, 2, 3, 30, 31, 32, 33, 34, 35, 36])
    assert big.kv.cache_protected_len == 3
    extend(cache, big, 10)  # 7 new slots with 4 free: evicts the unlocked rest of the old prompt (5 tokens)
    assert cache.match_prefix([1, 2, 3, 4])[0].numel() == 3
    assert cache.match_prefix([9, 9, 9, 9])[0].numel() == 4
    assert cache.allocator.available_size() == 2
    for req in (live, big):
        release(req, cache, is_insert=True)
    assert_idle_clean(cache)


def test_release_with_a_stale_lock_handle_is_refused_and_changes_nothing() -> None:
    cache = make_cache()
    req = admit(cache, 1, [1, 2, 3])
    extend(cache, req, 3)
    free_before = free_slot_ids(cache)
    cache.reset()
    with pytest.raises(ContractViolation, match="not in this tree"):
        release(req, cache, is_insert=True)
    assert req.kv.holds_kv and req.kv.kv_allocated_len == 3
    assert free_slot_ids(cache) == free_before


def test_paged_chunks_keep_whole_pages_in_the_tree_and_free_the_unaligned_tail() -> None:
    cache = make_cache(tokens=32, page_size=4)
    req = admit(cache, 1, list(range(100, 110)))
    extend(cache, req, 6)
    assert req.kv.cache_protected_len == 4
    assert req.prefix_indices.numel() == 6  # the unaligned tail [4, 6) stays the request's own
    extend(cache, req, 10)
    row = row_of(cache, req, 10)
    assert row[6] == row[5] + 1 and row[4] % 4 == 0 and row[8] % 4 == 0
    assert req.kv.cache_protected_len == 8
    release(req, cache, is_insert=True)
    for page in cache.owned_slots().view(-1, 4).tolist():
        assert page == list(range(page[0], page[0] + 4)) and page[0] % 4 == 0
    assert cache.owned_slots().numel() == 8
    assert row[8] // 4 in cache.allocator.free_pages.tolist()
    assert_idle_clean(cache)


def test_paged_second_request_reuses_cached_pages() -> None:
    cache = make_cache(tokens=32, page_size=4)
    r1 = admit(cache, 1, list(range(9)))
    extend(cache, r1, 9)
    r2 = admit(cache, 2, [*range(8), 50, 51])
    assert r2.kv.cache_protected_len == 8
    extend(cache, r2, 10)
    assert row_of(cache, r2, 8) == row_of(cache, r1, 8)
    release(r2, cache, is_insert=True)
    release(r1, cache, is_insert=False)
    assert cache.owned_slots().numel() == 8
    assert_idle_clean(cache)


# -- random tree operations ---------------------------------------------------------------------------------

TOKENS = st.lists(st.integers(0, 2), max_size=8)


class RadixTreeMachine(RuleBasedStateMachine):
    """Random insert / match / lock / unlock / evict; counters, slot ownership and lock counts are checked."""

    page_size = 1

    def __init__(self) -> None:
        super().__init__()
        self.cache = make_cache(tokens=24, page_size=self.page_size)
        self.locks: list[TreeNode] = []
        self.slot_prefix: dict[int, tuple[int, ...]] = {}  # the token prefix whose KV each slot holds

    @rule(key=TOKENS)
    def insert(self, key: list[int]) -> None:
        key = key[: len(key) - len(key) % self.page_size]
        if len(key) > self.cache.allocator.available_size() + self.cache.evictable_size():
            return
        slots = alloc_slots(self.cache, len(key))
        prefix_len = self.cache.insert(key, slots)
        self.cache.allocator.free(slots[:prefix_len])
        for i in range(prefix_len, len(key)):
            self.slot_prefix[int(slots[i])] = tuple(key[: i + 1])
        assert self.cache.match_prefix(key)[0].tolist()[prefix_len:] == slots[prefix_len:].tolist()

    @rule(key=TOKENS, cap=st.none() | st.integers(0, 8))
    def match(self, key: list[int], cap: int | None) -> None:
        indices, node = self.cache.match_prefix(key, max_prefix_len=cap)
        limit = len(key) if cap is None else min(cap, len(key))
        assert indices.numel() <= limit and indices.numel() % self.page_size == 0
        for i, slot in enumerate(indices.tolist()):
            assert self.slot_prefix[slot] == tuple(key[: i + 1])
        assert node is self.cache.root or node.value.tolist() == indices[-len(node.key) :].tolist()

    @rule(key=TOKENS)
    def lock(self, key: list[int]) -> None:
        _, node = self.cache.match_prefix(key)
        self.cache.inc_lock_ref(node)
        self.locks.append(node)

    @precondition(lambda self: self.locks)
    @rule(data=st.data())
    def unlock(self, data: st.DataObject) -> None:
        node = self.locks.pop(data.draw(st.integers(0, len(self.locks) - 1)))
        self.cache.dec_lock_ref(node)

    @rule(num_tokens=st.integers(0, 12))
    def evict(self, num_tokens: int) -> None:
        before = self.cache.evictable_size()
        freed = self.cache.evict(num_tokens)
        assert freed >= min(num_tokens, before)
        assert self.cache.evictable_size() == before - freed

    @invariant()
    def counters_match_the_recount(self) -> None:
        assert_counters(self.cache)

    @invariant()
    def every_slot_is_free_or_cached_once(self) -> None:
        owned = self.cache.owned_slots().tolist()
        free = free_slot_ids(self.cache)
        assert len(set(owned)) == len(owned)
        assert not set(owned) & set(free)
        assert len(owned) + len(free) == self.cache.allocator.size

    @invariant()
    def lock_counts_equal_the_locks_held_below(self) -> None:
        expected: dict[int, int] = {}
        for node in self.locks:
            walk = node
            while walk.parent is not None:
                expected[walk.node_id] = expected.get(walk.node_id, 0) + 1
                walk = walk.parent
            assert walk is self.cache.root
        for node in self.cache._nodes():
            assert node.lock_ref == expected.get(node.node_id, 0)
            assert len(node.key) == node.value.numel() > 0 and len(node.key) % self.page_size == 0


class PagedRadixTreeMachine(RadixTreeMachine):
    page_size = 2


TestRadixTree = RadixTreeMachine.TestCase
TestRadixTree.settings = settings(max_examples=150, stateful_step_count=30, deadline=None)
TestPagedRadixTree = PagedRadixTreeMachine.TestCase
TestPagedRadixTree.settings = settings(max_examples=100, stateful_step_count=30, deadline=None)
