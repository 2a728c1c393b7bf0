"""Planted bugs for the component lockstep tests, one per kind: each patches a freshly built unit's real object
in place (an instance attribute shadows the class's method), so neither the class nor an installed file changes.

Every plant takes the unit's `raw` object (a reference or an upstream pool or allocator) and works on both the
reference and the upstream classes, except where its name says which (the two `alloc_extend` signatures differ).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import torch

Plant = Callable[[Any], None]


def hands_out_again(raw: Any) -> None:
    """`alloc` puts the pages it hands out back at the head of the free list: the next call hands them out again."""
    original = raw.alloc

    def alloc(need_size: int) -> Any:
        out = original(need_size)
        if out is not None and out.numel():
            raw.free_pages = torch.cat((torch.unique(out // raw.page_size), raw.free_pages))
        return out

    raw.alloc = alloc


def drops_a_free(raw: Any) -> None:
    """`free` forgets the first page it is given."""
    original = raw.free

    def free(free_index: torch.Tensor) -> None:
        first_page = free_index[:1] // raw.page_size
        original(free_index[free_index // raw.page_size != first_page])

    raw.free = free


def refusal_takes_a_page(raw: Any) -> None:
    """`alloc` that returns None (too few pages) drops the head of the free list on its way out."""
    original = raw.alloc

    def alloc(need_size: int) -> Any:
        out = original(need_size)
        if out is None:
            raw.free_pages = raw.free_pages[1:]
        return out

    raw.alloc = alloc


def _new_pages(prefix_lens: torch.Tensor, seq_lens: torch.Tensor, page_size: int) -> int:
    return int(((seq_lens + page_size - 1) // page_size - (prefix_lens + page_size - 1) // page_size).sum())


def reference_extend_offsets_from_head(raw: Any) -> None:
    """The reference's `alloc_extend` with the per-request page offset lost: every request of a batch counts its
    new pages from the head of the free list."""
    original = raw.alloc_extend

    def alloc_extend(prefix_lens: torch.Tensor, seq_lens: torch.Tensor, last_loc: torch.Tensor) -> Any:
        head, outs = raw.free_pages, []
        for i in range(len(seq_lens)):
            raw.free_pages = head
            out = original(prefix_lens[i : i + 1], seq_lens[i : i + 1], last_loc[i : i + 1])
            if out is None:
                raw.free_pages = head
                return None
            outs.append(out)
        raw.free_pages = head[_new_pages(prefix_lens, seq_lens, raw.page_size) :]
        return torch.cat(outs)

    raw.alloc_extend = alloc_extend


def upstream_extend_offsets_from_head(raw: Any) -> None:
    """Upstream's `alloc_extend` (naive path or Triton kernel) with the per-request page offset lost."""
    original = raw.alloc_extend

    def alloc_extend(prefix, prefix_cpu, seq, seq_cpu, last_loc, extend_num_tokens, num_new_pages=None):  # type: ignore[no-untyped-def]
        head, outs = raw.free_pages, []
        for i in range(len(seq)):
            raw.free_pages = head
            one = slice(i, i + 1)
            n = int(seq_cpu[i] - prefix_cpu[i])
            out = original(prefix[one], prefix_cpu[one], seq[one], seq_cpu[one], last_loc[one], n)
            if out is None:
                raw.free_pages = head
                return None
            outs.append(out)
        raw.free_pages = head[_new_pages(prefix_cpu, seq_cpu, raw.page_size) :]
        return torch.cat(outs)

    raw.alloc_extend = alloc_extend


def group_end_drops_pending(raw: Any) -> None:
    """`free_group_end` closes the group without freeing what it held."""
    original = raw.free_group_end

    def free_group_end() -> None:
        raw.free_group = []
        for name in ("free_page_ids_group", "free_page_reps_group"):
            if hasattr(raw, name):
                setattr(raw, name, [])
        original()

    raw.free_group_end = free_group_end


def alloc_rows_zero_takes_all(raw: Any) -> None:
    """`alloc_rows(0)` without its special case: `free_slots[-0:]` is the whole list, so it takes every row."""
    original = raw.alloc_rows

    def alloc_rows(need_size: int) -> Any:
        if need_size != 0:
            return original(need_size)
        taken = raw.free_slots[-need_size:]
        del raw.free_slots[-need_size:]
        return taken

    raw.alloc_rows = alloc_rows


def generation_not_bumped(raw: Any) -> None:
    """Rows handed out keep the generation they had: `alloc` (and `alloc_rows`) put the counters back."""
    for name in ("alloc", "alloc_rows"):
        if hasattr(raw, name):
            setattr(raw, name, _keeping_generations(raw, getattr(raw, name)))


def _keeping_generations(raw: Any, original: Callable[..., Any]) -> Callable[..., Any]:
    def call(*args: Any) -> Any:
        saved = copy.deepcopy(raw.req_generation)
        out = original(*args)
        raw.req_generation = saved
        return out

    return call


def merge_loses_a_page(raw: Any) -> None:
    """`merge_and_sort_free` drops the last page of the merged free list."""
    original = raw.merge_and_sort_free

    def merge_and_sort_free() -> None:
        original()
        if len(raw.free_pages):
            raw.free_pages = raw.free_pages[:-1]

    raw.merge_and_sort_free = merge_and_sort_free
