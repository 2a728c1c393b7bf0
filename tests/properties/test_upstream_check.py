"""The page check on SGLang's pool objects, read by attribute: stand-ins with upstream's attribute names, in the
0.5.19+ record layout (`req.kv.*`) and the 0.5.18 one (row and P on `Req`), with and without a tree."""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from properties.page_check import (
    DOUBLE_FREE,
    LEAK,
    OWNED_AND_FREE,
    OWNED_TWICE,
    PREFIX_NOT_TREE,
    TREE_AND_FREE,
    TREE_DUPLICATE,
    PageViolation,
)
from properties.upstream_check import check_sglang_pool, format_violations

WIDTH = 8
NO_TREE = SimpleNamespace(disable=True)


def req_0523(row: int | None, protected_len: int, allocated_len: int) -> SimpleNamespace:
    """A request as 0.5.19+ lay it out: the whole record in `req.kv`."""
    kv = SimpleNamespace(req_pool_idx=row, cache_protected_len=protected_len, kv_allocated_len=allocated_len)
    return SimpleNamespace(kv=kv)


def req_0518(row: int | None, protected_len: int, allocated_len: int) -> SimpleNamespace:
    """A request as 0.5.18 lays it out: row and P on `Req`, `req.kv` None while it holds no row."""
    kv = None if row is None else SimpleNamespace(kv_allocated_len=allocated_len, swa_evicted_seqlen=0)
    return SimpleNamespace(req_pool_idx=row, cache_protected_len=protected_len, kv=kv)


NewReq = Callable[[int | None, int, int], SimpleNamespace]
LAYOUTS = pytest.mark.parametrize("new_req", [req_0523, req_0518], ids=["0.5.23", "0.5.18"])


def row_pool(rows: dict[int, list[int]], num_rows: int = 4) -> SimpleNamespace:
    """A `ReqToTokenPool` stand-in: row 0 is padding, each given row starts with its slots."""
    table = torch.zeros((num_rows + 1, WIDTH), dtype=torch.int32)
    for row, slots in rows.items():
        table[row, : len(slots)] = torch.tensor(slots, dtype=torch.int32)
    return SimpleNamespace(req_to_token=table)


def allocator(free: list[int], size: int, page_size: int = 1, **extra: Any) -> SimpleNamespace:
    """A token allocator stand-in: free page ids (slot ids at page size 1), nothing pending release."""
    pages = torch.tensor(free, dtype=torch.int64)
    return SimpleNamespace(
        free_pages=pages, release_pages=torch.empty(0, dtype=torch.int64), page_size=page_size, size=size, **extra
    )


def node(value: torch.Tensor | list[int] | None, *children: SimpleNamespace) -> SimpleNamespace:
    return SimpleNamespace(value=value, children={index: child for index, child in enumerate(children)})


def slots(*ids: int) -> torch.Tensor:
    return torch.tensor(ids, dtype=torch.int64)


# -- page size 1, no tree: rows 1 and 2 hold slots 1-3 and 4-5, slots 6-8 are free ------------------------


Pool = tuple[SimpleNamespace, SimpleNamespace, Any, list[Any]]  # check_sglang_pool's arguments


def chunk_pool(new_req: NewReq, free: list[int] | None = None) -> Pool:
    pool = row_pool({1: [1, 2, 3], 2: [4, 5]})
    reqs = [new_req(1, 0, 3), new_req(2, 0, 2), new_req(None, 0, 0)]  # the last one was released
    return pool, allocator([6, 7, 8] if free is None else free, size=8), NO_TREE, reqs


@LAYOUTS
def test_a_consistent_pool_passes_and_counts_its_pages(new_req: NewReq) -> None:
    result = check_sglang_pool(*chunk_pool(new_req))
    assert result.ok
    assert (result.owned_pages_count, result.free_pages_count, result.tree_pages_count) == (5, 3, 0)


@LAYOUTS
def test_a_request_or_record_reached_twice_counts_once(new_req: NewReq) -> None:
    pool, alloc, _, reqs = chunk_pool(new_req)
    # The running batch is often the last batch; a 0.5.23 session record is reached through its request too.
    again = [*reqs, reqs[0], SimpleNamespace(kv=reqs[1].kv)] if new_req is req_0523 else [*reqs, reqs[0]]
    assert check_sglang_pool(pool, alloc, NO_TREE, again).ok


