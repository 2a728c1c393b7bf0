"""The reference pool's row pools and token allocators as component units, each built alone and spoken to in ints.

A unit adapter translates a component fuzzer's calls (lists of ints) into its class's own (tensors, `Req`
records) and reads the class's state back as plain values; it decides nothing and checks nothing.
`impl.upstream.components` builds upstream SGLang's classes behind the same surface. `UnitSpec.build` makes a
fresh unit, so every test case starts from a new pool.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import torch

from impl.allocator import TokenToKVPoolAllocator
from impl.decode_pool import DecodeReqToTokenPool
from impl.paged_allocator import PagedTokenToKVPoolAllocator
from impl.records import Req
from impl.req_pool import ReqToTokenPool

UnitKind = Literal["rows", "allocator"]
# Small on purpose: rows, slots and pages run out within a few events.
ROWS, ROW_WIDTH, PRE_ALLOC_ROWS = 4, 8, 2
TOKENS = {1: 16, 4: 32, 16: 64}  # slots per page size: 16, 8 and 4 pages


@dataclass(frozen=True)
class UnitSpec:
    """One unit to fuzz: its name, its kind, and how to build a fresh one."""

    name: str
    kind: UnitKind
    build: Callable[[], Any]
    cls: str  # the class it drives, as the method inventory names it


def pages_of(slots: torch.Tensor, page_size: int) -> list[int]:
    """The distinct pages of some slots, ascending."""
    return torch.unique(slots // page_size).tolist() if slots.numel() else []


def _ints(values: list[int]) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.int64)


class ReferenceRows:
    """`impl.req_pool.ReqToTokenPool` or `impl.decode_pool.DecodeReqToTokenPool` with `impl.records.Req`."""

    features = frozenset({"alloc_rows", "free_rows"})
    queries: tuple[str, ...] = ()

    def __init__(self, pool: ReqToTokenPool) -> None:
        self.raw = pool
        self.rows = len(pool.free_slots)
        self.width = pool.max_context_len

    def new_req(self, rid: int) -> Req:
        return Req(rid)

    def alloc(self, reqs: list[Any]) -> list[int] | None:
        return self.raw.alloc(reqs)

    def alloc_rows(self, need: int) -> list[int] | None:
        return self.raw.alloc_rows(need)

    def free(self, req: Any) -> None:
        self.raw.free(req)

    def free_rows(self, rows: list[int]) -> None:
        self.raw.free_rows(rows)

    def clear(self) -> None:
        self.raw.clear()

    def write(self, row: int, start: int, values: list[int]) -> None:
        self.raw.write(row, start, _ints(values))

    def available_size(self) -> int:
        return self.raw.available_size()

    def free_list(self) -> list[int]:
        return list(self.raw.free_slots)

    def generations(self) -> list[int]:
        return list(self.raw.req_generation)

    def table(self) -> list[list[int]]:
        return self.raw.req_to_token.tolist()

    def row(self, req: Any) -> int | None:
        return req.kv.req_pool_idx

    def hold(self, req: Any, length: int) -> None:
        """Write the record a request has after its first chunk of `length` tokens on its row."""
        req.kv.kv_allocated_len = req.kv.kv_committed_len = length

    def make_stale(self, req: Any, row: int, committed_len: int) -> None:
        """A released record that still names `row`, as a release that skipped `ReqToTokenPool.free` leaves it."""
        req.kv.req_pool_idx = row
        req.kv.kv_committed_len = committed_len
        req.kv.mark_kv_released()

    def take_hook_calls(self) -> list[list[int]] | None:
        return None  # the reference pool has no alloc-rows hook

    def query(self, name: str, n: int) -> object:
        raise KeyError(name)


class ReferenceAllocator:
    """`impl.allocator.TokenToKVPoolAllocator` (page size 1) or `impl.paged_allocator.PagedTokenToKVPoolAllocator`."""

    queries: tuple[str, ...] = ()

    def __init__(self, allocator: TokenToKVPoolAllocator | PagedTokenToKVPoolAllocator, tokens: int) -> None:
        self.raw = allocator
        self.page_size = allocator.page_size
        self.num_pages = tokens // allocator.page_size
        self.need_sort = allocator.need_sort
        paged = {"alloc_extend", "alloc_decode"} if allocator.page_size > 1 else set()
        self.features = frozenset({"free", "free_segment", "free_segments", *paged})

    def alloc(self, need_size: int) -> list[int] | None:
        out = self.raw.alloc(need_size)
        return None if out is None else out.tolist()

    def alloc_extend(
        self, prefix_lens: list[int], seq_lens: list[int], last_locs: list[int], pass_count: bool
    ) -> list[int] | None:
        assert isinstance(self.raw, PagedTokenToKVPoolAllocator)
        out = self.raw.alloc_extend(_ints(prefix_lens), _ints(seq_lens), _ints(last_locs))
        return None if out is None else out.tolist()

    def alloc_decode(self, seq_lens: list[int], last_locs: list[int]) -> list[int] | None:
        assert isinstance(self.raw, PagedTokenToKVPoolAllocator)
        out = self.raw.alloc_decode(_ints(seq_lens), _ints(last_locs))
        return None if out is None else out.tolist()

    def free_slots(self, via: str, slots: list[int], start_pos: int) -> None:
        if via == "free_segment":
            self.raw.free_segment(_ints(slots), start_pos)
        else:
            self.raw.free(_ints(slots))

    def free_page_ids(self, pages: list[int]) -> None:
        raise NotImplementedError("the reference allocators have no free_page_ids")

    def free_segments(self, via: str, segments: list[tuple[list[int], int]]) -> None:
        self.raw.free_segments([(_ints(slots), start) for slots, start in segments])

    def group_begin(self) -> None:
        self.raw.free_group_begin()

    def group_end(self) -> None:
        self.raw.free_group_end()

    def merge(self) -> None:
        self.raw.merge_and_sort_free()

    def clear(self) -> None:
        self.raw.clear()

    def resize(self, tokens: int) -> None:
        raise NotImplementedError("the reference allocators cannot resize")

    def available_size(self) -> int:
        return self.raw.available_size()

    def free_pages(self) -> list[int]:
        return self.raw.free_pages.tolist()

    def staged_pages(self) -> list[int]:
        return self.raw.release_pages.tolist()

    def in_group(self) -> bool:
        return self.raw.free_group is not None

    def pending_pages(self) -> list[int]:
        """Pages a free group holds until it ends: its slot frees (deduplicated, as the end frees them in one call)
        and, paged, its page-representative frees."""
        group = self.raw.free_group or []
        pages = pages_of(torch.cat(group), self.page_size) if group else []
        reps = getattr(self.raw, "free_page_reps_group", [])
        return pages + (torch.cat(reps) // self.page_size).tolist() if reps else pages

    def query(self, name: str, n: int) -> object:
        raise KeyError(name)


def reference_units() -> list[UnitSpec]:
    """Every reference unit: both row pools; the page-size-1 allocator and the paged one at page sizes 4 and 16 on
    each kernel backend; every allocator with `need_sort` off and on."""
    specs = [
        UnitSpec("rows", "rows", lambda: ReferenceRows(ReqToTokenPool(ROWS, ROW_WIDTH)), "ReqToTokenPool"),
        UnitSpec(
            "decode-rows",
            "rows",
            lambda: ReferenceRows(DecodeReqToTokenPool(ROWS - PRE_ALLOC_ROWS, ROW_WIDTH, PRE_ALLOC_ROWS)),
            "DecodeReqToTokenPool",
        ),
    ]
    for need_sort in (False, True):
        sort = "-sort" if need_sort else ""
        specs.append(UnitSpec(f"token-p1{sort}", "allocator", _token_builder(need_sort), "TokenToKVPoolAllocator"))
        for page_size in (4, 16):
            for backend in ("oracle", "torch", "triton"):
                specs.append(
                    UnitSpec(
                        f"paged-p{page_size}-{backend}{sort}",
                        "allocator",
                        _paged_builder(page_size, backend, need_sort),
                        "PagedTokenToKVPoolAllocator",
                    )
                )
    return specs


def _token_builder(need_sort: bool) -> Callable[[], ReferenceAllocator]:
    return lambda: ReferenceAllocator(TokenToKVPoolAllocator(TOKENS[1], need_sort=need_sort), TOKENS[1])


def _paged_builder(page_size: int, backend: Any, need_sort: bool) -> Callable[[], ReferenceAllocator]:
    tokens = TOKENS[page_size]
    return lambda: ReferenceAllocator(
        PagedTokenToKVPoolAllocator(tokens, page_size, need_sort=need_sort, backend=backend), tokens
    )
