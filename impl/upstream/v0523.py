"""sglang 0.5.23: the whole record in `req.kv`, `release_kv_cache(req, cache, *, checkpoint)`, no ChunkCache."""

from __future__ import annotations

from typing import Any

import torch

from impl.engine import RecordView
from impl.upstream.dialects import Dialect


class Dialect0523(Dialect):
    """Speaks sglang 0.5.23."""

    version = "0.5.23"
    glue_fields = (
        "origin_input_ids",
        "full_untruncated_fill_ids",
        "prefix_len",
        "extend_end",
        "last_node",
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

    def new_cache(self, pool: Any, allocator: Any, page_size: int = 1) -> Any:
        from sglang.srt.mem_cache.cache_init_params import CacheInitParams
        from sglang.srt.mem_cache.unified_cache.components import ComponentType
        from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache

        # What registry.create_unified_radix_cache builds for --disable-radix-cache on a full-attention model.
        params = CacheInitParams(
            disable=True,
            req_to_token_pool=pool,
            token_to_kv_pool_allocator=allocator,
            page_size=page_size,
            tree_components=(ComponentType.FULL,),
        )
        return UnifiedRadixCache(params)

    def row(self, req: Any) -> int | None:
        return req.kv.req_pool_idx

    def set_row(self, req: Any, row: int | None) -> None:
        req.kv.req_pool_idx = row

    def committed_len(self, req: Any) -> int:
        return req.kv.kv_committed_len

    def protected_len(self, req: Any) -> int:
        return req.kv.cache_protected_len

    def set_protected_len(self, req: Any, length: int) -> None:
        req.kv.cache_protected_len = length

    def record_view(self, req: Any, status: str, prompt_len: int | None) -> RecordView:
        kv = req.kv
        return RecordView(
            row=kv.req_pool_idx,
            protected_len=kv.cache_protected_len,
            committed_len=kv.kv_committed_len,
            allocated_len=kv.kv_allocated_len,
            inflight_middle_chunks=req.inflight_middle_chunks,
            status=status,
            prefix_len=req.prefix_len,
            extend_end=req.extend_end or 0,
            prompt_len=prompt_len,
        )

    def open_extend(self, req: Any, cache: Any, rematch: bool, seq_len: int) -> None:
        if rematch:
            req.init_next_round_input(cache)  # sets prefix_len and cache_protected_len from the match
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
