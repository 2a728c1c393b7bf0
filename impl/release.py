"""The release paths: `release_kv_cache` in the 0.5.19 order, the PP-profiling release before PR #37167, the
decode-offload release beside them, and the record reset of a retraction."""

from __future__ import annotations

from impl.prefix_cache import PrefixCache
from impl.records import Req
from impl.req_pool import ContractViolation, ReqToTokenPool
from properties.vocabulary import ceil_align, page_floor


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ContractViolation(message)


def release_kv_cache(req: Req, cache: PrefixCache, is_insert: bool = True, speculative: bool = False) -> None:
    """Hand back the request's KV range, its over-allocation and its row, then mark the record released."""
    kv = req.kv
    _require((not kv.holds_kv) == kv.is_kv_released, f"request {req.rid}: holds_kv disagrees with the record")
    if not kv.holds_kv:
        # Upstream only tolerates this for mamba-managing caches (mamba slot without a row).
        _require(cache.supports_mamba(), f"request {req.rid} holds no KV to release")
        return
    committed_len = req.owned_kv_len()
    # Upstream asserts this after the cache's finished path has freed; checked first so a refusal frees nothing.
    _require(
        speculative or committed_len == kv.kv_allocated_len,
        f"request {req.rid}: unexpected over-allocated KV [{committed_len}, {kv.kv_allocated_len})",
    )
    if cache.faults.on("release_len_from_token_counts"):
        committed_len = _len_from_token_counts(req, cache, committed_len)
    is_insert = is_insert and not req.skip_radix_cache_insert
    cache.cache_finished_req(req, is_insert=is_insert, kv_len_to_handle=committed_len)
    _require((not kv.holds_kv) == kv.is_kv_released, f"request {req.rid}: the cache detached the row unreleased")
    pool = cache.req_to_token_pool
    row_first = cache.faults.on("release_order_row_first")
    if row_first:
        # xllm #828's analogue: the row goes back first, and the over-allocation free reads kv.req_pool_idx.
        _return_row(req, pool, is_insert)
    if not (cache.faults.on("skip_overalloc_free_on_finish") and is_insert):
        _release_overallocated_kv(req, committed_len, kv.kv_allocated_len, cache)
    if not row_first:
        _return_row(req, pool, is_insert)
    kv.mark_kv_released()


def _len_from_token_counts(req: Req, cache: PrefixCache, committed_len: int) -> int:
    """Before PR #12224: `len(origin_input_ids) + max(len(output_ids) - 1, 0)` from the token lists, and the decode
    slot past it freed ad hoc (a request with nothing decoded keeps `committed_len`)."""
    outputs = len(req.fill_ids) - (req.prompt_len or 0)
    if req.prompt_len is None or outputs < 1:
        return committed_len
    length = req.prompt_len + outputs - 1
    cache.free_kv_row(req, [(length, length + 1)])
    return length


def _return_row(req: Req, pool: ReqToTokenPool, is_insert: bool) -> None:
    """`ReqToTokenPool.free`: the row back to the free list and `req_pool_idx` cleared."""
    kv = req.kv
    if pool.faults.on("raw_row_free"):
        assert kv.req_pool_idx is not None
        pool.free_rows([kv.req_pool_idx])
        return
    if pool.faults.on("finish_skips_row_free") and is_insert and kv.kv_committed_len == req.prompt_len:
        return  # #10871: a request that finished in its prefill result had its slots freed, never its row
    pool.free(req)


def _release_overallocated_kv(req: Req, start: int, end: int, cache: PrefixCache) -> None:
    # Aligned up, the range never shares a page with the tail the cache's finished path just freed.
    if not cache.faults.on("overalloc_free_unaligned_start"):
        start = ceil_align(start, cache.allocator.page_size)
    if start < end:
        cache.free_kv_row(req, [(start, end)])


def pp_release_manual(req: Req, cache: PrefixCache, seq_len: int) -> None:
    """The PP-profiling release as hand-written before PR #37167: raw slots `[0, seq_len)`, then the row.

    It skips `kv_len_to_handle`, the cache's finished path (no lock release, `cache_protected_len`
    ignored) and the over-allocation; it matches `release_kv_cache(is_insert=False)` only when
    `cache_protected_len == 0`, `kv_committed_len == kv_allocated_len == seq_len` and no tree lock is held.
    """
    kv = req.kv
    _require(kv.holds_kv, f"request {req.rid} must have req_pool_idx")
    cache.free_kv_row(req, [(0, seq_len)])
    cache.req_to_token_pool.free(req)
    if not cache.faults.on("manual_release_skips_mark"):
        kv.mark_kv_released()


# The value older frees and pool fakes leave in `req_pool_idx` in place of None.
SENTINEL_ROW = -1


def release_offloaded(req: Req, cache: PrefixCache) -> bool:
    """`DecodeKVCacheOffloadManager._release_finished_req`: free `[0, prefill_len)`, `[prefill_len, n)` and
    `[ceil_align(n), A)` of the row, free the row, mark the record released. False when it returns early.

    Its guard is a raw field read, kept so by PR #37167: `req_pool_idx is None or == -1`, where the presence
    check `holds_kv` would let the `-1` sentinel through. The caller adjusts the tree's protected size.
    """
    kv = req.kv
    if cache.faults.on("offload_presence_guard"):
        passes = kv.holds_kv  # the presence check that PR #37167 kept out of this path
    else:
        passes = kv.req_pool_idx is not None and kv.req_pool_idx != SENTINEL_ROW
    if not passes:
        return False
    page_size, committed_len = cache.allocator.page_size, kv.kv_committed_len
    prefill_len = min(page_floor(req.prompt_len or 0, page_size), committed_len)
    ranges = [(0, prefill_len), (prefill_len, committed_len)]
    if ceil_align(committed_len, page_size) < kv.kv_allocated_len:
        ranges.append((ceil_align(committed_len, page_size), kv.kv_allocated_len))
    cache.free_kv_row(req, ranges)
    cache.req_to_token_pool.free(req)
    kv.mark_kv_released()
    return True


def reset_for_retract(req: Req) -> None:
    """`Req.reset_for_retract`: a released record forgets its prefix, lengths and lock, like a fresh request."""
    _require(not req.kv.holds_kv, f"request {req.rid} still holds a row; release it before the reset")
    req.kv.cache_protected_len = 0
    req.kv.kv_committed_len = 0
    req.inflight_middle_chunks = 0
    req.prefix_indices = req.prefix_indices.new_empty(0)
    req.last_node = None
    req.extend_range_end = 0
