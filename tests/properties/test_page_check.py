"""The whole-pool page check: its three backends agree, clean pools pass, planted corruptions are named exactly."""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from properties.page_check import (
    BACKENDS,
    DOUBLE_FREE,
    LEAK,
    OUT_OF_RANGE,
    OWNED_AND_FREE,
    OWNED_TWICE,
    PADDING_PAGE,
    PREFIX_NOT_TREE,
    TREE_AND_FREE,
    TREE_AND_OWNED,
    TREE_DUPLICATE,
    UNALIGNED_PROTECTED,
    PageCheckResult,
    PageLists,
    PageSnapshot,
    PageViolation,
    _check_oracle,
    _clean_result,
    check_pages,
    gather_refs,
    torch_page_stats,
)

if torch.cuda.is_available():
    # Fix the compiled mode now, at collection, before any test elsewhere sets TRITON_INTERPRET.
    import properties.page_check_triton  # noqa: F401
else:
    # Kernels are interpreted on CPU; the switch must precede the lazy import of properties.page_check_triton.
    os.environ["TRITON_INTERPRET"] = "1"

TRITON_DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
PAGE_SIZES = (1, 2, 4)
# The interpreter costs milliseconds per program, so Triton sees few, small pools and the others many.
FAST = settings(max_examples=80, deadline=None)
PLANTED = settings(max_examples=30, deadline=None)
TRITON = settings(max_examples=10, deadline=None)
GPU = settings(max_examples=25, deadline=None)


@dataclass
class Pool:
    """A pool as plain lists, easy to corrupt; `own[i]` lists live entry i's own pages in row order."""

    page_size: int
    num_pages: int
    table: list[list[int]]
    live: list[list[int]]  # [row, P, A] per live entry
    free: list[int]
    release: list[int]
    tree: list[int]
    own: list[list[int]] = field(default_factory=list)

    def snapshot(self) -> PageSnapshot:
        return PageSnapshot(
            req_to_token=torch.tensor(self.table, dtype=torch.int32),
            live_rows=torch.tensor([entry[0] for entry in self.live], dtype=torch.int64),
            protected_lens=torch.tensor([entry[1] for entry in self.live], dtype=torch.int64),
            allocated_lens=torch.tensor([entry[2] for entry in self.live], dtype=torch.int64),
            free_pages=torch.tensor(self.free, dtype=torch.int64),
            release_pages=torch.tensor(self.release, dtype=torch.int64),
            tree_pages=torch.tensor(self.tree, dtype=torch.int64),
            num_pages=self.num_pages,
            page_size=self.page_size,
        )

    def write_page(self, entry: int, page_pos: int, page: int) -> None:
        """Point live entry's row positions of page position `page_pos` (within [0, A)) at `page`."""
        row, _, allocated = self.live[entry]
        ps = self.page_size
        for pos in range(page_pos * ps, min((page_pos + 1) * ps, allocated)):
            self.table[row][pos] = page * ps + pos % ps


@st.composite
def consistent_pools(draw: st.DrawFn, max_rows: int = 5, max_pages_each: int = 4) -> Pool:
    """Tree branches shared as prefixes by several rows, each row's own pages after, the rest free."""
    ps = draw(st.sampled_from(PAGE_SIZES))
    live_count = draw(st.integers(1, max_rows))
    rows_total = live_count + draw(st.integers(0, 2))
    rows = draw(st.permutations(range(1, rows_total + 1)))[:live_count]
    # At most two branches, usually present, so that rows often share a branch's pages as their prefix.
    branches = [draw(st.integers(1, max_pages_each)) for _ in range(2 - draw(st.integers(0, 2)))]
    plans = [_draw_plan(draw, branches, ps, max_pages_each) for _ in rows]
    free_count = draw(st.integers(0, max_pages_each + 2))
    num_pages = sum(branches) + sum(plan[2] for plan in plans) + free_count
    pages = list(draw(st.permutations(range(1, num_pages + 1))))
    tree = pages[: sum(branches)]
    starts = [sum(branches[:b]) for b in range(len(branches))]
    width = max([1] + [plan[1] * ps + plan[2] * ps for plan in plans]) + draw(st.integers(0, 3))
    # Positions no check may read (other rows, beyond A) hold garbage, including ids of no real page.
    noise = random.Random(draw(st.integers(0, 2**32 - 1)))
    table = [[noise.randrange(-ps, (num_pages + 2) * ps) for _ in range(width)] for _ in range(rows_total + 1)]
    pool = Pool(ps, num_pages, table, [], [], [], tree)
    taken = sum(branches)
    for row, (branch, prefix, own, slack) in zip(rows, plans, strict=True):
        allocated = (prefix + own) * ps - (slack if own else 0)
        pool.live.append([row, prefix * ps, allocated])
        pool.own.append(pages[taken : taken + own])
        prefix_pages = tree[starts[branch] : starts[branch] + prefix] if prefix else []
        for page_pos, page in enumerate(prefix_pages + pool.own[-1]):
            pool.write_page(len(pool.live) - 1, page_pos, page)
        taken += own
    split = draw(st.integers(0, num_pages - taken))
    pool.free, pool.release = pages[taken : taken + split], pages[taken + split :]
    return pool


