"""Allocation for a batch of requests, as SGLang's `mem_cache/allocation.py` does it: evict the tree's
shortfall, take every request's slots at once (whole pages when paged), write them into each row, set the
records' lengths.

Callers check capacity first (the scheduler's admission and decode budgets), so an allocation that comes
back empty means a wrong budget and fails loudly, as upstream's "out of memory" RuntimeError does.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch

from impl.allocator import TokenToKVPoolAllocator
from impl.field_copy import FieldCopy
from impl.paged_allocator import PagedTokenToKVPoolAllocator
from impl.prefix_cache import PrefixCache
from impl.records import Req
from impl.req_pool import ReqToTokenPool

Allocator = TokenToKVPoolAllocator | PagedTokenToKVPoolAllocator


class OutOfMemory(RuntimeError):
    """An allocation the budget should have ruled out; upstream raises RuntimeError ("out of memory") here.
    `rows`: the request rows ran out (else the slots)."""

    def __init__(self, message: str, rows: bool = False) -> None:
        super().__init__(message)
        self.rows = rows


@dataclass(frozen=True)
class Pools(FieldCopy):
    """What the allocation paths work on; without `evict_on_demand` they never evict the tree themselves.
    `evictions` logs each on-demand eviction as (tokens asked, tokens freed), for the caller to read."""

    cache: PrefixCache
    allocator: Allocator
    evict_on_demand: bool = True
    evictions: list[tuple[int, int]] = field(default_factory=list)


def evict_from_tree_cache(pools: Pools, num_tokens: int) -> None:
    """Evict only the shortfall of `num_tokens` against what the allocator has free (a no-op without a tree)."""
    shortfall = num_tokens - pools.allocator.available_size()
    if pools.evict_on_demand and shortfall > 0:
        pools.evictions.append((shortfall, pools.cache.evict(shortfall)))


def alloc_for_extend(pools: Pools, reqs: list[Req], seq_lens: list[int]) -> list[int]:
    """`alloc_for_extend` for a batch: every request's row (kept, or a fresh one), then the slots of all their new
    positions in one allocation, each request's prefix and slots into its row, the record's lengths.

    The rows come first, as upstream: the reuse assert refuses a stale record before any slot moves.
    """
    pool = pools.cache.req_to_token_pool
    fresh = [req for req in reqs if not req.kv.holds_kv]
    rows = pool.alloc(reqs)
    if rows is None:
        raise OutOfMemory(
            f"alloc_req_slots runs out of memory: {len(reqs)} rows, {pool.available_size()} free", rows=True
        )
    prefixes = [req.prefix_indices for req in reqs]
    starts = [prefix.numel() for prefix in prefixes]
    last_locs = [int(prefix[-1]) if prefix.numel() else -1 for prefix in prefixes]
    with _rows_back_on_failure(pool, fresh):
        out = _alloc_slots(pools, starts, seq_lens, last_locs)
    offset = 0
    for req, row, prefix, start, seq_len in zip(reqs, rows, prefixes, starts, seq_lens, strict=True):
        pool.write(row, 0, prefix)
        pool.write(row, start, out[offset : offset + seq_len - start])
        offset += seq_len - start
        req.kv.kv_allocated_len = req.kv.kv_committed_len = seq_len
    return rows


def alloc_for_decode(pools: Pools, reqs: list[Req]) -> None:
    """`alloc_for_decode` with one token per request: a slot for each position `kv_committed_len` (a new page
    where it starts one), in one allocation for the batch."""
    allocator, pool = pools.allocator, pools.cache.req_to_token_pool
    rows, seq_lens = [_row(req) for req in reqs], [req.kv.kv_committed_len for req in reqs]
    if isinstance(allocator, PagedTokenToKVPoolAllocator):
        evict_from_tree_cache(pools, len(reqs) * allocator.page_size)  # upstream over-estimates a page per request
        last_locs = [int(pool.req_to_token[row, seq_len - 1]) for row, seq_len in zip(rows, seq_lens, strict=True)]
        out = allocator.alloc_decode(_ints(allocator, [n + 1 for n in seq_lens]), _ints(allocator, last_locs))
    else:
        evict_from_tree_cache(pools, len(reqs))
        out = allocator.alloc(len(reqs))
    if out is None:
        raise OutOfMemory(f"decode out of memory: {len(reqs)} tokens, {allocator.available_size()} free")
    for k, (req, row, seq_len) in enumerate(zip(reqs, rows, seq_lens, strict=True)):
        pool.write(row, seq_len, out[k : k + 1])
        req.kv.kv_allocated_len += 1
        req.kv.kv_committed_len += 1


def alloc_for_spec_decode(pools: Pools, req: Req, next_len: int) -> None:
    """`alloc_for_spec_decode`: slots for `[kv_allocated_len, next_len)`, the draft tokens' room."""
    kv, pool = req.kv, pools.cache.req_to_token_pool
    row, cur = _row(req), kv.kv_allocated_len
    out = _alloc_slots(pools, [cur], [next_len], [int(pool.req_to_token[row, cur - 1])])
    pool.write(row, cur, out)
    kv.kv_allocated_len = max(kv.kv_allocated_len, next_len)


