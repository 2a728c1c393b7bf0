"""sglang 0.5.23: the whole record in `req.kv`, `release_kv_cache(req, cache, *, checkpoint)`, no ChunkCache."""

from __future__ import annotations

from array import array
from typing import Any

import torch

from impl.target import PoolConfig, RecordView
from impl.upstream.dialects import EMPTY_TREE, GLUE_LOCKS, Dialect, EvictionLog, TreeView, slot_tensor

# The class each `PoolConfig.tree_core` builds (`unified_cache/tree_core_registry.py`).
TREE_CORE_CLASSES = {"rust": "RustUnifiedTreeCore", "python": "UnifiedTreeCore"}


class Dialect0523(Dialect):
    """Speaks sglang 0.5.23."""

    version = "0.5.23"
    glue_fields = (
        "origin_input_ids",
        "full_untruncated_fill_ids",
        "prefix_len",
        "extend_end",
        "last_node",
        "lock",
        "finished_reason",
    )

    def select_kernels(self, paged: Any, kernels: bool) -> None:
        # Upstream reads the switch from the platform's Triton support (False on CPU); its interpreted kernels run
        # because the adapter set TRITON_INTERPRET=1 before importing sglang.
        paged.use_triton_kernels = kernels

    def release_slots(self, allocator: Any) -> torch.Tensor:
        if allocator.page_size == 1:
            return super().release_slots(allocator)
        # The paged allocator stages freed pages in a list of tensors (`staged_pages`), newest last.
        staged = allocator.staged_pages
        return torch.cat(staged[::-1]) if staged else torch.empty(0, dtype=torch.int64)

    def new_cache(self, pool: Any, allocator: Any, config: PoolConfig) -> Any:
        from sglang.srt.mem_cache.cache_init_params import CacheInitParams
        from sglang.srt.mem_cache.unified_cache.components import ComponentType
        from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache

        # What registry.create_unified_radix_cache builds for a full-attention model: disabled for
        # --disable-radix-cache, else the tree on the named core (named, because a core that cannot load
        # falls back to the Python one silently).
        radix = config.cache == "radix"
        params = CacheInitParams(
            disable=not radix,
            req_to_token_pool=pool,
            token_to_kv_pool_allocator=allocator,
            page_size=config.page_size,
            tree_components=(ComponentType.FULL,),
            tree_core_backend=config.tree_core if radix else None,
        )
        cache = UnifiedRadixCache(params)
        core = type(cache.tree_core).__name__
        if radix and core != TREE_CORE_CLASSES[config.tree_core]:
            raise ValueError(f"tree core {config.tree_core!r} asked for, sglang built {core} (it fell back)")
        return cache

    def lock(self, req: Any, cache: Any) -> None:
        req.lock = cache.lock(req.last_node)

    def unlock(self, req: Any, cache: Any) -> None:
        cache.unlock(req.lock)
        req.lock = None

    def lock_handle(self, req: Any) -> Any:
        return req.lock

    def tree_locked(self, req: Any, cache: Any) -> bool:
        if cache.disable or req.lock is None:
            return False
        try:
            return not cache.is_root(req.lock.node)
        except KeyError:  # the Rust core's answer for a node of a tree since reset: it locks nothing here
            return False

    def peek(self, cache: Any, token_ids: list[int]) -> tuple[int, frozenset[int]]:
        from sglang.srt.mem_cache.radix_cache import RadixKey

        if cache.disable or not token_ids:
            return 0, frozenset()
        matched, node, _ = cache.tree_core.match_full_device_prefix(RadixKey(array("q", token_ids)))
        if matched == 0:
            return 0, frozenset()
        path = cache.path_device_indices(node)[:matched].tolist()
        return matched, frozenset(path) & frozenset(self._walk(cache, unlocked_only=True))

    def tree_view(self, cache: Any) -> TreeView:
        if cache.disable:
            return EMPTY_TREE
        slots = self._walk(cache, unlocked_only=False)
        unlocked = self._walk(cache, unlocked_only=True)
        problem = None
        try:
            cache.sanity_check()
        except Exception as exc:  # upstream's check raises AssertionError or its own errors; all are findings
            problem = f"{type(exc).__name__}: {exc}"
        return TreeView(slot_tensor(slots), slot_tensor(unlocked), len(unlocked), len(slots) - len(unlocked), problem)

    def watch_evictions(self, cache: Any, allocator: Any, on_demand: bool) -> EvictionLog:
        log = EvictionLog(on_demand)
        if cache.disable:
            return log
        evict_for_alloc = cache.evict_for_alloc

        def logged(params: Any, **kwargs: Any) -> Any:
            result = evict_for_alloc(params, **kwargs)
            log.entries.append((params.num_tokens, result.num_tokens_evicted))
            return result

        cache.evict_for_alloc = logged
        if not on_demand:
            # Allocation asks the allocator to make room (`evict_to_free_tokens`); without on-demand eviction
            # it makes none, and the tree is evicted only by the explicit step.
            allocator.evict_to_free_tokens = lambda tree_cache, num_tokens: None
        return log

    def evict(self, cache: Any, num_tokens: int) -> int:
        from sglang.srt.mem_cache.base_prefix_cache import EvictParams

        return int(cache.evict(EvictParams(num_tokens=num_tokens)).num_tokens_evicted)

    def _walk(self, cache: Any, unlocked_only: bool) -> list[int]:
        walk = cache.tree_core.walk_for_kv_canary(unlocked_only=unlocked_only, swa_resident_only=False)
        return [int(slot) for slot in walk.slot_indices.tolist()]

    def row(self, req: Any) -> int | None:
        return req.kv.req_pool_idx

    def set_row(self, req: Any, row: int | None) -> None:
        req.kv.req_pool_idx = row

    def committed_len(self, req: Any) -> int:
        return req.kv.kv_committed_len

    def set_committed_len(self, req: Any, length: int) -> None:
        req.kv.kv_committed_len = length

    def protected_len(self, req: Any) -> int:
        return req.kv.cache_protected_len

    def set_protected_len(self, req: Any, length: int) -> None:
        req.kv.cache_protected_len = length

    def record_view(self, req: Any, cache: Any, status: str, prompt_len: int | None) -> RecordView:
        kv = req.kv
        return RecordView(
            row=kv.req_pool_idx,
            protected_len=kv.cache_protected_len,
            committed_len=kv.kv_committed_len,
            allocated_len=kv.kv_allocated_len,
            inflight_middle_chunks=req.inflight_middle_chunks,
            status=status,
            prefix_len=req.prefix_len,
            tree_locked=self.tree_locked(req, cache),
            extend_end=req.extend_end or 0,
            prompt_len=prompt_len,
        )

    def open_extend(self, req: Any, cache: Any, rematch: bool, seq_len: int) -> None:
        if rematch:
            req.init_next_round_input(cache)  # sets prefix_len and cache_protected_len from the match
            setattr(req, GLUE_LOCKS, getattr(req, GLUE_LOCKS, 0) + 1)
            self.lock(req, cache)
        else:
            req.init_next_round_input()  # a continuation keeps its prefix: no tree, as for the chunked request
        req.extend_end = seq_len  # PrefillAdder's extend range [prefix_len, seq_len)

    def flush(self, pool: Any, allocator: Any, cache: Any) -> None:
        super().flush(pool, allocator, cache)
        pool.reset_aux_cache_allocator()  # 0.5.23's flush_cache resets the row pool's aux cache too

    def retract(self, req: Any, pool: Any, allocator: Any, cache: Any, remaining: int) -> None:
        self.schedule_batch.release_req(
            req=req,
            remaing_req_count=remaining,
            req_to_token_pool=pool,
            token_to_kv_pool_allocator=allocator,
            tree_cache=cache,
            hisparse_coordinator=None,
        )

    def stash(self, req: Any, cache: Any) -> None:
        self.common.checkpoint_kv_cache(req, cache)

    def release(self, req: Any, cache: Any, insert: bool) -> None:
        self.common.release_kv_cache(req, cache, checkpoint=insert)

    def pp_release_manual(self, req: Any, cache: Any) -> None:
        # 0.5.23 has no hand-written PP release (profiling calls release_kv_cache(checkpoint=False)); this is
        # 0.5.18's inline sequence (see Dialect0518) on 0.5.23's record, for comparison with release_kv_cache.
        if not req.kv.holds_kv:
            return
        pool = cache.req_to_token_pool
        cache.token_to_kv_pool_allocator.free(pool.req_to_token[req.kv.req_pool_idx, : req.extend_end])
        pool.free(req)
        req.kv.mark_kv_released()
