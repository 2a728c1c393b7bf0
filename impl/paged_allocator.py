"""`PagedTokenToKVPoolAllocator`: hands out whole pages; frees any token's page; page 0 is reserved.

The slot of position j on page p is `p * page_size + j`. Allocation takes pages from the head of
`free_pages`; frees prepend (LIFO reuse), or go to `release_pages` under `need_sort`, merged and sorted only
when an allocation finds the head short. The slot math of extend and decode lives in `impl.alloc_kernels`.
"""

from __future__ import annotations

import torch

from impl.alloc_kernels import BACKENDS, Backend, alloc_decode, alloc_extend
from impl.allocator import BaseTokenToKVPoolAllocator
from impl.req_pool import ContractViolation
from impl.triton_env import prepare_triton
from properties.vocabulary import num_new_pages


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ContractViolation(message)


def _check_batch(**batch: torch.Tensor) -> None:
    for name, tensor in batch.items():
        _require(tensor.dtype == torch.int64 and tensor.dim() == 1, f"{name} must be a 1-D int64 tensor")
    _require(len({tensor.shape for tensor in batch.values()}) == 1, "one entry per request in every batch tensor")


class PagedTokenToKVPoolAllocator(BaseTokenToKVPoolAllocator):
    """Page-granular allocator; `backend` picks the kernels of `alloc_extend` / `alloc_decode`."""

    def __init__(
        self, size: int, page_size: int, device: str = "cpu", need_sort: bool = False, backend: Backend = "torch"
    ) -> None:
        assert page_size >= 1, f"page size {page_size} must be positive"
        if backend not in BACKENDS:
            raise ValueError(f"unknown backend {backend!r}; known: {', '.join(BACKENDS)}")
        if backend == "triton":
            prepare_triton(device)
        self.backend: Backend = backend
        self.num_pages = size // page_size
        super().__init__(size, page_size, device, need_sort)

    def clear(self) -> None:
        self.free_pages = torch.arange(1, self.num_pages + 1, dtype=torch.int64, device=self.device)
        self.release_pages = self._empty()
        self.free_group = None
        self.free_page_reps_group: list[torch.Tensor] = []

    def alloc(self, need_size: int) -> torch.Tensor | None:
        """Slots of `need_size // page_size` whole pages from the head; None (nothing taken) when short."""
        _require(
            need_size >= 0 and need_size % self.page_size == 0,
            f"alloc size {need_size} is not a whole number of pages of {self.page_size}",
        )
        pages_needed = need_size // self.page_size
        self._merge_if_short(pages_needed)
        if pages_needed > len(self.free_pages):
            return None
        pages = self.free_pages[:pages_needed]
        self.free_pages = self.free_pages[pages_needed:]
        in_page = torch.arange(self.page_size, dtype=torch.int64, device=self.device)
        return (pages[:, None] * self.page_size + in_page).reshape(-1)

    def alloc_extend(
        self, prefix_lens: torch.Tensor, seq_lens: torch.Tensor, last_loc: torch.Tensor
    ) -> torch.Tensor | None:
        """Slots for positions `[prefix_len, seq_len)` of each request; None (free list intact) when short."""
        _check_batch(prefix_lens=prefix_lens, seq_lens=seq_lens, last_loc=last_loc)
        _require(
            bool((prefix_lens >= 0).all()) and bool((seq_lens >= prefix_lens).all()),
            "every request needs 0 <= prefix_len <= seq_len",
        )
        _require(
            bool(((last_loc + 1) % self.page_size == prefix_lens % self.page_size).all()),
            "last_loc must be the prefix's last slot (-1 when the prefix is empty)",
        )
        extend_num_tokens = int((seq_lens - prefix_lens).sum())
        # Over-estimates the pages needed by at most one per request, as upstream does, to merge rarely.
        self._merge_if_short(extend_num_tokens // self.page_size + len(seq_lens) + 1)
        out = alloc_extend(prefix_lens, seq_lens, last_loc, self.free_pages, self.page_size, self.backend)
        return self._take(int(num_new_pages(prefix_lens, seq_lens, self.page_size).sum()), out)

    def alloc_decode(self, seq_lens: torch.Tensor, last_loc: torch.Tensor) -> torch.Tensor | None:
        """One slot per request for its new token (`seq_lens` include it); None (free list intact) when short."""
        _check_batch(seq_lens=seq_lens, last_loc=last_loc)
        _require(bool((seq_lens >= 1).all()), "every decoding request has seq_len >= 1")
        _require(
            bool(((last_loc + 2) % self.page_size == seq_lens % self.page_size).all()),
            "last_loc must be the slot of position seq_len - 2",
        )
        self._merge_if_short(len(seq_lens))
        out = alloc_decode(seq_lens, last_loc, self.free_pages, self.page_size, self.backend)
        return self._take(int(num_new_pages(seq_lens - 1, seq_lens, self.page_size).sum()), out)

    def free(self, indices: torch.Tensor) -> None:
        """Free the page of every slot in `indices` (duplicates collapse within one call); defer in a group."""
        if indices.numel() == 0:
            return
        if self.free_group is not None:
            self.free_group.append(indices.clone())  # the caller may reuse its buffer before the group ends
            return
        # No check against pages already free, as upstream: a page freed by two calls is listed twice.
        self._release_page_ids(torch.unique(indices // self.page_size))

    def free_segment(self, indices: torch.Tensor, start_pos: int) -> None:
        """Free the pages under row positions `[start_pos, start_pos + len(indices))`, one representative each."""
        if indices.numel() == 0:
            return
        offset = start_pos % self.page_size
        if offset == 0:
            reps = indices[:: self.page_size]
        else:
            reps = torch.cat((indices[:1], indices[self.page_size - offset :: self.page_size]))
        if self.free_group is not None:
            self.free_page_reps_group.append(reps.clone())
            return
        # Sync-free by design (no unique): a page must appear in at most one segment call per group.
        self._release_page_ids(reps // self.page_size)

    def free_segments(self, segments: list[tuple[torch.Tensor, int]]) -> None:
        """Free ascending, disjoint segments of one row; a page two neighbours share is freed once."""
        previous_last_page: int | None = None
        for indices, start_pos in segments:
            if indices.numel() == 0:
                continue
            first_page = int(indices[0]) // self.page_size
            last_page = int(indices[-1]) // self.page_size
            if first_page == previous_last_page:
                to_boundary = -start_pos % self.page_size
                indices, start_pos = indices[to_boundary:], start_pos + to_boundary
            previous_last_page = last_page
            self.free_segment(indices, start_pos)

    def free_group_begin(self) -> None:
        super().free_group_begin()
        self.free_page_reps_group = []

    def free_group_end(self) -> None:
        reps, self.free_page_reps_group = self.free_page_reps_group, []
        super().free_group_end()
        if reps:
            self._release_page_ids(torch.cat(reps) // self.page_size)

    def pending_pages(self) -> torch.Tensor:
        if not self.free_page_reps_group:
            return super().pending_pages()
        reps = [r // self.page_size for r in self.free_page_reps_group]
        return torch.cat([super().pending_pages(), *reps])

    def _release_page_ids(self, page_ids: torch.Tensor) -> None:
        page_ids = page_ids.to(torch.int64)
        if self.need_sort:
            self.release_pages = torch.cat((page_ids, self.release_pages))
        else:
            self.free_pages = torch.cat((page_ids, self.free_pages))

    def _merge_if_short(self, pages_wanted: int) -> None:
        if self.need_sort and pages_wanted > len(self.free_pages):
            self.merge_and_sort_free()

    def _take(self, pages_used: int, out: torch.Tensor) -> torch.Tensor | None:
        # Capacity is checked only after the kernel ran, as upstream; a short list discards `out` whole.
        if pages_used > len(self.free_pages):
            return None
        self.free_pages = self.free_pages[pages_used:]
        return out
