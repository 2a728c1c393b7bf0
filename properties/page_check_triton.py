"""The page check's per-page counts as Triton kernels: compiled on CUDA, interpreted on CPU.

On CPU, `TRITON_INTERPRET=1` must be set before this module is first imported (`@triton.jit` reads it then).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from properties.page_check import PageSnapshot, PageStats

INTERPRETED = triton.knobs.runtime.interpret  # what the @triton.jit decorators below saw
MAX_ROW_BLOCK = 1024  # row positions per program; a program past its row's A returns at once
LIST_BLOCK = 1024  # page-list entries per program


@triton.jit
def _row_refs_kernel(
    req_to_token,
    width,
    live_rows,
    protected_lens,
    allocated_lens,
    own_lo,
    own_hi,
    prefix_count,
    stray,
    page_size,
    slot_end,
    BLOCK: tl.constexpr,
):
    """Program (i, b): positions [b * BLOCK, (b + 1) * BLOCK) ∩ [0, A_i) of live entry i's row."""
    entry = tl.program_id(0)
    start = tl.program_id(1) * BLOCK
    allocated = tl.load(allocated_lens + entry)
    if start < allocated:
        row = tl.load(live_rows + entry)
        protected = tl.load(protected_lens + entry)
        pos = start + tl.arange(0, BLOCK)
        in_range = pos < allocated
        slot = tl.load(req_to_token + row * width + pos, mask=in_range, other=0).to(tl.int64)
        # Compare slots, not pages: Triton's integer division truncates, so a negative slot has no floor page.
        real = in_range & (slot >= page_size) & (slot < slot_end)
        page = tl.where(real, slot // page_size, 0)
        own = real & (pos >= protected)
        tl.atomic_min(own_lo + page, entry, mask=own, sem="relaxed")
        tl.atomic_max(own_hi + page, entry, mask=own, sem="relaxed")
        tl.atomic_add(prefix_count + page, 1, mask=real & (pos < protected), sem="relaxed")
        tl.atomic_add(stray, tl.sum((in_range & ~real).to(tl.int32)), sem="relaxed")


@triton.jit
def _list_refs_kernel(pages, length, counts, stray, num_pages, BLOCK: tl.constexpr):
    """Count each page id of a page list; ids outside 1..num_pages go to `stray`."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    inside = offsets < length
    page = tl.load(pages + offsets, mask=inside, other=0)
    real = inside & (page >= 1) & (page <= num_pages)
    tl.atomic_add(counts + tl.where(real, page, 0), 1, mask=real, sem="relaxed")
    tl.atomic_add(stray, tl.sum((inside & ~real).to(tl.int32)), sem="relaxed")


def triton_page_stats(snap: PageSnapshot) -> PageStats:
    """Per-page counts of a validated snapshot, by one kernel pass over the live rows and one per page list."""
    device = snap.req_to_token.device
    if device.type != "cuda" and not INTERPRETED:
        raise RuntimeError("the Triton page check needs CUDA tensors, or TRITON_INTERPRET=1 set before import")
    n, live = snap.num_pages, snap.live_rows.numel()
    own_lo = torch.full((n + 1,), live, dtype=torch.int32, device=device)
    own_hi = torch.full_like(own_lo, -1)
    prefix_count, free_count, tree_count = (torch.zeros_like(own_lo) for _ in range(3))
    stray = torch.zeros(1, dtype=torch.int32, device=device)
    width = snap.req_to_token.shape[1]
    if live and width:
        block = min(MAX_ROW_BLOCK, triton.next_power_of_2(width))
        _row_refs_kernel[(live, triton.cdiv(width, block))](
            snap.req_to_token,
            width,
            snap.live_rows,
            snap.protected_lens,
            snap.allocated_lens,
            own_lo,
            own_hi,
            prefix_count,
            stray,
            snap.page_size,
            (n + 1) * snap.page_size,  # slots of real pages are [page_size, slot_end)
            BLOCK=block,
        )
    lists = ((snap.free_pages, free_count), (snap.release_pages, free_count), (snap.tree_pages, tree_count))
    for pages, counts in lists:
        if pages.numel():
            grid = (triton.cdiv(pages.numel(), LIST_BLOCK),)
            _list_refs_kernel[grid](pages, pages.numel(), counts, stray, n, BLOCK=LIST_BLOCK)
    return PageStats(free_count, tree_count, prefix_count, own_lo, own_hi, int(stray.item()))