def alloc_for_decode_prealloc(pools: Pools, req: Req, fill_len: int) -> int:
    """PD decode `_pre_alloc` without a prefix hit: a row and slots for `[0, fill_len)` the transfer fills."""
    pool = pools.cache.req_to_token_pool
    rows = pool.alloc([req])
    if rows is None:
        raise OutOfMemory(f"the pre-allocation found no free row ({pool.available_size()} free)", rows=True)
    lengths = req.kv.kv_committed_len, req.kv.kv_allocated_len
    req.kv.kv_committed_len = fill_len
    req.kv.kv_allocated_len = fill_len  # set before the allocator call, as upstream
    with _rows_back_on_failure(pool, [req], [lengths]):
        pool.write(rows[0], 0, _alloc_slots(pools, [0], [fill_len], [-1]))
    return rows[0]


def free_new_pages(pools: Pools, req: Req, start: int, end: int) -> None:
    """Give back the slots an allocation took for positions `[start, end)` of the request's row: the pages that
    begin at or after `start` (a page `start` lies inside was the request's before, and stays)."""
    page = pools.allocator.page_size
    first = -(-start // page) * page
    if end > first:
        pools.allocator.free(pools.cache.req_to_token_pool.req_to_token[_row(req), first:end].to(torch.int64))


@contextlib.contextmanager
def _rows_back_on_failure(
    pool: ReqToTokenPool, fresh: list[Req], lengths: list[tuple[int, int]] | None = None
) -> Iterator[None]:
    """A slot allocation that fails gives back the rows its call just took (and, given `lengths`, the records'
    committed and allocated lengths from before the call), so a failed allocation leaves the pool as it found
    it: the contract of a failure. Upstream's fail-loud paths keep the rows (finding `failed-alloc-keeps-rows`)."""
    try:
        yield
    except OutOfMemory:
        if not pool.faults.on("failed_alloc_keeps_rows"):
            for k, req in enumerate(fresh):
                pool.free(req)
                if lengths is not None:
                    req.kv.kv_committed_len, req.kv.kv_allocated_len = lengths[k]
        raise


def _alloc_slots(pools: Pools, starts: list[int], ends: list[int], last_locs: list[int]) -> torch.Tensor:
    """Slots for positions `[start, end)` of each request (in order, concatenated), whose slot at `start - 1`
    is its `last_loc`."""
    allocator = pools.allocator
    tokens = sum(end - start for start, end in zip(starts, ends, strict=True))
    if isinstance(allocator, PagedTokenToKVPoolAllocator):
        # Upstream evicts for the extend tokens plus a page per request: an over-estimate of the pages taken.
        evict_from_tree_cache(pools, tokens + len(starts) * allocator.page_size)
        out = allocator.alloc_extend(_ints(allocator, starts), _ints(allocator, ends), _ints(allocator, last_locs))
    else:
        evict_from_tree_cache(pools, tokens)
        out = allocator.alloc(tokens)
    if out is None:
        raise OutOfMemory(f"out of memory for {tokens} tokens, {allocator.available_size()} free")
    return out


def _row(req: Req) -> int:
    assert req.kv.req_pool_idx is not None, f"request {req.rid} holds no row"
    return req.kv.req_pool_idx


def _ints(allocator: Allocator, values: list[int]) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.int64, device=allocator.device)
