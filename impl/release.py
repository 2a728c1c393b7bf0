"""The release paths: `release_kv_cache` in the 0.5.19 order, and the PP-profiling release before PR #37167."""

from __future__ import annotations

from impl.chunk_cache import ChunkCache
from impl.records import Req
from impl.req_pool import ContractViolation


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ContractViolation(message)


def release_kv_cache(req: Req, cache: ChunkCache, is_insert: bool = True, speculative: bool = False) -> None:
    """Hand back the request's KV range, its over-allocation and its row, then mark the record released."""
    kv = req.kv
    _require((not kv.holds_kv) == kv.is_kv_released, f"request {req.rid}: holds_kv disagrees with the record")
    if not kv.holds_kv:
        # Upstream only tolerates this for mamba-managing caches (mamba slot without a row).
        _require(cache.supports_mamba(), f"request {req.rid} holds no KV to release")
        return
    committed_len = kv.kv_committed_len
    cache.cache_finished_req(req, is_insert=is_insert, kv_len_to_handle=committed_len)
    _release_overallocated_kv(req, committed_len, kv.kv_allocated_len, cache, speculative)
    pool = cache.req_to_token_pool
    if pool.faults.on("raw_row_free"):
        assert kv.req_pool_idx is not None
        pool.free_rows([kv.req_pool_idx])
    else:
        pool.free(req)
    kv.mark_kv_released()


def _release_overallocated_kv(req: Req, start: int, end: int, cache: ChunkCache, speculative: bool) -> None:
    if not speculative:
        _require(start == end, f"request {req.rid}: unexpected over-allocated KV [{start}, {end})")
    page_size = cache.allocator.page_size
    start = -(-start // page_size) * page_size  # never share a page with the tail freed just before
    if start < end:
        cache.free_kv_row(req, [(start, end)])


def pp_release_manual(req: Req, cache: ChunkCache, seq_len: int) -> None:
    """The PP-profiling release as hand-written before PR #37167: raw slots `[0, seq_len)`, then the row.

    It skips `kv_len_to_handle`, the cache's finished path (no lock release, `cache_protected_len`
    ignored) and the over-allocation; it matches `release_kv_cache(is_insert=False)` only when
    `cache_protected_len == 0`, `kv_committed_len == kv_allocated_len == seq_len` and no tree lock is held.
    """
    kv = req.kv
    _require(kv.holds_kv, f"request {req.rid} must have req_pool_idx")
    cache.free_kv_row(req, [(0, seq_len)])
    cache.req_to_token_pool.free(req)
    kv.mark_kv_released()
