"""Whole-pool page ownership (invariants I4 and I5 of the lifecycle notes), checked from tensors alone.

Every real page (1..num_pages) has exactly one holder: the free lists, the prefix tree, or one live request's
own range `[P, A)`; row positions `[0, P)` map to tree pages, which the tree and any number of requests share.
Three backends give identical findings: `oracle` (a plain loop over sets and dicts, the readable reference),
`torch` (vectorized per-page counts) and `triton` (the per-page counts in one kernel pass, CUDA or interpreter).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch

from properties.vocabulary import num_new_pages

Owner = int | str  # a row id (its own range holds the page), "tree" or "free"

PADDING_PAGE = "padding-page"  # page 0 referenced by a row position, the tree or the free lists
OUT_OF_RANGE = "out-of-range"  # a page id outside 0..num_pages referenced anywhere
UNALIGNED_PROTECTED = "unaligned-protected"  # P % page_size != 0; page is that of position P - 1
DOUBLE_FREE = "double-free"  # the page occurs more than once in free_pages ∪ release_pages
TREE_DUPLICATE = "tree-duplicate"  # the page occurs more than once in tree_pages
OWNED_TWICE = "owned-twice"  # two live requests' own ranges hold the page
OWNED_AND_FREE = "owned-and-free"
TREE_AND_FREE = "tree-and-free"
TREE_AND_OWNED = "tree-and-owned"
PREFIX_NOT_TREE = "prefix-not-tree"  # a position in [0, P) maps to a page the tree does not hold
LEAK = "leak"  # no holder at all

BACKENDS = ("oracle", "torch", "triton")


@dataclass(frozen=True)
class PageSnapshot:
    """What the page check reads: the row table (int32), live records and page lists (int64), pool sizes."""

    req_to_token: torch.Tensor
    live_rows: torch.Tensor
    protected_lens: torch.Tensor
    allocated_lens: torch.Tensor
    free_pages: torch.Tensor
    release_pages: torch.Tensor
    tree_pages: torch.Tensor
    num_pages: int
    page_size: int

    def to(self, device: str | torch.device) -> PageSnapshot:
        """The same snapshot with every tensor on `device`."""
        tensors = {name: getattr(self, name).to(device) for name in _TENSOR_FIELDS}
        return PageSnapshot(**tensors, num_pages=self.num_pages, page_size=self.page_size)


_TENSOR_FIELDS = (
    "req_to_token",
    "live_rows",
    "protected_lens",
    "allocated_lens",
    "free_pages",
    "release_pages",
    "tree_pages",
)


@dataclass(frozen=True)
class PageViolation:
    """One finding: its kind, the page id, and who holds or uses the page (rows ascending, then tree, free).

    For `prefix-not-tree` and `unaligned-protected` the owners are the rows whose prefix uses the page; for
    every other kind they are all the page's holders, with multiplicity ("free" twice for a double free).
    """

    kind: str
    page: int
    owners: tuple[Owner, ...]


@dataclass(frozen=True)
class PageCheckResult:
    """All violations, sorted by (page, kind), and the conservation counts in pages."""

    violations: list[PageViolation]
    num_pages: int
    free_pages_count: int  # len(free_pages) + len(release_pages)
    tree_pages_count: int  # len(tree_pages)
    owned_pages_count: int  # Σ ceil(A / page_size) - ceil(P / page_size) over live requests

    @property
    def conservation_gap_pages(self) -> int:
        """free + tree + owned - num_pages: positive after a double count, negative after a leak."""
        return self.free_pages_count + self.tree_pages_count + self.owned_pages_count - self.num_pages

    @property
    def ok(self) -> bool:
        """No violation and the conservation equation holds."""
        return not self.violations and self.conservation_gap_pages == 0


@dataclass(frozen=True)
class PageStats:
    """Per-page counts (int32, indexed by page id; entry 0 stays at its initial value) and stray references.

    `own_lo` / `own_hi` are the smallest / largest live-entry index whose `[P, A)` maps to the page
    (`len(live_rows)` / -1 when none): the page has two owners exactly when they differ.
    """

    free_count: torch.Tensor
    tree_count: torch.Tensor
    prefix_count: torch.Tensor
    own_lo: torch.Tensor
    own_hi: torch.Tensor
    stray_refs: int  # references (row positions, list entries) to a page outside 1..num_pages


# Below this many pages plus row entries the oracle's whole loop costs less than the vectorized path's fixed
# overhead (about fifty tensor ops, ~1.5 ms on a 2-core CPU); the fuzzer's small pools sit far below it.
AUTO_ORACLE_LIMIT = 4096


def check_pages(snap: PageSnapshot, backend: str = "torch") -> PageCheckResult:
    """Check page ownership of the whole pool with `backend` (one of `BACKENDS`, or `auto`: the faster of the
    oracle and the torch path for this size, with identical findings)."""
    validate(snap)
    if backend == "auto":
        entries = int(snap.allocated_lens.sum()) if snap.allocated_lens.numel() else 0
        small = snap.req_to_token.is_cpu and snap.num_pages + entries <= AUTO_ORACLE_LIMIT
        backend = "oracle" if small else "torch"
    if backend == "oracle":
        return _check_oracle(PageLists.of(snap))
    if backend == "torch":
        refs = gather_refs(snap)
        return _check_from_stats(snap, torch_page_stats(snap, refs), lambda: refs)
    if backend == "triton":
        # Imported here: the kernel module's @triton.jit reads TRITON_INTERPRET when it is first imported.
        from properties.page_check_triton import triton_page_stats

        return _check_from_stats(snap, triton_page_stats(snap), lambda: gather_refs(snap))
    raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")


def validate(snap: PageSnapshot) -> None:
    """Raise ValueError unless the snapshot is well formed (dtypes, shapes, 1 <= row, 0 <= P <= A <= width)."""
    table = snap.req_to_token
    _require(table.dim() == 2 and table.dtype == torch.int32, "req_to_token must be a 2-D int32 tensor")
    _require(table.is_contiguous(), "req_to_token must be contiguous")
    for name in _TENSOR_FIELDS[1:]:
        tensor = getattr(snap, name)
        _require(tensor.dim() == 1 and tensor.dtype == torch.int64, f"{name} must be a 1-D int64 tensor")
        _require(tensor.device == table.device, f"{name} is on {tensor.device}, req_to_token on {table.device}")
    live = snap.live_rows.numel()
    same_len = snap.protected_lens.numel() == live and snap.allocated_lens.numel() == live
    _require(same_len, "live_rows, protected_lens and allocated_lens must have one entry per live request")
    _require(snap.page_size >= 1 and snap.num_pages >= 0, "page_size must be >= 1 and num_pages >= 0")
    if live:
        rows, width = table.shape
        # Record invariants I2/I3 are checked elsewhere; without them no row range can be read.
        _require(bool((snap.live_rows >= 1).all() & (snap.live_rows < rows).all()), "a live row is not in 1..rows")
        lens_ok = (snap.protected_lens >= 0) & (snap.protected_lens <= snap.allocated_lens)
        _require(bool((lens_ok & (snap.allocated_lens <= width)).all()), "a live record breaks 0 <= P <= A <= width")


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(message)


# -- oracle: a plain loop, sets and dicts ------------------------------------------------------------------


@dataclass(frozen=True)
class PageLists:
    """A page snapshot as plain lists, for the oracle: `rows` holds (row, P, A, the row's first A slots) per
    live request. Small CPU pools are checked from these directly, without building tensors."""

    rows: list[tuple[int, int, int, list[int]]]
    free_pages: list[int]
    release_pages: list[int]
    tree_pages: list[int]
    num_pages: int
    page_size: int
    width: int

    @classmethod
    def of(cls, snap: PageSnapshot) -> PageLists:
        records = zip(snap.live_rows.tolist(), snap.protected_lens.tolist(), snap.allocated_lens.tolist(), strict=True)
        rows = [(row, p, a, snap.req_to_token[row, :a].tolist()) for row, p, a in records]
        return cls(
            rows,
            snap.free_pages.tolist(),
            snap.release_pages.tolist(),
            snap.tree_pages.tolist(),
            snap.num_pages,
            snap.page_size,
            snap.req_to_token.shape[1],
        )


def check_page_lists(lists: PageLists) -> PageCheckResult:
    """The oracle on plain lists (raises ValueError, as `validate`, for a length outside 0 <= P <= A <= width)."""
    if lists.page_size < 1 or lists.num_pages < 0:
        raise ValueError("page_size must be >= 1 and num_pages >= 0")
    if not all(0 <= p <= a <= lists.width and len(slots) == a for _, p, a, slots in lists.rows):
        raise ValueError("a live record breaks 0 <= P <= A <= width")
    return _clean_result(lists) or _check_oracle(lists)


def _clean_result(lists: PageLists) -> PageCheckResult | None:
    """The oracle's result where it finds nothing, decided in one pass; None where it may find something.

    The oracle reports nothing exactly when every protected length is page-aligned, every prefix page is a tree
    page, and the free, releasing and tree pages with each row's own pages (as a set per row, as the oracle
    counts them) are the pages 1..num_pages, each once: then each real page has one holder and nothing is out
    of range. This is the check a lockstep step pays for, so it avoids building the oracle's Counters and
    per-page lists unless there is something to report (`test_page_check` holds the two to the same answer)."""
    ps = lists.page_size
    pages = lists.free_pages + lists.release_pages + lists.tree_pages
    tree = set(lists.tree_pages)
    owned = 0
    for _, protected, allocated, slots in lists.rows:
        if protected % ps or not {slot // ps for slot in slots[:protected]} <= tree:
            return None
        pages.extend({slot // ps for slot in slots[protected:]})
        owned += num_new_pages(protected, allocated, ps)
    if len(pages) != lists.num_pages or sorted(pages) != list(range(1, lists.num_pages + 1)):
        return None
    released = len(lists.free_pages) + len(lists.release_pages)
    return PageCheckResult([], lists.num_pages, released, len(lists.tree_pages), owned)


def _check_oracle(snap: PageLists) -> PageCheckResult:
    """The readable reference, in the style of SGLang's own checker: Counters of list entries, sets per row."""
    n = snap.num_pages
    free_count = Counter(snap.free_pages + snap.release_pages)
    tree_count = Counter(snap.tree_pages)
    rows = _OracleRows(snap)
    violations = [PageViolation(UNALIGNED_PROTECTED, page, _holders(who, 0, 0)) for page, who in rows.unaligned.items()]
    for page in range(1, n + 1):
        owning, tree, free = rows.own.get(page, []), tree_count[page], free_count[page]
        if len(owning) + tree + free != 1:  # exactly one holder is the only legal state of a real page
            holders = _holders(owning, tree, free)
            violations += [PageViolation(kind, page, holders) for kind in _oracle_kinds(len(owning), tree, free)]
        if page in rows.prefix and not tree:
            violations.append(PageViolation(PREFIX_NOT_TREE, page, _holders(rows.prefix[page], 0, 0)))
    for page in {page for page in (*free_count, *tree_count, *rows.stray) if not 1 <= page <= n}:
        owners = _holders(rows.stray.get(page, []), tree_count[page], free_count[page])
        violations.append(PageViolation(PADDING_PAGE if page == 0 else OUT_OF_RANGE, page, owners))
    ps = snap.page_size
    owned = sum(num_new_pages(protected, allocated, ps) for _, protected, allocated, _ in snap.rows)
    violations.sort(key=lambda v: (v.page, v.kind))
    return PageCheckResult(violations, n, len(snap.free_pages) + len(snap.release_pages), len(snap.tree_pages), owned)