@LAYOUTS
@pytest.mark.parametrize(
    ("free", "expected"),
    [
        ([6, 7, 8, 2], PageViolation(OWNED_AND_FREE, 2, (1, "free"))),  # a live row's page freed
        ([6, 7, 8, 6], PageViolation(DOUBLE_FREE, 6, ("free", "free"))),
        ([7, 8], PageViolation(LEAK, 6, ())),  # dropped from the free list
    ],
    ids=["owned-and-free", "double-free", "leak"],
)
def test_a_planted_corruption_is_named_with_its_page_and_owners(
    new_req: NewReq, free: list[int], expected: PageViolation
) -> None:
    for backend in ("oracle", "torch"):
        assert check_sglang_pool(*chunk_pool(new_req, free), backend=backend).violations == [expected]


@LAYOUTS
def test_two_rows_written_with_the_same_slots_are_owned_twice(new_req: NewReq) -> None:
    pool, alloc, _, reqs = chunk_pool(new_req)
    pool.req_to_token[3, :2] = torch.tensor([4, 5], dtype=torch.int32)
    violations = check_sglang_pool(pool, alloc, NO_TREE, [*reqs, new_req(3, 0, 2)]).violations
    assert violations == [PageViolation(OWNED_TWICE, 4, (2, 3)), PageViolation(OWNED_TWICE, 5, (2, 3))]


# -- page size 2 with a tree: pages 1-2 (slots 2-5) in the tree, row 1's prefix; row 1 owns pages 3-4 -----------


def paged_pool(tree: Any, free: list[int] | None = None) -> Pool:
    pool = row_pool({1: [2, 3, 4, 5, 6, 7, 8]})
    alloc = allocator([5, 6, 7, 8] if free is None else free, size=16, page_size=2)
    return pool, alloc, tree, [req_0523(1, 4, 7)]


def python_tree(*extra: SimpleNamespace) -> SimpleNamespace:
    """A RadixCache stand-in: nodes reached from `root_node` (its own value is an empty list, as upstream's)."""
    return SimpleNamespace(disable=False, root_node=node([], node(slots(2, 3), node(slots(4, 5))), *extra))


def flat_tree(*values: int) -> SimpleNamespace:
    """A tree core that exposes only `all_values_flatten()`, as UnifiedRadixCache on its Rust core."""
    return SimpleNamespace(disable=False, all_values_flatten=lambda: slots(*values))


@pytest.mark.parametrize(
    "tree",
    [python_tree(), python_tree(node(None)), flat_tree(2, 3, 4, 5)],
    ids=["root_node", "host-evicted-node", "all_values_flatten"],
)
def test_tree_pages_are_read_from_either_kind_of_tree(tree: Any) -> None:
    result = check_sglang_pool(*paged_pool(tree))
    assert result.ok
    assert (result.tree_pages_count, result.owned_pages_count, result.free_pages_count) == (2, 2, 4)


@pytest.mark.parametrize(
    ("tree", "free", "expected"),
    [
        (python_tree(), [5, 6, 7, 8, 1], [PageViolation(TREE_AND_FREE, 1, ("tree", "free"))]),
        (python_tree(node(slots(4, 5))), None, [PageViolation(TREE_DUPLICATE, 2, ("tree", "tree"))]),
        (flat_tree(2, 3, 4, 5, 4, 5), None, [PageViolation(TREE_DUPLICATE, 2, ("tree", "tree"))]),
        (
            NO_TREE,
            None,
            [
                PageViolation(LEAK, 1, ()),
                PageViolation(PREFIX_NOT_TREE, 1, (1,)),
                PageViolation(LEAK, 2, ()),
                PageViolation(PREFIX_NOT_TREE, 2, (1,)),
            ],
        ),
    ],
    ids=["tree-and-free", "page-in-two-nodes", "page-twice-in-a-run", "disabled-tree-holds-nothing"],
)
def test_a_tree_corruption_is_named(tree: Any, free: list[int] | None, expected: list[PageViolation]) -> None:
    assert check_sglang_pool(*paged_pool(tree, free)).violations == expected


