"""What the release and allocation paths need from a prefix cache (`ChunkCache` or `RadixCache`)."""

from __future__ import annotations

from typing import Protocol

import torch

from impl.allocator import BaseTokenToKVPoolAllocator
from impl.faults import FaultSet
from impl.field_copy import FieldCopy
from impl.records import Req
from impl.req_pool import ReqToTokenPool


class PrefixCache(Protocol):
    """The cache interface of SGLang's `BasePrefixCache` that the memory lifecycle calls."""

    req_to_token_pool: ReqToTokenPool
    allocator: BaseTokenToKVPoolAllocator
    faults: FaultSet

    def supports_mamba(self) -> bool: ...

    def evictable_size(self) -> int: ...

    def protected_size(self) -> int: ...

    def evict(self, num_tokens: int) -> int: ...

    def row_slots(self, req: Req, start: int, end: int) -> torch.Tensor: ...

    def free_kv_row(self, req: Req, ranges: list[tuple[int, int]]) -> None: ...

    def cache_finished_req(self, req: Req, is_insert: bool, kv_len_to_handle: int) -> None: ...

    def cache_unfinished_req(self, req: Req) -> None: ...


class RowRelease(FieldCopy):
    """The row access both caches share (upstream's `BasePrefixCache.free_kv_row`): slots of the request's row.

    The pages freed are the same as upstream's, not their order: each range goes through `allocator.free`
    (`torch.unique`, ascending page ids), where 0.5.23 frees one slot per page in row order (`free_page_ids`).
    The lockstep does not observe free-list order; after such a release the two pools can hand out different
    page ids (docs/upstream-api.md).
    """

    req_to_token_pool: ReqToTokenPool
    allocator: BaseTokenToKVPoolAllocator

    def row_slots(self, req: Req, start: int, end: int) -> torch.Tensor:
        assert req.kv.req_pool_idx is not None
        return self.req_to_token_pool.req_to_token[req.kv.req_pool_idx, start:end].to(torch.int64)

    def free_kv_row(self, req: Req, ranges: list[tuple[int, int]]) -> None:
        for start, end in ranges:
            if start < end:
                self.allocator.free(self.row_slots(req, start, end))
