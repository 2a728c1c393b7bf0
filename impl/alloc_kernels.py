"""Slot math of the paged allocator's extend and decode steps, in three backends with identical output.

`oracle` walks each request's positions in plain Python (the readable reference), `torch` computes every
slot at once from per-token tensors (the CPU default), `triton` launches one program per request (compiled
on CUDA, interpreted on CPU). Each reads the free list from its head and never changes it; a slot whose
page lies past the end of the free list comes out as -1, and the caller discards such an output.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Literal

import torch

from impl.triton_env import KERNELS_MODULE, prepare_triton
from properties.vocabulary import ceil_align, num_new_pages

Backend = Literal["oracle", "torch", "triton"]
BACKENDS: tuple[Backend, ...] = ("oracle", "torch", "triton")
MISSING_SLOT = -1


def alloc_extend(
    prefix_lens: torch.Tensor,
    seq_lens: torch.Tensor,
    last_loc: torch.Tensor,
    free_pages: torch.Tensor,
    page_size: int,
    backend: Backend = "torch",
) -> torch.Tensor:
    """Slots for positions `[prefix_len, seq_len)` of each request, concatenated in batch order."""
    if backend == "oracle":
        return _extend_oracle(prefix_lens, seq_lens, last_loc, free_pages, page_size)
    if backend == "torch":
        return _extend_torch(prefix_lens, seq_lens, last_loc, free_pages, page_size)
    if backend == "triton":
        extend_num_tokens = int((seq_lens - prefix_lens).sum())
        kernels = _triton_kernels(seq_lens.device)
        return kernels.launch_alloc_extend(prefix_lens, seq_lens, last_loc, free_pages, page_size, extend_num_tokens)
    raise ValueError(f"unknown backend {backend!r}; known: {', '.join(BACKENDS)}")


def alloc_decode(
    seq_lens: torch.Tensor,
    last_loc: torch.Tensor,
    free_pages: torch.Tensor,
    page_size: int,
    backend: Backend = "torch",
) -> torch.Tensor:
    """One slot per request for position `seq_len − 1` (`seq_lens` count the new token)."""
    if backend == "oracle":
        return _extend_oracle(seq_lens - 1, seq_lens, last_loc, free_pages, page_size)
    if backend == "torch":
        return _decode_torch(seq_lens, last_loc, free_pages, page_size)
    if backend == "triton":
        kernels = _triton_kernels(seq_lens.device)
        return kernels.launch_alloc_decode(seq_lens, last_loc, free_pages, page_size)
    raise ValueError(f"unknown backend {backend!r}; known: {', '.join(BACKENDS)}")


def _triton_kernels(device: torch.device) -> ModuleType:
    prepare_triton(device)
    return importlib.import_module(KERNELS_MODULE)


def _extend_oracle(
    prefix_lens: torch.Tensor,
    seq_lens: torch.Tensor,
    last_loc: torch.Tensor,
    free_pages: torch.Tensor,
    page_size: int,
) -> torch.Tensor:
    """Walk positions in order: fill the prefix's open page after `last_loc`, then take pages from the head."""
    free = free_pages.tolist()
    next_free = 0
    out: list[int] = []
    for pre, seq, last in zip(prefix_lens.tolist(), seq_lens.tolist(), last_loc.tolist(), strict=True):
        open_page_end = ceil_align(pre, page_size)
        page = MISSING_SLOT
        for pos in range(pre, seq):
            if pos < open_page_end:
                out.append(last + 1 + pos - pre)
                continue
            if pos % page_size == 0:
                page = free[next_free] if next_free < len(free) else MISSING_SLOT
                next_free += 1
            out.append(page * page_size + pos % page_size if page != MISSING_SLOT else MISSING_SLOT)
    return torch.tensor(out, dtype=torch.int64, device=seq_lens.device)


def _extend_torch(
    prefix_lens: torch.Tensor,
    seq_lens: torch.Tensor,
    last_loc: torch.Tensor,
    free_pages: torch.Tensor,
    page_size: int,
) -> torch.Tensor:
    """Per token: its request, its position, and either the prefix's open page or its new page's index."""
    extend_lens = seq_lens - prefix_lens
    new_pages = num_new_pages(prefix_lens, seq_lens, page_size)
    out_start = torch.cumsum(extend_lens, 0) - extend_lens
    page_start = torch.cumsum(new_pages, 0) - new_pages
    open_page_end = ceil_align(prefix_lens, page_size)

    extend_num_tokens = int(extend_lens.sum())
    req = torch.repeat_interleave(
        torch.arange(seq_lens.numel(), device=seq_lens.device), extend_lens, output_size=extend_num_tokens
    )
    offset = torch.arange(extend_num_tokens, device=seq_lens.device) - out_start[req]
    pos = prefix_lens[req] + offset
    on_open_page = pos < open_page_end[req]
    page_idx = page_start[req] + (pos - open_page_end[req]) // page_size
    fresh = _page_slots(free_pages, torch.where(on_open_page, -1, page_idx), pos % page_size, page_size)
    return torch.where(on_open_page, last_loc[req] + 1 + offset, fresh)


def _decode_torch(
    seq_lens: torch.Tensor, last_loc: torch.Tensor, free_pages: torch.Tensor, page_size: int
) -> torch.Tensor:
    new_page = num_new_pages(seq_lens - 1, seq_lens, page_size)
    page_idx = torch.cumsum(new_page, 0) - new_page
    fresh = _page_slots(free_pages, torch.where(new_page == 1, page_idx, -1), torch.zeros_like(seq_lens), page_size)
    return torch.where(new_page == 0, last_loc + 1, fresh)


def _page_slots(
    free_pages: torch.Tensor, page_idx: torch.Tensor, in_page: torch.Tensor, page_size: int
) -> torch.Tensor:
    """`free_pages[page_idx] * page_size + in_page`, or MISSING_SLOT where `page_idx` is -1 or past the list."""
    missing = (page_idx < 0) | (page_idx >= free_pages.numel())
    # One padding entry makes every index valid, so the gather needs no branch per token.
    padded = torch.cat((free_pages, free_pages.new_full((1,), MISSING_SLOT)))
    page = padded[torch.where(missing, free_pages.numel(), page_idx)]
    return torch.where(missing, MISSING_SLOT, page * page_size + in_page)
