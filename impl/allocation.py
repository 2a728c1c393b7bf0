"""Allocation for one request, as SGLang's `mem_cache/allocation.py` does it for a batch: evict the tree's
shortfall, take slots (whole pages when paged), write them into the request's row, set the record's lengths.

Callers check capacity first (the scheduler's admission and decode budgets), so an allocation that comes
back empty means a wrong budget and fails loudly, as upstream's "out of memory" RuntimeError does.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from impl.allocator import TokenToKVPoolAllocator
from impl.paged_allocator import PagedTokenToKVPoolAllocator
from impl.prefix_cache import PrefixCache
from impl.records import Req
from properties.vocabulary import num_new_pages

Allocator = TokenToKVPoolAllocator | PagedTokenToKVPoolAllocator


@dataclass(frozen=True)
class Pools:
    """What the allocation paths work on; without `evict_on_demand` they never evict the tree themselves."""

    cache: PrefixCache
    allocator: Allocator
    evict_on_demand: bool = True


def tokens_needed(page_size: int, start: int, end: int) -> int:
    """Slots the allocator hands out for positions `[start, end)`: whole pages past the page `start` is on."""
    return num_new_pages(start, end, page_size) * page_size


def evict_from_tree_cache(pools: Pools, num_tokens: int) -> None:
    """Evict only the shortfall of `num_tokens` against what the allocator has free (a no-op without a tree)."""
    shortfall = num_tokens - pools.allocator.available_size()
    if pools.evict_on_demand and shortfall > 0:
        pools.cache.evict(shortfall)


def alloc_for_extend(pools: Pools, req: Req, seq_len: int) -> int:
    """`alloc_for_extend`: the row (kept, or a fresh one), the prefix into it, new slots up to `seq_len`.

    The row comes first, as upstream: its reuse assert refuses a stale record before any slot moves.
    """
    pool = pools.cache.req_to_token_pool
    rows = pool.alloc([req])
    assert rows is not None, "a free row was checked for before the row allocation"
    row, prefix = rows[0], req.prefix_indices
    prefix_len = prefix.numel()
    out = _alloc_slots(pools, prefix_len, seq_len, int(prefix[-1]) if prefix_len else -1)
    pool.write(row, 0, prefix)
    pool.write(row, prefix_len, out)
    req.kv.kv_allocated_len = req.kv.kv_committed_len = seq_len
    return row


def alloc_for_decode(pools: Pools, req: Req) -> None:
    """`alloc_for_decode` with one token: a slot for position `kv_committed_len` (a new page when it starts one)."""
    kv, allocator, pool = req.kv, pools.allocator, pools.cache.req_to_token_pool
    row, seq_len = _row(req), kv.kv_committed_len
    if isinstance(allocator, PagedTokenToKVPoolAllocator):
        evict_from_tree_cache(pools, allocator.page_size)  # upstream over-estimates a page per request
        last_loc = int(pool.req_to_token[row, seq_len - 1])
        out = allocator.alloc_decode(_one(allocator, seq_len + 1), _one(allocator, last_loc))
    else:
        evict_from_tree_cache(pools, 1)
        out = allocator.alloc(1)
    assert out is not None, "decode out of memory: the decode budget was checked before"
    pool.write(row, seq_len, out)
    kv.kv_allocated_len += 1
    kv.kv_committed_len += 1


def alloc_for_spec_decode(pools: Pools, req: Req, next_len: int) -> None:
    """`alloc_for_spec_decode`: slots for `[kv_allocated_len, next_len)`, the draft tokens' room."""
    kv, pool = req.kv, pools.cache.req_to_token_pool
    row, cur = _row(req), kv.kv_allocated_len
    out = _alloc_slots(pools, cur, next_len, int(pool.req_to_token[row, cur - 1]))
    pool.write(row, cur, out)
    kv.kv_allocated_len = max(kv.kv_allocated_len, next_len)


def alloc_for_decode_prealloc(pools: Pools, req: Req, fill_len: int) -> int:
    """PD decode `_pre_alloc` without a prefix hit: a row and slots for `[0, fill_len)` the transfer fills."""
    pool = pools.cache.req_to_token_pool
    rows = pool.alloc([req])
    assert rows is not None, "a free row was checked for before the row allocation"
    req.kv.kv_committed_len = fill_len
    req.kv.kv_allocated_len = fill_len  # set before the allocator call, as upstream
    pool.write(rows[0], 0, _alloc_slots(pools, 0, fill_len, -1))
    return rows[0]


def _alloc_slots(pools: Pools, start: int, end: int, last_loc: int) -> torch.Tensor:
    """Slots for positions `[start, end)` of one request whose slot at `start - 1` is `last_loc`."""
    allocator = pools.allocator
    if isinstance(allocator, PagedTokenToKVPoolAllocator):
        # Upstream evicts for the extend tokens plus a page per request: an over-estimate of the pages taken.
        evict_from_tree_cache(pools, end - start + allocator.page_size)
        out = allocator.alloc_extend(_one(allocator, start), _one(allocator, end), _one(allocator, last_loc))
    else:
        evict_from_tree_cache(pools, end - start)
        out = allocator.alloc(end - start)
    assert out is not None, f"out of memory for positions [{start}, {end}): the budget was checked before"
    return out


def _row(req: Req) -> int:
    assert req.kv.req_pool_idx is not None, f"request {req.rid} holds no row"
    return req.kv.req_pool_idx


def _one(allocator: Allocator, value: int) -> torch.Tensor:
    return torch.tensor([value], dtype=torch.int64, device=allocator.device)
