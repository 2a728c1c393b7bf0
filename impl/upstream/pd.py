"""The PD decode side on upstream's classes: its row pool, the pre-allocation of a transferred request, and the
decode-offload release of a finished one.

Both flows are methods of objects that need a whole disaggregated scheduler (a transfer engine, a host pool, a
cache controller), so each runs on a bare instance (`object.__new__`) given only what the method reads: the
pools, the allocator, the tree and a small `scheduler` stand-in. No transfer happens; it is taken to succeed.

- `pd_prealloc` is `DecodePreallocQueue._pre_alloc` without a prefix hit (a row, then slots for the transferred
  prompt: `C = A = fill`; on a radix tree the request's `last_node` is the root, as the queue's prefix match
  leaves it with no hit), then `ScheduleBatch.prepare_for_prebuilt`, whose batch the first decode continues. On a
  radix tree the decode side runs with its radix cache on (`disaggregation_decode_enable_radix_cache`), so a
  pre-allocation short of free slots evicts the tree for them. The prebuilt batch's result pass
  (`process_prebuilt`, which stashes the prompt into the tree) is left out: the model's pre-allocation inserts
  nothing, and it needs the overlap scheduler's future map.
- `offload_release` is `DecodeKVCacheOffloadManager.finalize_release_on_finish`, the caller that reaches
  `_release_finished_req` once a request finished with no offload write in flight, behind the raw guard
  `req_pool_idx is None or == -1` that PR #37167 kept. With `sentinel` 1 a record without a row carries `-1`
  there, as older frees and pool fakes leave it; an early return is a refusal. From 0.5.21 it frees the row from
  `cache_protected_len` and gives the tree lock back (`offload_frees`), so the release-path differential holds it
  to `release_kv_cache(is_insert=False)` with a protected prefix too.
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from impl.records import ReqStatus
from impl.scheduler import tokens_needed
from impl.target import OFFLOAD_FROM_PROTECTED, PoolConfig, Refused
from impl.upstream.releases import version_key

if TYPE_CHECKING:
    from impl.upstream.target import SglangPool

SENTINEL_ROW = -1  # what a legacy free or a pool fake leaves in `req_pool_idx` in place of None
# The first release whose `_release_finished_req` frees from `cache_protected_len` and unlocks the request's lock
# (0.5.21: `unpin(req)`, 0.5.22 on: `unlock(req.lock)`). Before it the offload release of a tree's request is the
# subject of two known findings (`offload-release-protected-drift`, `offload-release-unified-crash`).
OFFLOAD_FROM_PROTECTED_SINCE = "0.5.21"


def offload_frees(version: str) -> str | None:
    """What the offload release of sglang `version` frees (`impl.target.Target.offload_frees`): None, not compared,
    before `OFFLOAD_FROM_PROTECTED_SINCE`. Read off the version, not the code: a change that takes the fix back out
    must be held to the fixed contract and fail it, not be read as another contract."""
    return OFFLOAD_FROM_PROTECTED if version_key(version) >= version_key(OFFLOAD_FROM_PROTECTED_SINCE) else None


def new_decode_pool(config: PoolConfig) -> Any:
    """`DecodeReqToTokenPool`: `rows` running rows plus `pre_alloc_size` rows for pre-allocated requests."""
    from sglang.srt.disaggregation.decode import DecodeReqToTokenPool

    return DecodeReqToTokenPool(config.rows, config.width, config.device, False, config.pre_alloc_size)


def _prealloc_queue(pool: SglangPool) -> Any:
    """A `DecodePreallocQueue` holding only what `_pre_alloc` reads (no transfer engine, no hybrid pools)."""
    from sglang.srt.disaggregation.decode import DecodePreallocQueue

    radix = pool.config.cache == "radix"
    queue = object.__new__(DecodePreallocQueue)
    queue.req_to_token_pool = pool.req_to_token_pool
    queue.token_to_kv_pool_allocator = pool.allocator
    queue.tree_cache = pool.cache
    queue.token_to_kv_pool = None
    queue.scheduler = types.SimpleNamespace(
        enable_hisparse=False,
        tp_worker=types.SimpleNamespace(is_hybrid_swa=False),
        sliding_window_size=None,
        server_args=types.SimpleNamespace(disaggregation_decode_enable_radix_cache=radix),  # 0.5.18 reads it here
    )
    return queue


@contextlib.contextmanager
def _decode_radix_cache(on: bool) -> Iterator[None]:
    """The decode side's radix-cache switch as 0.5.23 reads it (`get_disagg()`); 0.5.18 reads the stand-in's."""
    from sglang.srt.runtime_context import get_disagg

    with get_disagg().override(disaggregation_decode_enable_radix_cache=on):
        yield


def _bind_root(req: Any, cache: Any) -> None:
    """What the decode queue's prefix match (`_match_prefix_and_lock`) leaves on a request with no hit: its
    `last_node` is the tree's root (locking the root is a no-op)."""
    if hasattr(cache, "root_node_handle"):  # 0.5.23's unified tree
        req.last_node = cache.root_node_handle(req.extra_key)
    else:
        req.last_node = cache.root_node