def _draw_plan(draw: st.DrawFn, branches: list[int], ps: int, max_pages: int) -> tuple[int, int, int, int]:
    """(branch, prefix pages, own pages, unused slots of the last own page) for one live request."""
    if not branches:
        return 0, 0, draw(st.integers(0, max_pages)), draw(st.integers(0, ps - 1))
    branch = draw(st.integers(0, len(branches) - 1))
    # Often the whole branch, so that several rows share its pages as their prefix.
    prefix = draw(st.one_of(st.just(branches[branch]), st.integers(0, branches[branch])))
    return branch, prefix, draw(st.integers(0, max_pages)), draw(st.integers(0, ps - 1))


@st.composite
def corrupted_pools(draw: st.DrawFn, max_rows: int = 5, max_pages_each: int = 4) -> Pool:
    """A consistent pool with one to four random corruptions of rows, records and page lists."""
    pool = draw(consistent_pools(max_rows, max_pages_each))
    for _ in range(draw(st.integers(1, 4))):
        _corrupt(draw, pool)
    return pool


def _corrupt(draw: st.DrawFn, pool: Pool) -> None:
    """Apply one corruption; page ids may fall outside 1..num_pages (including the padding page)."""
    ps, n, width = pool.page_size, pool.num_pages, len(pool.table[0])
    any_page = st.integers(-1, n + 1)
    lists = [pool.free, pool.release, pool.tree]
    choice = draw(st.sampled_from(["slot", "add", "drop", "duplicate-row", "protected", "allocated"]))
    if choice == "add":
        draw(st.sampled_from(lists)).append(draw(any_page))
    elif choice == "drop" and any(lists):
        pages = draw(st.sampled_from([pages for pages in lists if pages]))
        pages.pop(draw(st.integers(0, len(pages) - 1)))
    elif pool.live:
        entry = pool.live[draw(st.integers(0, len(pool.live) - 1))]
        row, protected, allocated = entry
        if choice == "slot" and allocated:
            pool.table[row][draw(st.integers(0, allocated - 1))] = draw(st.integers(-ps, (n + 2) * ps))
        elif choice == "duplicate-row":
            pool.live.append(list(entry))
        elif choice == "protected":
            entry[1] = draw(st.integers(0, allocated))
        elif choice == "allocated":
            entry[2] = draw(st.integers(protected, width))


def results(pool: Pool, backends: tuple[str, ...] = ("oracle", "torch")) -> dict[str, PageCheckResult]:
    snap = pool.snapshot()
    return {b: check_pages(snap.to(TRITON_DEVICE) if b == "triton" else snap, b) for b in backends}


def assert_found(pool: Pool, expected: list[PageViolation], gap: int, backends: tuple[str, ...]) -> None:
    """Every backend reports exactly `expected` (sorted by page, kind) and the conservation gap `gap`."""
    for backend, result in results(pool, backends).items():
        assert result.violations == sorted(expected, key=lambda v: (v.page, v.kind)), backend
        assert result.conservation_gap_pages == gap, backend


# -- the backends agree -------------------------------------------------------------------------------------


@FAST
@given(consistent_pools())
def test_consistent_pools_are_clean(pool: Pool) -> None:
    for backend, result in results(pool).items():
        assert result.ok, (backend, result)


@FAST
@given(corrupted_pools())
def test_oracle_and_torch_agree_on_corrupted_pools(pool: Pool) -> None:
    found = results(pool)
    assert found["torch"] == found["oracle"]