# -- objects that do not look like upstream's ------------------------------------------------------------


def test_a_missing_attribute_is_named() -> None:
    pool, alloc, _, reqs = chunk_pool(req_0523)
    bare = SimpleNamespace()
    cases: list[tuple[Callable[[], object], str]] = [
        (lambda: check_sglang_pool(bare, alloc, NO_TREE, reqs), "req_to_token_pool has no attribute 'req_to_token'"),
        (lambda: check_sglang_pool(pool, bare, NO_TREE, reqs), "allocator has no attribute 'page_size'"),
        (lambda: check_sglang_pool(pool, alloc, bare, reqs), "tree_cache has no attribute 'all_values_flatten'"),
        (lambda: check_sglang_pool(pool, alloc, NO_TREE, [bare]), "req has no attribute 'kv'"),
        (lambda: check_sglang_pool(pool, alloc, NO_TREE, [SimpleNamespace(kv=None)]), "no attribute 'req_pool_idx'"),
    ]
    for call, message in cases:
        with pytest.raises(ValueError, match=message):
            call()


def test_a_missing_record_field_is_named_in_either_layout() -> None:
    pool, alloc, _, _ = chunk_pool(req_0523)
    new = SimpleNamespace(kv=SimpleNamespace(req_pool_idx=1, cache_protected_len=0))
    old = SimpleNamespace(req_pool_idx=1, kv=SimpleNamespace(kv_allocated_len=3))
    with pytest.raises(ValueError, match=r"req\.kv has no attribute 'kv_allocated_len'.*ReqKvInfo"):
        check_sglang_pool(pool, alloc, NO_TREE, [new])
    with pytest.raises(ValueError, match=r"req has no attribute 'cache_protected_len'.*Req"):
        check_sglang_pool(pool, alloc, NO_TREE, [old])


def test_a_hybrid_allocator_and_an_open_free_group_are_refused() -> None:
    pool, _, _, reqs = chunk_pool(req_0523)
    swa = SimpleNamespace(free_pages=None, release_pages=None, page_size=1, size=8)
    with pytest.raises(ValueError, match=r"allocator\.free_pages is NoneType, not a tensor"):
        check_sglang_pool(pool, swa, NO_TREE, reqs)
    groups: list[dict[str, Any]] = [{"free_group": []}, {"free_group": [], "is_not_in_free_group": False}]
    for group in groups:
        with pytest.raises(ValueError, match="free group open"):
            check_sglang_pool(pool, allocator([6, 7, 8], size=8, **group), NO_TREE, reqs)
    # 0.5.18 keeps an empty group list outside a group; its flag says whether one is open.
    closed: dict[str, Any] = {"free_group": [], "is_not_in_free_group": True}
    assert check_sglang_pool(pool, allocator([6, 7, 8], size=8, **closed), NO_TREE, reqs).ok


# -- the report ------------------------------------------------------------------------------------------


def test_format_violations_writes_one_line_per_violation_then_the_gap() -> None:
    freed = check_sglang_pool(*chunk_pool(req_0523, free=[7, 8, 2]))
    assert format_violations(freed).splitlines() == [
        "page 2 owned-and-free: held by row 1, free",
        "page 6 leak: held by nobody",
    ]
    prefix = check_sglang_pool(*paged_pool(NO_TREE, free=[1, 2, 5, 6, 7, 8]))
    assert format_violations(prefix).splitlines() == [
        "page 1 prefix-not-tree: prefix of row 1",
        "page 2 prefix-not-tree: prefix of row 1",
    ]
    twice = check_sglang_pool(*chunk_pool(req_0523, free=[6, 7, 8, 6]))
    assert format_violations(twice).splitlines() == [
        "page 6 double-free: held by free, free",
        "conservation: free 4 + tree 0 + owned 5 = 9, not the pool's 8 pages",
    ]
    assert format_violations(check_sglang_pool(*chunk_pool(req_0523))) == ""
