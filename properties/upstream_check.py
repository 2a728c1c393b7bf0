"""The whole-pool page check (`properties.page_check`) on a running SGLang server's own pool objects.

`check_sglang_pool(req_to_token_pool, allocator, tree_cache, reqs)` reads upstream's objects by attribute only
(sglang is never imported here) and says whether every page of the KV pool has exactly one holder: the
allocator's free lists, the prefix tree, or one live request's own range `[cache_protected_len,
kv_allocated_len)` of its `req_to_token` row. It reads sglang 0.5.19 and later (the record in `req.kv`) and
0.5.18 (`req_pool_idx` and `cache_protected_len` on `Req`, `req.kv` None once released), on CPU or GPU.
Full-attention pools only: `TokenToKVPoolAllocator` (page size 1: a page is a slot) or
`PagedTokenToKVPoolAllocator`, with `RadixCache`, `UnifiedRadixCache` or `ChunkCache`; a hybrid (SWA) allocator
is refused with a ValueError.

Calling it from a server. The scheduler's own busy check, `SchedulerInvariantChecker.self_check_during_busy`,
runs after every step when `SGLANG_ENABLE_STRICT_MEM_CHECK_DURING_BUSY=1`, once the step's results are processed
and no free group is open (0.5.18 and 0.5.23 alike). An AFTER hook on it, registered by a general SGLang plugin
(an entry point in the group `sglang.srt.plugins`, which each scheduler process loads at start), adds the page
check:

    from sglang.srt.plugins.hook_registry import HookRegistry, HookType
    from properties.upstream_check import check_sglang_pool, format_violations

    def after_busy_check(result, checker):
        batches = [checker.get_last_batch(), checker.get_running_batch()]
        reqs = [req for batch in batches if batch is not None for req in batch.reqs]
        chunked = getattr(checker, "get_chunked_req", lambda: None)()  # absent in 0.5.18
        reqs += [chunked] if chunked is not None else []
        pages = check_sglang_pool(
            checker.req_to_token_pool, checker.token_to_kv_pool_allocator, checker.tree_cache, reqs
        )
        assert pages.ok, format_violations(pages)

    def register():  # the plugin's entry point
        HookRegistry.register(
            "sglang.srt.managers.scheduler_components.invariant_checker."
            "SchedulerInvariantChecker.self_check_during_busy",
            after_busy_check,
            HookType.AFTER,
        )

From code holding the `Scheduler` itself (a debugger, a test), pass `self.req_to_token_pool`,
`self.token_to_kv_pool_allocator`, `self.tree_cache` and the requests of `self.last_batch`,
`self.running_batch` and `self.chunked_req` (0.5.18's checker has no `get_chunked_req`; there the hook sees a
chunked request through the last batch only). A request given twice (the running batch is often the last batch)
counts once; so does a record reached through two requests. Every row-holding request must be passed: the
pages of one left out read as `leak`. On 0.5.19+ streaming sessions park records in
`tree_cache.session_records()`; pass each as `types.SimpleNamespace(kv=record)`. PD-disaggregation requests
pre-allocated on the decode side are not in those batches; pass them too, or check on a non-PD server. A
record that breaks `0 <= cache_protected_len <= kv_allocated_len <= row width` raises ValueError (no page
range can be read from it).

Cost: one pass over the free lists, the tree's node values (a Python walk of `root_node`, or
`all_values_flatten()`) and the live rows' positions `[0, kv_allocated_len)`; no copy of `req_to_token`.
`backend="auto"` takes the oracle loop on small CPU pools and the vectorized torch path otherwise (on GPU
tensors always torch). `make bench` prints the milliseconds per check of each backend on a 2,000,000-page pool;
`python -m bench.page_check_bench --quick` (65,536 pages, 170,829 row entries) measured 14 ms for torch on one
CPU thread and 0.7 s for the oracle loop on a busy 2-core machine.

Violation kinds (`PageViolation.kind`; owners are row ids ascending, then "tree", then "free"):

- `owned-and-free`: a page of a live request's own range is on the free list; the next alloc hands it to
  another request (a release path that freed the row's pages while the request kept them).
- `owned-twice`: two live requests' own ranges hold the page: two records on one row (0.5.18's reuse guard
  lets a released record with a stale row back in), or two rows written with the same slots.
- `double-free`: the page occurs twice in `free_pages` + `release_pages` (`free` does not deduplicate).
- `leak`: no holder at all; freed by nobody (or held by a request that was not passed).
- `tree-and-free`, `tree-and-owned`, `tree-duplicate`: a tree node's page is also free, also in a live
  request's own range (its `cache_protected_len` is too short), or held by two nodes.
- `prefix-not-tree`: a position below `cache_protected_len` maps to a page the tree does not hold; owners
  are the rows using it as prefix.
- `unaligned-protected`: `cache_protected_len` is not a multiple of the page size.
- `padding-page`, `out-of-range`: page 0 (reserved for padding) or an id beyond the pool is referenced.

`PageCheckResult.ok` also needs `conservation_gap_pages == 0` (free + tree + owned = pages in the pool).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from properties.page_check import (
    LEAK,
    PREFIX_NOT_TREE,
    UNALIGNED_PROTECTED,
    Owner,
    PageCheckResult,
    PageSnapshot,
    PageViolation,
    check_pages,
)
from properties.vocabulary import ceil_div

_EXPECTED = {
    "req_to_token_pool": "sglang's ReqToTokenPool",
    "allocator": "sglang's TokenToKVPoolAllocator or PagedTokenToKVPoolAllocator",
    "tree_cache": "sglang's RadixCache, UnifiedRadixCache or ChunkCache",
    "req": "sglang's Req (0.5.19+ keep req_pool_idx in req.kv, 0.5.18 on the Req)",
    "req.kv": "sglang's ReqKvInfo",
}

Record = tuple[int, int, int]  # row, cache_protected_len, kv_allocated_len


def check_sglang_pool(
    req_to_token_pool: Any, allocator: Any, tree_cache: Any, reqs: Iterable[Any], backend: str = "auto"
) -> PageCheckResult:
    """Check page ownership of a live SGLang pool; `reqs` are every request that may hold a row."""
    return check_pages(sglang_page_snapshot(req_to_token_pool, allocator, tree_cache, reqs), backend)


def sglang_page_snapshot(req_to_token_pool: Any, allocator: Any, tree_cache: Any, reqs: Iterable[Any]) -> PageSnapshot:
    """The page check's input read from upstream's objects, on the device of `req_to_token`."""
    table = _attr(req_to_token_pool, "req_to_token", "req_to_token_pool")
    page_size = int(_attr(allocator, "page_size", "allocator"))
    num_tokens = int(_attr(allocator, "size", "allocator"))
    _refuse_open_free_group(allocator)
    records = torch.tensor(_live_records(reqs), dtype=torch.int64, device=table.device).view(-1, 3)
    rows, protected_lens, allocated_lens = records.T.contiguous()
    return PageSnapshot(
        req_to_token=table,
        live_rows=rows,
        protected_lens=protected_lens,
        allocated_lens=allocated_lens,
        free_pages=_page_list(allocator, "free_pages", table.device),
        release_pages=_page_list(allocator, "release_pages", table.device),
        tree_pages=_tree_pages(_tree_values(tree_cache), page_size, table.device),
        num_pages=num_tokens // page_size,
        page_size=page_size,
    )


def format_violations(result: PageCheckResult) -> str:
    """One line per violation ("page 7 owned-and-free: held by row 3, free"), then one for a conservation gap."""
    lines = [f"page {v.page} {v.kind}: {_holders_text(v)}" for v in result.violations]
    gap = result.conservation_gap_pages
    if gap:
        counts = f"free {result.free_pages_count} + tree {result.tree_pages_count} + owned {result.owned_pages_count}"
        lines.append(f"conservation: {counts} = {result.num_pages + gap}, not the pool's {result.num_pages} pages")
    return "\n".join(lines)


def _holders_text(violation: PageViolation) -> str:
    names = ", ".join(map(_owner_name, violation.owners))
    if violation.kind in (PREFIX_NOT_TREE, UNALIGNED_PROTECTED):
        return f"prefix of {names}"
    return "held by nobody" if violation.kind == LEAK else f"held by {names}"


def _owner_name(owner: Owner) -> str:
    return f"row {owner}" if isinstance(owner, int) else owner


def _attr(obj: Any, name: str, role: str) -> Any:
    """`obj.name`, or a ValueError naming the missing attribute and the class `obj` was expected to be."""
    try:
        return getattr(obj, name)
    except AttributeError:
        message = f"{role} has no attribute {name!r}: a {type(obj).__name__} does not look like {_EXPECTED[role]}"
        raise ValueError(message) from None


def _live_records(reqs: Iterable[Any]) -> list[Record]:
    """(row, P, A) of each distinct record that holds a row; a record reached twice (keyed by identity) counts once."""
    records: dict[int, Record] = {}
    for req in reqs:
        holder, row, protected_len, allocated_len = _record(req)
        if row is not None:
            records[id(holder)] = (int(row), int(protected_len), int(allocated_len))
    return list(records.values())


def _record(req: Any) -> tuple[object, int | None, int, int]:
    """The object that holds the row (deduplication key), the row, P and A, in either version's layout."""
    kv = _attr(req, "kv", "req")
    if hasattr(kv, "req_pool_idx"):  # 0.5.19+: the whole record is req.kv, never None
        protected_len = _attr(kv, "cache_protected_len", "req.kv")
        return kv, kv.req_pool_idx, protected_len, _attr(kv, "kv_allocated_len", "req.kv")
    # 0.5.18: the row and P live on Req; req.kv carries A and is None before the first extend and after release.
    row, protected_len = _attr(req, "req_pool_idx", "req"), _attr(req, "cache_protected_len", "req")
    return req, row, protected_len, 0 if kv is None else _attr(kv, "kv_allocated_len", "req.kv")


