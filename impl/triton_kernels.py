"""Triton kernels of the paged allocator, one program per request; import only after `prepare_triton`.

A slot whose page lies past the end of the free list is written as -1: the allocator checks capacity only
after the kernel ran and then discards the whole output, so the kernel must not read past the list.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from impl.triton_env import KERNELS_MODULE, require_mode

# Fixed when this module's functions were decorated; `prepare_triton` compares it with the device.
INTERPRETED: bool = bool(triton.knobs.runtime.interpret)

# Tokens per iteration of the whole-page loop; any power of two gives the same output.
NEW_PAGE_BLOCK = 1024


@triton.jit(do_not_specialize=["num_free"], do_not_specialize_on_alignment=["free_pages_ptr"])
def alloc_extend_kernel(
    pre_lens_ptr,
    seq_lens_ptr,
    last_loc_ptr,
    free_pages_ptr,
    out_ptr,
    num_free,
    bs_upper: tl.constexpr,
    page_size: tl.constexpr,
    page_block: tl.constexpr,
    block: tl.constexpr,
):
    """Program `i` writes request i's slots: rest of the prefix's page, whole new pages, trailing part page."""
    pid = tl.program_id(0)
    # Output and page offsets of request i: sums over requests j <= i, minus request i's own term.
    js = tl.arange(0, bs_upper)
    upto = js <= pid
    seq_js = tl.load(seq_lens_ptr + js, mask=upto, other=0)
    pre_js = tl.load(pre_lens_ptr + js, mask=upto, other=0)
    new_js = (seq_js + page_size - 1) // page_size - (pre_js + page_size - 1) // page_size
    seq = tl.load(seq_lens_ptr + pid)
    pre = tl.load(pre_lens_ptr + pid)
    last_loc = tl.load(last_loc_ptr + pid)
    new_pages = (seq + page_size - 1) // page_size - (pre + page_size - 1) // page_size
    out_start = tl.sum(seq_js - pre_js) - (seq - pre)
    page_start = tl.sum(new_js) - new_pages

    pre_ceil = (pre + page_size - 1) // page_size * page_size
    seq_floor = seq // page_size * page_size
    n1 = tl.minimum(seq, pre_ceil) - pre
    n2 = tl.maximum(seq_floor - pre_ceil, 0)
    n3 = seq - pre - n1 - n2

    k = tl.arange(0, page_block)
    tl.store(out_ptr + out_start + k, last_loc + 1 + k, mask=k < n1)

    for run_start in range(0, n2, block):
        k2 = run_start + tl.arange(0, block)
        page_idx = page_start + k2 // page_size
        page = tl.load(free_pages_ptr + page_idx, mask=(k2 < n2) & (page_idx < num_free), other=-1)
        slot = tl.where(page >= 0, page * page_size + k2 % page_size, -1)
        tl.store(out_ptr + out_start + n1 + k2, slot, mask=k2 < n2)

    last_idx = page_start + new_pages - 1
    last_page = tl.load(free_pages_ptr + last_idx, mask=(n3 > 0) & (last_idx < num_free), other=-1)
    tail = tl.where(last_page >= 0, last_page * page_size + k, -1)
    tl.store(out_ptr + out_start + n1 + n2 + k, tail, mask=k < n3)


@triton.jit(do_not_specialize=["num_free"], do_not_specialize_on_alignment=["free_pages_ptr"])
def alloc_decode_kernel(
    seq_lens_ptr,
    last_loc_ptr,
    free_pages_ptr,
    out_ptr,
    num_free,
    bs_upper: tl.constexpr,
    page_size: tl.constexpr,
):
    """Program `i` writes request i's one new slot: after `last_loc`, or the start of its new page."""
    pid = tl.program_id(0)
    js = tl.arange(0, bs_upper)
    upto = js <= pid
    seq_js = tl.load(seq_lens_ptr + js, mask=upto, other=1)
    new_js = (seq_js + page_size - 1) // page_size - (seq_js - 1 + page_size - 1) // page_size
    seq = tl.load(seq_lens_ptr + pid)
    last_loc = tl.load(last_loc_ptr + pid)
    new_page = (seq + page_size - 1) // page_size - (seq - 1 + page_size - 1) // page_size
    page_idx = tl.sum(tl.where(upto, new_js, 0)) - new_page
    page = tl.load(free_pages_ptr + page_idx, mask=(new_page == 1) & (page_idx < num_free), other=-1)
    fresh = tl.where(page >= 0, page * page_size, -1)
    tl.store(out_ptr + pid, tl.where(new_page == 0, last_loc + 1, fresh))


def _launchable(free_pages: torch.Tensor) -> torch.Tensor:
    """The free list as a kernel argument: contiguous, and a null pointer when empty."""
    # An empty slice can point one past its allocation, which the CUDA launcher's pointer check may refuse.
    if free_pages.numel() == 0:
        return torch.empty(0, dtype=free_pages.dtype, device=free_pages.device)
    return free_pages.contiguous()


def launch_alloc_extend(
    prefix_lens: torch.Tensor,
    seq_lens: torch.Tensor,
    last_loc: torch.Tensor,
    free_pages: torch.Tensor,
    page_size: int,
    extend_num_tokens: int,
) -> torch.Tensor:
    """Run `alloc_extend_kernel` over the batch and return its `extend_num_tokens` output slots."""
    require_mode(INTERPRETED, seq_lens.device, f"{KERNELS_MODULE} was imported")
    out = torch.empty(extend_num_tokens, dtype=torch.int64, device=seq_lens.device)
    batch_size = seq_lens.numel()
    if batch_size == 0 or extend_num_tokens == 0:
        return out
    alloc_extend_kernel[(batch_size,)](
        prefix_lens.contiguous(),
        seq_lens.contiguous(),
        last_loc.contiguous(),
        _launchable(free_pages),
        out,
        free_pages.numel(),
        bs_upper=triton.next_power_of_2(batch_size),
        page_size=page_size,
        page_block=triton.next_power_of_2(page_size),
        block=NEW_PAGE_BLOCK,
    )
    return out


def launch_alloc_decode(
    seq_lens: torch.Tensor, last_loc: torch.Tensor, free_pages: torch.Tensor, page_size: int
) -> torch.Tensor:
    """Run `alloc_decode_kernel` over the batch and return one output slot per request."""
    require_mode(INTERPRETED, seq_lens.device, f"{KERNELS_MODULE} was imported")
    batch_size = seq_lens.numel()
    out = torch.empty(batch_size, dtype=torch.int64, device=seq_lens.device)
    if batch_size == 0:
        return out
    alloc_decode_kernel[(batch_size,)](
        seq_lens.contiguous(),
        last_loc.contiguous(),
        _launchable(free_pages),
        out,
        free_pages.numel(),
        bs_upper=triton.next_power_of_2(batch_size),
        page_size=page_size,
    )
    return out
