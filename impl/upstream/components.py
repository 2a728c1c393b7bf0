"""Upstream SGLang's row pool and token allocators as component units, for the installed version.

The same surface as `impl.components` (lists of ints in, plain values out), over `ReqToTokenPool`,
`TokenToKVPoolAllocator` and `PagedTokenToKVPoolAllocator` as `impl.upstream.dialects` imports and builds them.
Where releases keep a field differently (the record, the free-group flag, the staged pages), the dialect reads
the installed one's, chosen by capability; it never changes what a method does.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import torch

from impl.components import ROW_WIDTH, ROWS, TOKENS, UnitSpec, pages_of
from impl.upstream.dialects import Dialect, load_dialect

# The allocator's free methods the fuzzer may call, where the installed class has them.
FREE_METHODS = ("free", "free_full", "free_segment", "free_full_segment", "free_page_ids")
SEGMENTS_METHODS = ("free_segments", "free_full_segments")
# Read-only questions the allocator answers from its state (or constants of a static pool), where it has them.
ALLOCATOR_QUERIES = (
    "check_decode_capacity",
    "request_slot_reserve",
    "get_extend_allocation_demand",
    "evict_to_free_tokens",
    "verify_byte_accounting",
    "mamba_full_cache_donor",
    "debug_print",
    "size_full",
    "get_kvcache",
    "translate_kv_indices_for_transfer",
    "get_all_free_pages",
    "prealloc_fits_assumes_reclaim",
    "prealloc_ceiling_fits",
    "prealloc_fits",
    "set_hicache_transfer_done_event",
)
ROW_QUERIES = ("schedulable_token_capacity", "alloc_aux_to_lengths", "reset_aux_cache_allocator")
DECODE_POOL_MODULE = "sglang.srt.disaggregation.decode"


def _ints(values: list[int]) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.int64)


class UpstreamRows:
    """`sglang.srt.mem_cache.memory_pool.ReqToTokenPool` with upstream `Req` records."""

    def __init__(self, dialect: Dialect) -> None:
        self.dialect = dialect
        self.raw = dialect.new_pool(ROWS, ROW_WIDTH)
        self.rows, self.width = ROWS, ROW_WIDTH
        names = {"alloc_rows", "free_rows", "register_on_alloc_rows"}
        self.features = frozenset(name for name in names if hasattr(self.raw, name))
        self.queries = tuple(name for name in ROW_QUERIES if hasattr(self.raw, name))
        self._hook_calls: list[list[int]] | None = None
        if "register_on_alloc_rows" in self.features:
            self._hook_calls = []
            self.raw.register_on_alloc_rows(self._record_hook)

    def _record_hook(self, rows: list[int]) -> None:
        assert self._hook_calls is not None
        self._hook_calls.append(list(rows))

    def new_req(self, rid: int) -> Any:
        return self.dialect.new_req(rid, max_new_tokens=1)

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
        self.raw.write((row, slice(start, start + len(values))), torch.tensor(values, dtype=torch.int32))

    def available_size(self) -> int:
        return self.raw.available_size()

    def free_list(self) -> list[int]:
        return list(self.raw.free_slots)

    def generations(self) -> list[int]:
        return self.raw.req_generation.tolist()

    def table(self) -> list[list[int]]:
        return self.raw.req_to_token.tolist()

    def row(self, req: Any) -> int | None:
        return self.dialect.row(req)

    def hold(self, req: Any, length: int) -> None:
        """Write the record a request has after its first chunk of `length` tokens on its row."""
        self.dialect.hold_record(req, length)

    def make_stale(self, req: Any, row: int, committed_len: int) -> None:
        """A released record that still names `row`, as a release that skipped `ReqToTokenPool.free` leaves it."""
        self.dialect.make_stale(req, row, committed_len)

    def take_hook_calls(self) -> list[list[int]] | None:
        """The rows each alloc-rows hook call reported since the last take; None where the version has no hook."""
        if self._hook_calls is None:
            return None
        calls, self._hook_calls = self._hook_calls, []
        return calls

    def query(self, name: str, n: int) -> object:
        if name == "schedulable_token_capacity":
            return self.raw.schedulable_token_capacity(n)
        if name == "alloc_aux_to_lengths":
            rows, lens = torch.tensor([1], dtype=torch.int64), torch.tensor([n], dtype=torch.int64)
            return self.raw.alloc_aux_to_lengths(req_pool_indices_cpu=rows, target_seq_lens_cpu=lens)
        if name == "reset_aux_cache_allocator":
            return self.raw.reset_aux_cache_allocator()
        raise KeyError(name)


class UpstreamAllocator:
    """`TokenToKVPoolAllocator` (page size 1) or `PagedTokenToKVPoolAllocator` on its naive path or its Triton
    kernels (interpreted on CPU)."""

    def __init__(self, dialect: Dialect, page_size: int, need_sort: bool, kernels: bool) -> None:
        self.dialect = dialect
        tokens = TOKENS[page_size]
        self.raw = dialect.new_allocator(tokens, need_sort, page_size, kernels)
        self.page_size, self.num_pages, self.need_sort = page_size, tokens // page_size, need_sort
        names = (*FREE_METHODS, *SEGMENTS_METHODS, "resize")
        paged = {"alloc_extend", "alloc_decode"} if page_size > 1 else set()
        self.features = frozenset({*paged, *(name for name in names if hasattr(self.raw, name))})
        self.queries = tuple(name for name in ALLOCATOR_QUERIES if hasattr(self.raw, name))

    def alloc(self, need_size: int) -> list[int] | None:
        return _plain(self.raw.alloc(need_size))

    def alloc_extend(
        self, prefix_lens: list[int], seq_lens: list[int], last_locs: list[int], pass_count: bool
    ) -> list[int] | None:
        prefix, seq = _ints(prefix_lens), _ints(seq_lens)
        extend_num_tokens = sum(seq_lens) - sum(prefix_lens)
        # The exact page count upstream would compute itself; callers may pass it to save a host sync.
        count = _new_pages(prefix_lens, seq_lens, self.page_size) if pass_count else None
        last_loc = _ints(last_locs)
        return _plain(
            self.raw.alloc_extend(prefix, prefix.clone(), seq, seq.clone(), last_loc, extend_num_tokens, count)
        )

    def alloc_decode(self, seq_lens: list[int], last_locs: list[int]) -> list[int] | None:
        seq = _ints(seq_lens)
        return _plain(self.raw.alloc_decode(seq, seq.clone(), _ints(last_locs)))

    def free_slots(self, via: str, slots: list[int], start_pos: int) -> None:
        method = getattr(self.raw, via)
        if via in ("free_segment", "free_full_segment"):
            method(_ints(slots), start_pos=start_pos)
        else:
            method(_ints(slots))

    def free_page_ids(self, pages: list[int]) -> None:
        self.raw.free_page_ids(_ints(pages))

    def free_segments(self, via: str, segments: list[tuple[list[int], int]]) -> None:
        getattr(self.raw, via)([(_ints(slots), start) for slots, start in segments])

    def group_begin(self) -> None:
        self.raw.free_group_begin()

    def group_end(self) -> None:
        self.raw.free_group_end()

    def merge(self) -> None:
        self.raw.merge_and_sort_free()

    def clear(self) -> None:
        self.raw.clear()

    def resize(self, tokens: int) -> None:
        self.raw.resize(SimpleNamespace(max_total_num_tokens=tokens))

    def available_size(self) -> int:
        return self.raw.available_size()

    def free_pages(self) -> list[int]:
        return self.raw.free_pages.tolist()

    def staged_pages(self) -> list[int]:
        return self.dialect.release_slots(self.raw).tolist()

    def in_group(self) -> bool:
        return self.dialect.in_free_group(self.raw)

    def pending_pages(self) -> list[int]:
        """Pages an open free group holds: its slot frees (deduplicated, as the end frees them in one call) and
        its page frees (`free_page_ids_group` of page ids, or the older `free_page_reps_group` of slots)."""
        if not self.in_group():
            return []
        group = self.raw.free_group
        pages = pages_of(torch.cat(group), self.page_size) if group else []
        ids = getattr(self.raw, "free_page_ids_group", None)
        if ids:
            return pages + torch.cat(ids).tolist()
        reps = getattr(self.raw, "free_page_reps_group", None)
        return pages + (torch.cat(reps) // self.page_size).tolist() if reps else pages

    def query(self, name: str, n: int) -> object:
        return _QUERY_CALLS[name](self.raw, n)


def _new_pages(prefix_lens: list[int], seq_lens: list[int], page_size: int) -> int:
    """Pages a batch takes: the sum over requests of ceil(seq / page_size) - ceil(prefix / page_size)."""
    pages = [-(-seq // page_size) - -(-prefix // page_size) for prefix, seq in zip(prefix_lens, seq_lens, strict=True)]
    return sum(pages)


def _plain(out: torch.Tensor | None) -> list[int] | None:
    return None if out is None else out.tolist()


# How each read-only question is asked with an integer argument `n`; its expected answer is the fuzzer's.
_QUERY_CALLS: dict[str, Callable[[Any, int], object]] = {
    "check_decode_capacity": lambda a, n: a.check_decode_capacity(num_tokens=n, tree_cache=None),
    "request_slot_reserve": lambda a, n: a.request_slot_reserve(has_req_pool_slot=bool(n % 2), prefill_tokens=n),
    "get_extend_allocation_demand": lambda a, n: a.get_extend_allocation_demand(
        _ints([0]), _ints([n]), conservative_num_tokens=n, shard_size=1
    ),
    "evict_to_free_tokens": lambda a, n: a.evict_to_free_tokens(None, n),
    "verify_byte_accounting": lambda a, n: a.verify_byte_accounting(),
    "mamba_full_cache_donor": lambda a, n: a.mamba_full_cache_donor(),
    "debug_print": lambda a, n: a.debug_print(),
    "size_full": lambda a, n: a.size_full,
    "get_kvcache": lambda a, n: a.get_kvcache(),
    "translate_kv_indices_for_transfer": lambda a, n: a.translate_kv_indices_for_transfer(_ints([n, n + 1])).tolist(),
    "get_all_free_pages": lambda a, n: sorted(a.get_all_free_pages().tolist()),
    "prealloc_fits_assumes_reclaim": lambda a, n: a.prealloc_fits_assumes_reclaim(),
    "prealloc_ceiling_fits": lambda a, n: a.prealloc_ceiling_fits(n, 0),
    "prealloc_fits": lambda a, n: a.prealloc_fits(None, n, 0, full_budget_tokens=a.available_size()),
    "set_hicache_transfer_done_event": lambda a, n: a.set_hicache_transfer_done_event(n, None),
}


def decode_pool_problem() -> str | None:
    """Why upstream's `DecodeReqToTokenPool` cannot be built here, or None (its module imports `einops`, which
    the pinned venvs do not carry)."""
    load_dialect()  # the import dance first
    try:
        importlib.import_module(DECODE_POOL_MODULE)
    except ImportError as error:
        return f"{DECODE_POOL_MODULE} does not import: {error}"
    return None


def upstream_units() -> list[UnitSpec]:
    """Every upstream unit of the installed version: the row pool, the page-size-1 allocator and the paged one at
    page sizes 4 and 16 on every kernel backend it has, each with `need_sort` off and on."""
    dialect = load_dialect()
    backends = ("torch", "triton") if dialect.caps.paged_kernels_attr else ("triton",)
    specs = [UnitSpec("rows", "rows", lambda: UpstreamRows(dialect), "ReqToTokenPool")]
    for need_sort in (False, True):
        sort = "-sort" if need_sort else ""
        token = _builder(dialect, 1, need_sort, False)
        specs.append(UnitSpec(f"token-p1{sort}", "allocator", token, "TokenToKVPoolAllocator"))
        for page_size in (4, 16):
            for backend in backends:
                paged = _builder(dialect, page_size, need_sort, backend == "triton")
                specs.append(
                    UnitSpec(f"paged-p{page_size}-{backend}{sort}", "allocator", paged, "PagedTokenToKVPoolAllocator")
                )
    return specs


def _builder(dialect: Dialect, page_size: int, need_sort: bool, kernels: bool) -> Callable[[], UpstreamAllocator]:
    return lambda: UpstreamAllocator(dialect, page_size, need_sort, kernels)