def _refuse_open_free_group(allocator: Any) -> None:
    """Raise inside `free_group_begin` / `free_group_end`: pending frees are neither held nor free yet."""
    flag = getattr(allocator, "is_not_in_free_group", None)  # 0.5.18 keeps a flag beside the group list
    open_group = flag is False if flag is not None else getattr(allocator, "free_group", None) is not None
    if open_group:
        raise ValueError("allocator has a free group open (frees pending until free_group_end); check after it")


def _page_list(allocator: Any, name: str, device: torch.device) -> torch.Tensor:
    pages = _attr(allocator, name, "allocator")
    if not isinstance(pages, torch.Tensor):
        # The SWA allocator sets its own lists to None and keeps them in two sub-allocators.
        raise ValueError(f"allocator.{name} is {type(pages).__name__}, not a tensor: {_EXPECTED['allocator']} expected")
    return pages.to(device=device, dtype=torch.int64)


def _tree_values(tree_cache: Any) -> list[torch.Tensor]:
    """The slot tensors of the tree's nodes: none for a disabled tree or a chunk cache, a walk from `root_node` for
    a tree of Python nodes, else `all_values_flatten()` (a tree core that keeps its nodes out of Python)."""
    if getattr(tree_cache, "disable", False):
        return []
    # UnifiedRadixCache's root_node is a property that raises on its default (Rust) tree core; RadixCache keeps
    # the root as a plain attribute.
    root = vars(tree_cache).get("root_node") if hasattr(tree_cache, "__dict__") else None
    if root is None:
        return [_attr(tree_cache, "all_values_flatten", "tree_cache")()]
    values, stack = [], [root]
    while stack:  # iterative: a long conversation's path can be deeper than the recursion limit
        children = list(stack.pop().children.values())
        stack += children
        values += [child.value for child in children if child.value is not None]  # None: evicted to host memory
    return values


def _tree_pages(values: list[torch.Tensor], page_size: int, device: torch.device) -> torch.Tensor:
    """One entry per page a node holds: a consistent node names each of its pages in one run of `page_size`
    consecutive slots, so a run of c slots on one page counts ceil(c / page_size) holdings."""
    if not values:
        return torch.empty(0, dtype=torch.int64, device=device)
    slots = torch.cat([value.to(device=device, dtype=torch.int64) for value in values])
    pages, runs = torch.unique_consecutive(torch.div(slots, page_size, rounding_mode="floor"), return_counts=True)
    return torch.repeat_interleave(pages, ceil_div(runs, page_size))
