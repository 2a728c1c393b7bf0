"""sglang 0.5.18: record fields on `Req`, an optional `req.kv`, `release_kv_cache(req, cache, is_insert)`."""

from __future__ import annotations

from typing import Any

from impl.engine import RecordView
from impl.upstream.dialects import Dialect


class Dialect0518(Dialect):
    """Speaks sglang 0.5.18, the last release before the row index moved into `ReqKvInfo` (#37094)."""

    version = "0.5.18"
    glue_fields = (
        "origin_input_ids",
        "full_untruncated_fill_ids",
        "prefix_indices",
        "extend_range",
        "last_node",
        "finished_reason",
    )

    def select_kernels(self, paged: Any, kernels: bool) -> None:
        # No switch: alloc_extend / alloc_decode always launch the Triton kernels (interpreted on CPU, since the
        # adapter set TRITON_INTERPRET=1 before importing sglang). `_unsupported` refuses the naive path first.
        if not kernels:
            raise ValueError("sglang 0.5.18's paged allocator has no naive path; use kernel_backend 'triton'")

    def new_cache(self, pool: Any, allocator: Any, page_size: int = 1) -> Any:
        from sglang.srt.mem_cache.cache_init_params import CacheInitParams
        from sglang.srt.mem_cache.chunk_cache import ChunkCache

        # What registry.py builds for --disable-radix-cache with chunked prefill on a full-attention model.
        params = CacheInitParams(
            disable=True, req_to_token_pool=pool, token_to_kv_pool_allocator=allocator, page_size=page_size
        )
        return ChunkCache(params)

    def row(self, req: Any) -> int | None:
        return req.req_pool_idx

    def set_row(self, req: Any, row: int | None) -> None:
        req.req_pool_idx = row

    def committed_len(self, req: Any) -> int:
        return req.kv_committed_len

    def protected_len(self, req: Any) -> int:
        return req.cache_protected_len

    def set_protected_len(self, req: Any, length: int) -> None:
        req.cache_protected_len = length

    def record_view(self, req: Any, status: str, prompt_len: int | None) -> RecordView:
        # A released record is `req.kv is None`: it holds no allocated length.
        allocated_len = 0 if req.kv is None else req.kv.kv_allocated_len
        return RecordView(
            row=req.req_pool_idx,
            protected_len=req.cache_protected_len,
            committed_len=req.kv_committed_len,
            allocated_len=allocated_len,
            inflight_middle_chunks=req.inflight_middle_chunks,
            status=status,
            prefix_len=req.prefix_indices.shape[0],
            extend_end=0 if req.extend_range is None else req.extend_range.end,
            prompt_len=prompt_len,
        )

    def open_extend(self, req: Any, cache: Any, rematch: bool, seq_len: int) -> None:
        if rematch:
            req.init_next_round_input(cache)  # sets prefix_indices and cache_protected_len from the match
        else:
            req.init_next_round_input()  # a continuation keeps its prefix: no tree, as for the chunked request
        req.set_extend_range(len(req.prefix_indices), seq_len)  # PrefillAdder's extend range

    def retract(self, req: Any, pool: Any, allocator: Any, cache: Any, remaining: int) -> None:
        self.schedule_batch.release_req(
            req=req,
            remaing_req_count=remaining,
            server_args=self.server_args,
            req_to_token_pool=pool,
            token_to_kv_pool_allocator=allocator,
            tree_cache=cache,
            hisparse_coordinator=None,
        )

    def stash(self, req: Any, cache: Any) -> None:
        self.common.maybe_cache_unfinished_req(req, cache, chunked=True)

    def release(self, req: Any, cache: Any, insert: bool) -> None:
        self.common.release_kv_cache(req, cache, is_insert=insert)

    def pp_release_manual(self, req: Any, cache: Any) -> None:
        # Scheduler.profile_and_init_predictor (scheduler_pp_mixin.py) releases its synthetic request inline
        # with exactly these steps; the mamba step is left out because this pool has no mamba state.
        if req.req_pool_idx is None:
            return
        pool = cache.req_to_token_pool
        cache.token_to_kv_pool_allocator.free(pool.req_to_token[req.req_pool_idx, : req.extend_range.end])
        pool.free(req)
        req.kv = None
