"""`ChunkCache`: the prefix cache used without a radix tree. It owns no KV; it only frees a record's range."""

from __future__ import annotations

from impl.allocator import BaseTokenToKVPoolAllocator
from impl.faults import NO_FAULTS, FaultSet
from impl.prefix_cache import RowRelease
from impl.records import Req
from impl.req_pool import ReqToTokenPool


class ChunkCache(RowRelease):
    """No tree: prefix matches are empty, locks are no-ops, and nothing is evictable or protected."""

    def __init__(
        self, req_to_token_pool: ReqToTokenPool, allocator: BaseTokenToKVPoolAllocator, faults: FaultSet = NO_FAULTS
    ):
        self.req_to_token_pool = req_to_token_pool
        self.allocator = allocator
        self.faults = faults

    def supports_mamba(self) -> bool:
        return False

    def evictable_size(self) -> int:
        return 0

    def protected_size(self) -> int:
        return 0

    def evict(self, num_tokens: int) -> int:
        """Nothing to evict: the allocation paths' eviction is a no-op without a tree."""
        return 0

    def cache_finished_req(self, req: Req, is_insert: bool, kv_len_to_handle: int) -> None:
        # is_insert has no meaning without a tree; the request's own range [P, n) goes back.
        ranges = [(req.kv.cache_protected_len, kv_len_to_handle)]
        if self.faults.on("double_free_within_group"):
            ranges.append((kv_len_to_handle - 1, kv_len_to_handle))  # vllm #42571: one slot listed twice
        self.free_kv_row(req, ranges)

    def cache_unfinished_req(self, req: Req) -> None:
        """Stash between chunks: the next chunk re-reads its own slots through `prefix_indices`."""
        if self.faults.on("chunk_cache_skip_stash"):
            return  # #33996: skip_radix_cache_insert short-circuited the stash for ChunkCache too
        req.prefix_indices = self.row_slots(req, 0, req.extend_range_end).clone()