@settings(max_examples=300, deadline=None)
@given(st.one_of(consistent_pools(), corrupted_pools()))
def test_the_clean_fast_path_answers_as_the_oracle(pool: Pool) -> None:
    """The one-pass check the lockstep pays for answers exactly where the oracle finds nothing, and then as it."""
    lists = PageLists.of(pool.snapshot())
    assume(all(0 <= p <= a <= lists.width for _, p, a, _ in lists.rows))
    oracle, fast = _check_oracle(lists), _clean_result(lists)
    assert (fast is not None) == (not oracle.violations), (fast, oracle)
    assert fast is None or fast == oracle


@TRITON
@given(st.one_of(consistent_pools(max_rows=3, max_pages_each=3), corrupted_pools(max_rows=3, max_pages_each=3)))
def test_triton_agrees_with_torch_on_counts_and_findings(pool: Pool) -> None:
    from properties.page_check_triton import triton_page_stats

    snap = pool.snapshot()
    expected = torch_page_stats(snap, gather_refs(snap))
    stats = triton_page_stats(snap.to(TRITON_DEVICE))
    for name in ("free_count", "tree_count", "prefix_count", "own_lo", "own_hi"):
        assert torch.equal(getattr(stats, name).cpu()[1:], getattr(expected, name)[1:]), name
    assert stats.stray_refs == expected.stray_refs
    found = results(pool, BACKENDS)
    assert found["triton"] == found["oracle"]


# -- planted corruptions are named exactly ------------------------------------------------------------------


def plant_free_and_owned(pool: Pool, choose: st.DataObject) -> tuple[list[PageViolation], int]:
    owners = [i for i, own in enumerate(pool.own) if own]
    assume(owners)
    entry = choose.draw(st.sampled_from(owners))
    page = choose.draw(st.sampled_from(pool.own[entry]))
    choose.draw(st.sampled_from([pool.free, pool.release])).append(page)
    return [PageViolation(OWNED_AND_FREE, page, (pool.live[entry][0], "free"))], 1