def pd_prealloc(pool: SglangPool, rid: int, fill_len: int, family: int) -> int:
    """Pre-allocate a transferred request of `fill_len` prompt tokens; refused as the reference refuses it
    (a known id, a length outside the row, no free row or slots). Returns its row."""
    if rid in pool.reqs:
        raise Refused(f"request {rid} already exists")
    if not 1 <= fill_len <= pool.config.width:
        raise Refused(f"fill length {fill_len} is not in [1, row width {pool.config.width}]")
    entry = pool._new_entry(rid, fill_len, family)
    pool._check_capacity(1, tokens_needed(pool.config.page_size, 0, fill_len))
    req, queue = entry.req, _prealloc_queue(pool)
    # The prefill side sent the prompt; this harness appends each output when its KV is computed, so no output
    # is pending and `_pre_alloc_fill_len` is the prompt's length.
    radix = pool.config.cache == "radix"
    if radix:
        _bind_root(req, pool.cache)
    with _decode_radix_cache(radix):
        pool._upstream(lambda: queue._pre_alloc(req))
    batch = pool.dialect.new_batch([req], pool.req_to_token_pool, pool.allocator, pool.cache)
    pool._upstream(batch.prepare_for_prebuilt)  # it asserts the row holds the prompt the transfer fills
    entry.batch, entry.status = batch, ReqStatus.DECODING
    pool.reqs[rid] = entry
    return int(pool.dialect.row(req) or 0)


def _offload_manager(pool: SglangPool) -> Any:
    """A `DecodeKVCacheOffloadManager` holding only what the finish-time release reads (no host pool: nothing
    was offloaded, so no write is in flight)."""
    from sglang.srt.disaggregation.decode_kvcache_offload_manager import DecodeKVCacheOffloadManager

    manager = object.__new__(DecodeKVCacheOffloadManager)
    manager.req_to_token_pool = pool.req_to_token_pool
    manager.token_to_kv_pool_allocator = pool.allocator
    manager.tree_cache = pool.cache
    manager.page_size = pool.config.page_size
    manager.offloaded_state = {}
    manager.offload_inflight = {}
    return manager


def offload_release(pool: SglangPool, rid: int, sentinel: int) -> None:
    """The offload manager's release of a finished request (`finalize_release_on_finish`); with `sentinel` 1 the
    record's `req_pool_idx` reads `-1` for the call. Refused where it returns early."""
    entry = pool._get(rid)
    if entry.status not in (ReqStatus.DECODING, ReqStatus.FINISHED):
        raise Refused(f"request {rid} is {entry.status.value}; the offload manager releases finished requests")
    if sentinel not in (0, 1):
        raise Refused(f"sentinel must be 0 or 1, got {sentinel}")
    req, dialect = entry.req, pool.dialect
    before = dialect.row(req)
    if sentinel and before is not None:
        raise Refused(f"request {rid} holds a row; only a record without one carries the sentinel")
    if entry.status is ReqStatus.DECODING:
        dialect.mark_finished(req)
    dialect.set_row(req, SENTINEL_ROW if sentinel else before)
    try:
        pool._upstream(lambda: _offload_manager(pool).finalize_release_on_finish(req))
    finally:
        if dialect.row(req) == SENTINEL_ROW:
            dialect.set_row(req, before)
    if dialect.row(req) is not None or sentinel or before is None:
        if entry.status is ReqStatus.DECODING:
            req.finished_reason = None
        read = SENTINEL_ROW if sentinel else before
        raise Refused(f"request {rid}: req_pool_idx is {read}; the offload release returns early")
    pool._retire(entry)