class _OracleRows:
    """Each live row read once into sets of pages: who owns, who uses as prefix, who names a stray page."""

    def __init__(self, snap: PageLists):
        ps, n = snap.page_size, snap.num_pages
        self.own: dict[int, list[int]] = defaultdict(list)
        self.prefix: dict[int, list[int]] = defaultdict(list)
        self.stray: dict[int, list[int]] = defaultdict(list)
        self.unaligned: dict[int, list[int]] = defaultdict(list)
        for row, protected, _, slots in snap.rows:
            own = {slot // ps for slot in slots[protected:]}
            prefix = {slot // ps for slot in slots[:protected]}
            for page in own:
                self.own[page].append(row)
            for page in prefix:
                self.prefix[page].append(row)
            for page in own | prefix:
                if not 1 <= page <= n:
                    self.stray[page].append(row)
            if protected % ps:
                self.unaligned[slots[protected - 1] // ps].append(row)


def _oracle_kinds(own: int, tree: int, free: int) -> list[str]:
    """The holder kinds of one real page with `own` owning requests, `tree` tree and `free` free entries."""
    pairs = [
        (free > 1, DOUBLE_FREE),
        (tree > 1, TREE_DUPLICATE),
        (own > 1, OWNED_TWICE),
        (own > 0 and free > 0, OWNED_AND_FREE),
        (tree > 0 and free > 0, TREE_AND_FREE),
        (tree > 0 and own > 0, TREE_AND_OWNED),
        (own + tree + free == 0, LEAK),
    ]
    return [kind for broken, kind in pairs if broken]


# -- torch: per-page counts over gathered references --------------------------------------------------------


@dataclass(frozen=True)
class RowRefs:
    """Every row reference of the live requests: page id and live-entry index of each position."""

    own_pages: torch.Tensor  # positions [P, A)
    own_entries: torch.Tensor
    prefix_pages: torch.Tensor  # positions [0, P)
    prefix_entries: torch.Tensor


def gather_refs(snap: PageSnapshot) -> RowRefs:
    """Gather the page of every position `[0, A)` of every live row, as flat tensors (no loop over rows)."""
    zeros = torch.zeros_like(snap.protected_lens)
    own_pages, own_entries = _ragged_pages(snap, snap.protected_lens, snap.allocated_lens)
    prefix_pages, prefix_entries = _ragged_pages(snap, zeros, snap.protected_lens)
    return RowRefs(own_pages, own_entries, prefix_pages, prefix_entries)


def _ragged_pages(snap: PageSnapshot, start: torch.Tensor, end: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Pages of positions `[start_i, end_i)` of each live row i, and i for each, concatenated over i."""
    device = start.device
    lens = end - start
    total = int(lens.sum())
    entries = torch.repeat_interleave(torch.arange(lens.numel(), device=device), lens, output_size=total)
    first = torch.cumsum(lens, 0) - lens
    # Position start_i + k of row r sits at flat index r * width + start_i + k, where k = j - first_i.
    shift = snap.live_rows * snap.req_to_token.shape[1] + start - first
    flat = torch.arange(total, device=device) + shift[entries]
    slots = torch.take(snap.req_to_token, flat).long()
    pages = slots if snap.page_size == 1 else torch.div(slots, snap.page_size, rounding_mode="floor")
    return pages, entries


def torch_page_stats(snap: PageSnapshot, refs: RowRefs) -> PageStats:
    """Per-page counts from gathered references: bincounts and scatter min/max, no Python loop."""
    n, live = snap.num_pages, snap.live_rows.numel()
    free_index, free_strays = _real_index(torch.cat((snap.free_pages, snap.release_pages)), n)
    tree_index, tree_strays = _real_index(snap.tree_pages, n)
    prefix_index, prefix_strays = _real_index(refs.prefix_pages, n)
    own_index, own_strays = _real_index(refs.own_pages, n)
    entries = refs.own_entries.int()
    own_lo = torch.full((n + 1,), live, dtype=torch.int32, device=entries.device)
    own_hi = torch.full_like(own_lo, -1)
    own_lo.scatter_reduce_(0, own_index, entries, reduce="amin")
    own_hi.scatter_reduce_(0, own_index, entries, reduce="amax")
    # Index 0 collected every stray reference above; put it back to its initial value.
    own_lo[0], own_hi[0] = live, -1
    return PageStats(
        free_count=_bincount(free_index, n),
        tree_count=_bincount(tree_index, n),
        prefix_count=_bincount(prefix_index, n),
        own_lo=own_lo,
        own_hi=own_hi,
        stray_refs=free_strays + tree_strays + prefix_strays + own_strays,
    )


def _real_index(pages: torch.Tensor, n: int) -> tuple[torch.Tensor, int]:
    """`pages` with every id outside 1..n sent to 0, and how many were."""
    if pages.numel() == 0:
        return pages, 0
    low, high = torch.aminmax(pages)
    if int(low) >= 1 and int(high) <= n:
        return pages, 0  # the common case, one pass: a consistent pool has no stray page
    real = (pages >= 1) & (pages <= n)
    return torch.where(real, pages, 0), int(real.numel() - real.sum())


def _bincount(index: torch.Tensor, n: int) -> torch.Tensor:
    counts = torch.bincount(index, minlength=n + 1).int()
    counts[0] = 0
    return counts


# -- findings from per-page counts (torch and triton backends) ---------------------------------------------


def _check_from_stats(snap: PageSnapshot, stats: PageStats, refs_of: Callable[[], RowRefs]) -> PageCheckResult:
    """Name the violations the counts flag; row references are gathered only when some page is suspect."""
    suspects = _suspect_pages(stats)
    violations = _unaligned_violations(snap)
    if suspects.numel() or stats.stray_refs:
        violations += _named_violations(snap, stats, suspects, refs_of())
    return _result(snap, violations, _owned_pages(snap))


def _suspect_pages(stats: PageStats) -> torch.Tensor:
    """Real pages without exactly one holder, or used as a prefix but not held by the tree (few passes)."""
    owned = (stats.own_hi >= 0).int()
    shared = (stats.own_lo < stats.own_hi).int()  # the sentinels (len(live), -1) compare greater
    holders = stats.free_count + stats.tree_count + owned + shared
    suspect = (holders != 1) | ((stats.prefix_count > 0) & (stats.tree_count == 0))
    suspect[0] = False  # the padding page has its own kind, reported from stray references
    return suspect.nonzero().flatten()


def _named_violations(snap: PageSnapshot, stats: PageStats, pages: torch.Tensor, refs: RowRefs) -> list[PageViolation]:
    """The violations on suspect `pages`, each with its holders (or prefix users) named, and the stray pages."""
    free, tree = stats.free_count[pages], stats.tree_count[pages]
    lo, hi = stats.own_lo[pages], stats.own_hi[pages]
    flags = _page_flags(free, tree, hi >= 0, lo < hi, stats.prefix_count[pages] > 0)
    own_rows = _rows_by_page(snap, refs.own_pages, refs.own_entries, pages[hi >= 0])
    prefix_rows = _rows_by_page(snap, refs.prefix_pages, refs.prefix_entries, pages[flags[PREFIX_NOT_TREE]])
    violations = []
    for kind, mask in flags.items():
        for page, trees, frees in zip(pages[mask].tolist(), tree[mask].tolist(), free[mask].tolist(), strict=True):
            if kind == PREFIX_NOT_TREE:
                violations.append(PageViolation(kind, page, _holders(prefix_rows.get(page, []), 0, 0)))
            else:
                violations.append(PageViolation(kind, page, _holders(own_rows.get(page, []), trees, frees)))
    if stats.stray_refs:
        violations += _stray_violations(snap, refs)
    return violations


def _page_flags(
    free: torch.Tensor, tree: torch.Tensor, owned: torch.Tensor, shared: torch.Tensor, prefixed: torch.Tensor
) -> dict[str, torch.Tensor]:
    """One mask per kind of conflict, over pages given by their free, tree and owner counts."""
    return {
        DOUBLE_FREE: free > 1,
        TREE_DUPLICATE: tree > 1,
        OWNED_TWICE: shared,
        OWNED_AND_FREE: owned & (free > 0),
        TREE_AND_FREE: (tree > 0) & (free > 0),
        TREE_AND_OWNED: (tree > 0) & owned,
        PREFIX_NOT_TREE: prefixed & (tree == 0),
        LEAK: ~owned & (tree == 0) & (free == 0),
    }


def _rows_by_page(
    snap: PageSnapshot, pages: torch.Tensor, entries: torch.Tensor, wanted_pages: torch.Tensor
) -> dict[int, list[int]]:
    """For each of `wanted_pages` (real pages), the rows of the live entries that reference it (one per entry)."""
    wanted = torch.zeros(snap.num_pages + 1, dtype=torch.bool, device=pages.device)
    wanted[wanted_pages] = True
    real = (pages >= 1) & (pages <= snap.num_pages)
    hit = real & wanted[torch.where(real, pages, 0)]
    return _group_rows(snap, pages[hit], entries[hit])


def _group_rows(snap: PageSnapshot, pages: torch.Tensor, entries: torch.Tensor) -> dict[int, list[int]]:
    pairs = torch.unique(torch.stack((pages, entries), dim=1), dim=0)
    grouped: dict[int, list[int]] = defaultdict(list)
    for page, row in zip(pairs[:, 0].tolist(), snap.live_rows[pairs[:, 1]].tolist(), strict=True):
        grouped[page].append(row)
    return grouped


def _stray_violations(snap: PageSnapshot, refs: RowRefs) -> list[PageViolation]:
    """Every page id outside 1..num_pages that a row position, the tree or the free lists references."""
    n = snap.num_pages
    pages = torch.cat((refs.own_pages, refs.prefix_pages))
    entries = torch.cat((refs.own_entries, refs.prefix_entries))
    stray = (pages < 1) | (pages > n)
    rows = _group_rows(snap, pages[stray], entries[stray])
    frees = Counter(_strays(torch.cat((snap.free_pages, snap.release_pages)), n))
    trees = Counter(_strays(snap.tree_pages, n))
    violations = []
    for page in {*rows, *frees, *trees}:
        owners = _holders(rows.get(page, []), trees[page], frees[page])
        violations.append(PageViolation(PADDING_PAGE if page == 0 else OUT_OF_RANGE, page, owners))
    return violations


def _strays(pages: torch.Tensor, n: int) -> list[int]:
    return pages[(pages < 1) | (pages > n)].tolist()


def _unaligned_violations(snap: PageSnapshot) -> list[PageViolation]:
    """Live requests whose P is not page-aligned, grouped by the page of position P - 1."""
    bad = snap.protected_lens % snap.page_size != 0
    bad_rows = snap.live_rows[bad]
    slots = snap.req_to_token[bad_rows, snap.protected_lens[bad] - 1].long()
    pages = torch.div(slots, snap.page_size, rounding_mode="floor")
    grouped: dict[int, list[int]] = defaultdict(list)
    for page, row in zip(pages.tolist(), bad_rows.tolist(), strict=True):
        grouped[page].append(row)
    return [PageViolation(UNALIGNED_PROTECTED, page, _holders(rows, 0, 0)) for page, rows in grouped.items()]


def _owned_pages(snap: PageSnapshot) -> int:
    ps = snap.page_size
    return int(num_new_pages(snap.protected_lens, snap.allocated_lens, ps).sum())


# -- shared by every backend ---------------------------------------------------------------------------------


def _holders(rows: Iterable[int], tree: int, free: int) -> tuple[Owner, ...]:
    """Owners in the one order every backend reports: row ids ascending, then each tree entry, each free entry."""
    return (*sorted(rows), *["tree"] * tree, *["free"] * free)


def _result(snap: PageSnapshot, violations: list[PageViolation], owned_pages: int) -> PageCheckResult:
    violations.sort(key=lambda v: (v.page, v.kind))
    return PageCheckResult(
        violations=violations,
        num_pages=snap.num_pages,
        free_pages_count=snap.free_pages.numel() + snap.release_pages.numel(),
        tree_pages_count=snap.tree_pages.numel(),
        owned_pages_count=owned_pages,
    )