def plant_owned_by_two_rows(pool: Pool, choose: st.DataObject) -> tuple[list[PageViolation], int]:
    owners = [i for i, own in enumerate(pool.own) if own]
    assume(len(owners) >= 2)
    first, second = choose.draw(st.permutations(owners))[:2]
    page = choose.draw(st.sampled_from(pool.own[first]))
    index = choose.draw(st.integers(0, len(pool.own[second]) - 1))
    lost = pool.own[second][index]
    pool.write_page(second, pool.live[second][1] // pool.page_size + index, page)
    rows = tuple(sorted((pool.live[first][0], pool.live[second][0])))
    return [PageViolation(OWNED_TWICE, page, rows), PageViolation(LEAK, lost, ())], 0


def plant_leak(pool: Pool, choose: st.DataObject) -> tuple[list[PageViolation], int]:
    assume(pool.free or pool.release)
    pages = choose.draw(st.sampled_from([pages for pages in (pool.free, pool.release) if pages]))
    page = pages.pop(choose.draw(st.integers(0, len(pages) - 1)))
    return [PageViolation(LEAK, page, ())], -1


def plant_double_free(pool: Pool, choose: st.DataObject) -> tuple[list[PageViolation], int]:
    assume(pool.free or pool.release)
    page = choose.draw(st.sampled_from(pool.free + pool.release))
    pool.release.append(page)
    return [PageViolation(DOUBLE_FREE, page, ("free", "free"))], 1


Plant = Callable[[Pool, st.DataObject], tuple[list[PageViolation], int]]
PLANTS: list[Plant] = [plant_free_and_owned, plant_owned_by_two_rows, plant_leak, plant_double_free]


@PLANTED
@pytest.mark.parametrize("plant", PLANTS, ids=lambda plant: plant.__name__)
@given(pool=consistent_pools(), choose=st.data())
def test_planted_corruption_is_named(plant: Plant, pool: Pool, choose: st.DataObject) -> None:
    expected, gap = plant(pool, choose)
    assert_found(pool, expected, gap, ("oracle", "torch"))


@TRITON
@given(pool=consistent_pools(max_rows=3, max_pages_each=3), plant=st.sampled_from(PLANTS), choose=st.data())
def test_triton_names_planted_corruptions(pool: Pool, plant: Plant, choose: st.DataObject) -> None:
    expected, gap = plant(pool, choose)
    assert_found(pool, expected, gap, ("triton",))


# -- every kind, on one small hand-made pool ----------------------------------------------------------------


def hand_made_pool() -> Pool:
    """Page size 2, pages 1..9: tree holds 1, 2; rows 1 and 2 share prefix page 1; 3..5 owned; 6..9 free."""
    table = [[0] * 8 for _ in range(4)]
    table[1][:5] = [2, 3, 6, 7, 8]  # prefix page 1, own pages 3, 4 (partial)
    table[2][:6] = [2, 3, 4, 5, 10, 11]  # prefix pages 1, 2, own page 5
    return Pool(2, 9, table, [[1, 2, 5], [2, 4, 6]], [6, 7], [8, 9], [1, 2])


def test_tree_pages_shared_by_prefixes_are_legal() -> None:
    for backend, result in results(hand_made_pool(), BACKENDS).items():
        assert result.ok, (backend, result)
        assert (result.free_pages_count, result.tree_pages_count, result.owned_pages_count) == (4, 2, 3)


def test_stray_page_in_a_row_alone_is_found() -> None:
    pool = hand_made_pool()
    pool.table[1][3] = 99 * 2 + 1  # row 1's second slot of page 3 now names page 99; page 3 keeps slot 6
    assert_found(pool, [PageViolation(OUT_OF_RANGE, 99, (1,))], gap=0, backends=BACKENDS)


def test_pool_without_live_requests() -> None:
    pool = Pool(1, 4, [[0, 0]], [], free=[2], release=[3], tree=[1])
    assert_found(pool, [PageViolation(LEAK, 4, ())], gap=-1, backends=BACKENDS)


def test_every_kind_is_named_with_its_page_and_owners() -> None:
    pool = hand_made_pool()
    pool.table[3][:2] = [4, 5]  # a third request on row 3, prefix page 2 only: P = 1 is unaligned
    pool.live.append([3, 1, 2])
    pool.table[1][0:2] = [18, 19]  # row 1's prefix now page 9, a free page
    pool.table[2][4] = 0  # row 2's own range reaches the padding page
    pool.free += [3, 6, 99]  # row 1's own page, a double free, a page past num_pages
    pool.tree += [2, 7]  # a tree duplicate, a tree page that is also free
    pool.release.remove(8)  # page 8 leaks
    expected = [
        PageViolation(PADDING_PAGE, 0, (2,)),
        PageViolation(UNALIGNED_PROTECTED, 2, (3,)),
        PageViolation(TREE_AND_OWNED, 2, (3, "tree", "tree")),
        PageViolation(TREE_DUPLICATE, 2, (3, "tree", "tree")),
        PageViolation(OWNED_AND_FREE, 3, (1, "free")),
        PageViolation(DOUBLE_FREE, 6, ("free", "free")),
        PageViolation(TREE_AND_FREE, 7, ("tree", "free")),
        PageViolation(LEAK, 8, ()),
        PageViolation(PREFIX_NOT_TREE, 9, (1,)),
        PageViolation(OUT_OF_RANGE, 99, ("free",)),
    ]
    assert_found(pool, expected, gap=(6 + 4 + 3) - 9, backends=BACKENDS)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"page_size": 0}, "page_size"),
        ({"allocated_lens": torch.tensor([5, 9])}, "P <= A <= width"),
        ({"protected_lens": torch.tensor([2, 7])}, "P <= A <= width"),
        ({"live_rows": torch.tensor([0, 2])}, "not in 1..rows"),
        ({"free_pages": torch.tensor([6, 7], dtype=torch.int32)}, "int64"),
    ],
)
def test_malformed_snapshots_are_refused(change: dict[str, object], message: str) -> None:
    snap = replace(hand_made_pool().snapshot(), **change)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=message):
        check_pages(snap, "oracle")


def test_unknown_backend_is_refused() -> None:
    with pytest.raises(ValueError, match="backend"):
        check_pages(hand_made_pool().snapshot(), "numpy")


# -- the compiled kernel ---------------------------------------------------------------------------------------


@pytest.mark.gpu
@GPU
# Rows up to 2,400 positions wide, so that a row spans several kernel programs (MAX_ROW_BLOCK positions each).
@given(st.one_of(consistent_pools(max_rows=32, max_pages_each=300), corrupted_pools(max_rows=32, max_pages_each=300)))
def test_compiled_kernel_agrees_on_cuda(pool: Pool) -> None:
    from properties import page_check_triton

    assert not page_check_triton.INTERPRETED, "the kernels were imported with TRITON_INTERPRET=1"
    snap = pool.snapshot()
    cuda = snap.to("cuda")
    expected = check_pages(snap, "oracle")
    assert check_pages(cuda, "triton") == expected
    assert check_pages(cuda, "torch") == expected
