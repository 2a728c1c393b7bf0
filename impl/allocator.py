"""Token-slot allocators: the shared base (free groups, sorted release) and the page-size-1 allocator."""

from __future__ import annotations

import torch

from impl.field_copy import FieldCopy
from impl.req_pool import ContractViolation


class BaseTokenToKVPoolAllocator(FieldCopy):
    """Free pages live in `free_pages`; with `need_sort`, frees go to `release_pages` and merge lazily."""

    def __init__(self, size: int, page_size: int, device: str = "cpu", need_sort: bool = False):
        self.size = size
        self.page_size = page_size
        self.device = device
        self.need_sort = need_sort
        self.free_group: list[torch.Tensor] | None = None
        self.free_pages: torch.Tensor = self._empty()
        self.release_pages: torch.Tensor = self._empty()
        self.clear()

    def clear(self) -> None:
        raise NotImplementedError

    def available_size(self) -> int:
        return (len(self.free_pages) + len(self.release_pages)) * self.page_size

    def merge_and_sort_free(self) -> None:
        if self.release_pages.numel() > 0:
            self.free_pages = torch.sort(torch.cat((self.free_pages, self.release_pages))).values
            self.release_pages = self._empty()

    def free_group_begin(self) -> None:
        # Not re-entrant: a nested begin would drop the frees already pending (0.5.18 lets it; 0.5.23 asserts).
        if self.free_group is not None:
            raise ContractViolation("free groups cannot be nested")
        self.free_group = []

    def pending_pages(self) -> torch.Tensor:
        """The pages freed into the open free group, each as often as its free will release it."""
        group = self.free_group or []
        if not group:
            return self._empty()
        slots = torch.cat(group)
        return slots if self.page_size == 1 else torch.unique(slots // self.page_size)

    def free_group_end(self) -> None:
        pending, self.free_group = self.free_group, None
        if pending:
            self.free(torch.cat(pending))

    def free(self, indices: torch.Tensor) -> None:
        raise NotImplementedError

    def free_segment(self, indices: torch.Tensor, start_pos: int) -> None:
        """Free one row segment starting at row position `start_pos` (whole pages in the paged allocator)."""
        self.free(indices)

    def free_segments(self, segments: list[tuple[torch.Tensor, int]]) -> None:
        """Free ascending, disjoint segments of one row; with page size 1 no page is shared between them."""
        for indices, start_pos in segments:
            self.free_segment(indices, start_pos)

    def _empty(self) -> torch.Tensor:
        return torch.empty(0, dtype=torch.int64, device=self.device)


class TokenToKVPoolAllocator(BaseTokenToKVPoolAllocator):
    """Page size 1: slot 0 is reserved; alloc takes from the head, free appends to the tail (FIFO)."""

    def __init__(self, size: int, device: str = "cpu", need_sort: bool = False):
        super().__init__(size, 1, device, need_sort)

    def clear(self) -> None:
        self.free_pages = torch.arange(1, self.size + 1, dtype=torch.int64, device=self.device)
        self.release_pages = self._empty()
        self.free_group = None

    def alloc(self, need_size: int) -> torch.Tensor | None:
        if self.need_sort and need_size > len(self.free_pages):
            self.merge_and_sort_free()
        if need_size > len(self.free_pages):
            return None
        out = self.free_pages[:need_size]
        self.free_pages = self.free_pages[need_size:]
        return out

    def free(self, indices: torch.Tensor) -> None:
        # No dedup and no range check, as upstream: a double free duplicates ids in the free list.
        if indices.numel() == 0:
            return
        if self.free_group is not None:
            self.free_group.append(indices.clone())
        elif self.need_sort:
            self.release_pages = torch.cat((self.release_pages, indices))
        else:
            self.free_pages = torch.cat((self.free_pages, indices))
