"""The invariant catalog: each invariant once, with its symbolic form over the model and its concrete check.

The symbolic form is a formula over a model state `s` (fields such as `rec_row`, `row_held`), built with an
interpreter `o` (Python values or Z3 terms) and sizes `p` (`rows`, `tokens`, `width`); invariants over
records or rows take the index they are stated at. The concrete check reads a target's snapshot and returns
one message per violation, naming the requests and rows involved.

Counting invariants are stated symbolically over ghost counters the model keeps (`n_free_rows`,
`owned_slots`); their link to the arrays is a cardinality, which the concrete check recounts on the pool.
Slot identity is abstracted away by the model, so slot-level checks are concrete only.

The record predicates and page arithmetic the forms use are the model's own (`properties.vocabulary`). The
catalog imports no torch, because the model reads it for the symbolic forms: the whole-pool page check, which
runs on tensors, imports `properties.page_check` when it first runs.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from properties.abstraction import match_only
from properties.snapshot import SnapshotLike
from properties.vocabulary import (
    LIVE_STATUSES,
    STATUS_CODES,
    STATUS_DONE,
    STATUS_NEW,
    STATUS_PREFILL,
    STATUS_WAITING,
    Term,
    holds,
    live,
    live_status,
    owned_slots,
    page_floor,
)

if TYPE_CHECKING:
    from properties.page_check import PageLists, PageSnapshot


@dataclass(frozen=True)
class Invariant:
    """One invariant: `index` lists the sorts it is quantified over ('req' or 'row'), outermost first."""

    id: str
    statement: str
    index: tuple[str, ...]
    symbolic: Callable[..., Term] | None
    concrete: Callable[[SnapshotLike], list[str]]


def _kv_presence(o: Any, p: Any, s: Any, i: Term) -> Term:
    return holds(o, s, i) == (o.select(s.rec_A, i) > 0)


def _kv_presence_check(snap: SnapshotLike) -> list[str]:
    return [
        f"request {rid}: holds_kv={rec.row is not None} but kv_allocated_len={rec.allocated_len}"
        for rid, rec in snap.records.items()
        if (rec.row is not None) != (rec.allocated_len > 0)
    ]


def _owns_row(o: Any, p: Any, s: Any, i: Term) -> Term:
    r = o.select(s.rec_row, i)
    return o.And(r >= 1, r <= p.rows, o.select(s.row_held, r), o.select(s.row_owner, r) == i)


def _row_owner(o: Any, p: Any, s: Any, i: Term) -> Term:
    return o.Implies(holds(o, s, i), _owns_row(o, p, s, i))


def _row_problems(snap: SnapshotLike, statuses: set[int] | None) -> list[str]:
    """Records (of the given statuses, or all) naming a row outside the pool or in the free list."""
    free = set(snap.free_rows)
    out = []
    for rid, rec in snap.records.items():
        if rec.row is None or (statuses is not None and STATUS_CODES.get(rec.status) not in statuses):
            continue
        if not 1 <= rec.row <= snap.rows_total:
            out.append(f"request {rid} holds row {rec.row}, outside 1..{snap.rows_total}")
        elif rec.row in free:
            out.append(f"request {rid} holds row {rec.row}, which is in the free list")
    return out


def _row_owner_check(snap: SnapshotLike) -> list[str]:
    return _row_problems(snap, None)


def _row_held_by_owner(o: Any, p: Any, s: Any, r: Term) -> Term:
    owner = o.select(s.row_owner, r)
    back = o.And(owner >= 0, o.select(s.rec_row, owner) == r, live_status(o, o.select(s.rec_status, owner)))
    return o.Implies(o.select(s.row_held, r), o.And(r >= 1, r <= p.rows, back))


def _row_held_check(snap: SnapshotLike) -> list[str]:
    out = []
    handed_out = set(range(1, snap.rows_total + 1)) - set(snap.free_rows)
    for row in sorted(handed_out):
        claimants = [rid for rid, rec in snap.records.items() if rec.row == row]
        if not claimants:
            out.append(f"row {row} is neither free nor held by any request (leaked)")
        elif not any(STATUS_CODES.get(snap.records[rid].status) in LIVE_STATUSES for rid in claimants):
            out.append(f"row {row} is held only by requests {claimants} that are not live")
    return out


def _row_exclusive(o: Any, p: Any, s: Any, i: Term, j: Term) -> Term:
    both = o.And(i != j, live(o, s, i), live(o, s, j))
    return o.Implies(both, o.select(s.rec_row, i) != o.select(s.rec_row, j))


def _row_exclusive_check(snap: SnapshotLike) -> list[str]:
    by_row: dict[int, list[int]] = {}
    for rid, rec in snap.records.items():
        if rec.row is not None and STATUS_CODES.get(rec.status) in LIVE_STATUSES:
            by_row.setdefault(rec.row, []).append(rid)
    return [
        f"row {row} is held by live requests {', '.join(map(str, rids))}"
        for row, rids in sorted(by_row.items())
        if len(rids) > 1
    ]


def _length_order(o: Any, p: Any, s: Any, i: Term) -> Term:
    P, C, A = o.select(s.rec_P, i), o.select(s.rec_C, i), o.select(s.rec_A, i)
    return o.Implies(holds(o, s, i), o.And(P >= 0, P <= C, C <= A, p.width >= A))


def _length_order_check(snap: SnapshotLike) -> list[str]:
    return [
        f"request {rid}: lengths P={r.protected_len} C={r.committed_len} A={r.allocated_len} "
        f"break 0 <= P <= C <= A <= {snap.width}"
        for rid, r in snap.records.items()
        if r.row is not None and not 0 <= r.protected_len <= r.committed_len <= r.allocated_len <= snap.width
    ]


def _released_unallocated(o: Any, p: Any, s: Any, i: Term) -> Term:
    done = o.select(s.rec_status, i) == STATUS_DONE
    return o.Implies(done, o.And(o.select(s.rec_A, i) == 0, o.select(s.rec_locked, i) == 0))


def _released_unallocated_check(snap: SnapshotLike) -> list[str]:
    return [
        f"released request {rid} keeps kv_allocated_len={rec.allocated_len}, tree lock={rec.tree_locked}"
        for rid, rec in snap.records.items()
        if STATUS_CODES.get(rec.status) == STATUS_DONE and (rec.allocated_len != 0 or rec.tree_locked)
    ]


def _released_rowless(o: Any, p: Any, s: Any, i: Term) -> Term:
    return o.Implies(o.select(s.rec_status, i) == STATUS_DONE, o.Not(holds(o, s, i)))


def _released_rowless_check(snap: SnapshotLike) -> list[str]:
    return [
        f"released request {rid} still names row {rec.row}"
        for rid, rec in snap.records.items()
        if STATUS_CODES.get(rec.status) == STATUS_DONE and rec.row is not None
    ]


def _live_row_owned(o: Any, p: Any, s: Any, i: Term) -> Term:
    return o.Implies(live(o, s, i), _owns_row(o, p, s, i))


def _live_row_owned_check(snap: SnapshotLike) -> list[str]:
    return _row_problems(snap, set(LIVE_STATUSES))


def _record_domain(o: Any, p: Any, s: Any, i: Term) -> Term:
    status = o.select(s.rec_status, i)
    known = o.Or(status == STATUS_NEW, live_status(o, status), status == STATUS_DONE, status == STATUS_WAITING)
    lengths = [o.select(a, i) >= 0 for a in (s.rec_P, s.rec_C, s.rec_A, s.rec_inflight, s.rec_end)]
    locked, prompt = o.select(s.rec_locked, i), o.select(s.rec_prompt, i)
    prompt_ok = o.Implies(status != STATUS_NEW, o.And(prompt >= 1, prompt <= p.width))
    in_row = o.And(o.select(s.rec_C, i) <= p.width, o.select(s.rec_A, i) <= p.width)
    return o.And(known, o.Or(locked == 0, locked == 1), prompt_ok, in_row, *lengths)


def _record_domain_check(snap: SnapshotLike) -> list[str]:
    return [
        f"request {rid}: status {rec.status!r} or a negative length (P={rec.protected_len}, "
        f"C={rec.committed_len}, A={rec.allocated_len}, chunks={rec.inflight_middle_chunks})"
        for rid, rec in snap.records.items()
        if rec.status not in STATUS_CODES
        or min(rec.protected_len, rec.committed_len, rec.allocated_len, rec.inflight_middle_chunks) < 0
        or max(rec.committed_len, rec.allocated_len) > snap.width
    ]


def _live_holds(o: Any, p: Any, s: Any, i: Term) -> Term:
    return o.Implies(live_status(o, o.select(s.rec_status, i)), holds(o, s, i))


def _live_holds_check(snap: SnapshotLike) -> list[str]:
    return [
        f"request {rid} is {rec.status} but holds no row"
        for rid, rec in snap.records.items()
        if STATUS_CODES.get(rec.status) in LIVE_STATUSES and rec.row is None
    ]


def _prefill_shape(o: Any, p: Any, s: Any, i: Term) -> Term:
    C, A, end = o.select(s.rec_C, i), o.select(s.rec_A, i), o.select(s.rec_end, i)
    in_prefill = o.select(s.rec_status, i) == STATUS_PREFILL
    return o.Implies(in_prefill, o.And(C == A, end == C, o.select(s.rec_prompt, i) > C))


def _prefill_shape_check(snap: SnapshotLike) -> list[str]:
    return [
        f"request {rid} between prefill chunks has C={rec.committed_len}, A={rec.allocated_len}, "
        f"extend end={rec.extend_end}"
        for rid, rec in snap.records.items()
        if STATUS_CODES.get(rec.status) == STATUS_PREFILL
        and not rec.committed_len == rec.allocated_len == rec.extend_end
    ]


def _no_overallocation(o: Any, p: Any, s: Any, i: Term) -> Term:
    if p.speculative:
        return True
    return o.Implies(holds(o, s, i), o.select(s.rec_C, i) == o.select(s.rec_A, i))


def _no_overallocation_check(snap: SnapshotLike) -> list[str]:
    if snap.speculative:
        return []
    return [
        f"request {rid}: kv_committed_len={rec.committed_len} != kv_allocated_len={rec.allocated_len}"
        for rid, rec in snap.records.items()
        if rec.row is not None and rec.committed_len != rec.allocated_len
    ]


def _unprotected(o: Any, p: Any, s: Any, i: Term) -> Term:
    if p.radix:
        return True
    return o.Implies(holds(o, s, i), o.select(s.rec_P, i) == 0)


def _protected_pages(o: Any, p: Any, s: Any, i: Term) -> Term:
    P = o.select(s.rec_P, i)
    return o.Implies(holds(o, s, i), page_floor(P, p.page_size) == P)


def _protected_pages_check(snap: SnapshotLike) -> list[str]:
    return [
        f"request {rid}: cache_protected_len={rec.protected_len} is not a multiple of page size {snap.page_size}"
        for rid, rec in snap.records.items()
        if rec.row is not None and rec.protected_len % snap.page_size
    ]


def _lock_follows_prefix(o: Any, p: Any, s: Any, i: Term) -> Term:
    locked = o.select(s.rec_locked, i) == 1
    return locked == o.And(holds(o, s, i), o.select(s.rec_P, i) > 0)


def _lock_follows_prefix_check(snap: SnapshotLike) -> list[str]:
    return [
        f"request {rid}: holds a tree lock={rec.tree_locked} but row={rec.row}, cache_protected_len={rec.protected_len}"
        for rid, rec in snap.records.items()
        if rec.tree_locked != (rec.row is not None and rec.protected_len > 0)
    ]


def _unprotected_check(snap: SnapshotLike) -> list[str]:
    if snap.cache != "chunk":
        return []
    return [
        f"request {rid}: cache_protected_len={rec.protected_len} with a chunk cache, which protects nothing"
        for rid, rec in snap.records.items()
        if rec.row is not None and rec.protected_len != 0
    ]


def _never_admitted_empty(o: Any, p: Any, s: Any, i: Term) -> Term:
    status = o.select(s.rec_status, i)
    fields = (s.rec_row, s.rec_P, s.rec_C, s.rec_A, s.rec_inflight, s.rec_end, s.rec_locked)
    empty = o.And(*[o.select(a, i) == 0 for a in fields])
    return o.And(
        o.Implies(status == STATUS_NEW, o.And(empty, o.select(s.rec_prompt, i) == 0)),
        o.Implies(status == STATUS_WAITING, empty),
    )


def _never_admitted_check(snap: SnapshotLike) -> list[str]:
    return [
        f"waiting request {rid} keeps row={rec.row}, P={rec.protected_len}, C={rec.committed_len}, "
        f"A={rec.allocated_len}, lock={rec.tree_locked}"
        for rid, rec in snap.records.items()
        if STATUS_CODES.get(rec.status) == STATUS_WAITING and not match_only(rec)
    ]


def _row_conservation(o: Any, p: Any, s: Any) -> Term:
    return s.n_free_rows + s.n_held_rows == p.rows


def _row_conservation_check(snap: SnapshotLike) -> list[str]:
    out = []
    dups = sorted(r for r, n in Counter(snap.free_rows).items() if n > 1)
    if dups:
        out.append(f"rows {dups} appear more than once in the free list (double free)")
    bad = sorted(r for r in set(snap.free_rows) if not 1 <= r <= snap.rows_total)
    if bad:
        out.append(f"rows {bad} in the free list are not rows of this pool")
    held = {rec.row for rec in snap.records.values() if rec.row is not None}
    if len(snap.free_rows) + len(held) != snap.rows_total:
        out.append(f"{len(snap.free_rows)} free rows + {len(held)} held rows != {snap.rows_total} rows")
    return out


def _token_conservation(o: Any, p: Any, s: Any) -> Term:
    # That `owned_slots` is the sum over records is a cardinality fact: the concrete check recounts it.
    counts = o.And(s.n_free_slots >= 0, s.tree_slots >= 0)
    return o.And(s.n_free_slots + s.pending_slots + s.tree_slots + s.owned_slots == p.tokens, counts)


def _token_conservation_check(snap: SnapshotLike) -> list[str]:
    ps = snap.page_size
    free = (snap.free_slots.numel() + snap.release_slots.numel()) * ps
    pending = snap.pending_pages.numel() * ps
    owned = sum(owned_slots(r.protected_len, r.allocated_len, ps) for r in snap.records.values() if r.row is not None)
    tree = snap.evictable_size + snap.protected_size
    if free + pending + tree + owned != snap.tokens_total:
        counted = f"{free} free + {pending} pending + {tree} tree-owned + {owned} request-owned slots"
        return [f"{counted} != {snap.tokens_total} slots"]
    return []


def _free_group(o: Any, p: Any, s: Any) -> Term:
    """A free group is open or not, and holds frees only while open."""
    one_or_none = o.Or(s.group_open == 0, s.group_open == 1)
    return o.And(one_or_none, s.pending_slots >= 0, o.Implies(s.group_open == 0, s.pending_slots == 0))


def _free_group_check(snap: SnapshotLike) -> list[str]:
    if not snap.group_open and snap.pending_pages.numel():
        return [f"no free group is open, yet pages {snap.pending_pages.tolist()[:8]} wait in one"]
    return []


def page_snapshot(snap: SnapshotLike) -> PageSnapshot:
    """The tensors the whole-pool page check reads, from a target's snapshot."""
    import torch

    from properties.page_check import PageSnapshot

    holding = [rec for rec in snap.records.values() if rec.row is not None and 1 <= rec.row <= snap.rows_total]
    as_long = lambda values: torch.tensor(values, dtype=torch.int64)  # noqa: E731
    tree_pages = torch.unique(snap.tree_slots // snap.page_size) if snap.tree_slots.numel() else as_long([])
    return PageSnapshot(
        req_to_token=snap.req_to_token.contiguous(),
        live_rows=as_long([rec.row for rec in holding]),
        protected_lens=as_long([rec.protected_len for rec in holding]),
        allocated_lens=as_long([rec.allocated_len for rec in holding]),
        free_pages=snap.free_slots.to(torch.int64),
        # What the open free group will release is on its way to the free list: neither owned nor the tree's.
        release_pages=torch.cat((snap.release_slots, snap.pending_pages)).to(torch.int64),
        tree_pages=tree_pages.to(torch.int64),
        num_pages=snap.tokens_total // snap.page_size,
        page_size=snap.page_size,
    )


def page_lists(snap: SnapshotLike) -> PageLists | None:
    """The page check's input as plain lists, where the oracle is the right backend (a small pool on the CPU:
    see `AUTO_ORACLE_LIMIT`); None elsewhere."""
    from properties.page_check import AUTO_ORACLE_LIMIT, PageLists

    holding = [rec for rec in snap.records.values() if rec.row is not None and 1 <= rec.row <= snap.rows_total]
    num_pages = snap.tokens_total // snap.page_size
    if not snap.req_to_token.is_cpu or num_pages + sum(r.allocated_len for r in holding) > AUTO_ORACLE_LIMIT:
        return None
    table = snap.req_to_token.tolist()
    rows = [
        (row, r.protected_len, r.allocated_len, table[row][: r.allocated_len])
        for r in holding
        if (row := r.row) is not None
    ]
    tree_pages = sorted({slot // snap.page_size for slot in snap.tree_slots.tolist()})
    width = snap.req_to_token.shape[1]
    releasing = snap.release_slots.tolist() + snap.pending_pages.tolist()  # the open free group's, too
    return PageLists(rows, snap.free_slots.tolist(), releasing, tree_pages, num_pages, snap.page_size, width)


def _page_ownership_check(snap: SnapshotLike) -> list[str]:
    from properties.page_check import check_page_lists, check_pages

    try:
        lists = page_lists(snap)
        result = check_pages(page_snapshot(snap), backend="auto") if lists is None else check_page_lists(lists)
    except ValueError as exc:
        return [f"the pool's tensors are malformed for the page check: {exc}"]
    out = [
        f"page {v.page} {v.kind.replace('-', ' ')}: held by {', '.join(map(_owner_name, v.owners))}"
        for v in result.violations
    ]
    if result.conservation_gap_pages:
        out.append(f"free + tree + owned pages exceed the {result.num_pages} pages by {result.conservation_gap_pages}")
    return out


def _owner_name(owner: int | str) -> str:
    return f"row {owner}" if isinstance(owner, int) else owner


def _lock_holders_check(snap: SnapshotLike) -> list[str]:
    # Each holder locks the root path of its last node, whose tokens are its protected prefix P; the locked
    # paths' union is at least the longest P and at most their sum (no holder, nothing protected).
    held = [rec.protected_len for rec in snap.records.values() if rec.tree_locked]
    low, high = max(held, default=0), sum(held)
    if not low <= snap.protected_recount <= high:
        return [
            f"{snap.protected_recount} tree tokens are locked, but the {len(held)} lock holders' prefixes "
            f"cover between {low} and {high}"
        ]
    return []


def _tree_counters_check(snap: SnapshotLike) -> list[str]:
    counted = (snap.evictable_size, snap.protected_size)
    recount = (snap.evictable_recount, snap.protected_recount)
    if counted != recount:
        return [f"tree counters (evictable, protected) = {counted}, but its nodes add up to {recount}"]
    return []


def _allocator_counters(snap: SnapshotLike) -> list[str]:
    return [] if snap.allocator_problem is None else [f"the allocator's counters disagree: {snap.allocator_problem}"]


def _tree_own_check(snap: SnapshotLike) -> list[str]:
    return [] if snap.tree_problem is None else [f"the tree's own consistency check fails: {snap.tree_problem}"]


INVARIANTS: tuple[Invariant, ...] = (
    Invariant(
        "kv-presence",
        "holds_kv <=> kv_allocated_len > 0 (release_kv_cache's entry sentinel)",
        ("req",),
        _kv_presence,
        _kv_presence_check,
    ),
    Invariant(
        "row-owner",
        "a record that holds a row names a real row that is not free and is its own",
        ("req",),
        _row_owner,
        _row_owner_check,
    ),
    Invariant(
        "row-held-by-owner",
        "a handed-out row is named by exactly the live record that owns it",
        ("row",),
        _row_held_by_owner,
        _row_held_check,
    ),
    Invariant(
        "row-exclusive", "no row is held by two live records", ("req", "req"), _row_exclusive, _row_exclusive_check
    ),
    Invariant(
        "record-domain",
        "a record's status is known and its lengths are non-negative and within the row",
        ("req",),
        _record_domain,
        _record_domain_check,
    ),
    Invariant(
        "live-holds",
        "a request the scheduler runs (prefill or decode) holds a row",
        ("req",),
        _live_holds,
        _live_holds_check,
    ),
    Invariant(
        "prefill-shape",
        "between prefill chunks C == A == extend_range.end, short of the prompt",
        ("req",),
        _prefill_shape,
        _prefill_shape_check,
    ),
    Invariant(
        "no-overallocation",
        "without speculative decoding a holding record has C == A",
        ("req",),
        _no_overallocation,
        _no_overallocation_check,
    ),
    Invariant(
        "chunk-unprotected",
        "with a chunk cache (no tree) a holding record protects nothing: P == 0",
        ("req",),
        _unprotected,
        _unprotected_check,
    ),
    Invariant(
        "protected-pages",
        "a holding record's protected prefix is a whole number of pages",
        ("req",),
        _protected_pages,
        _protected_pages_check,
    ),
    Invariant(
        "lock-follows-prefix",
        "a record holds a tree lock exactly when it holds a row and protects a prefix",
        ("req",),
        _lock_follows_prefix,
        _lock_follows_prefix_check,
    ),
    Invariant(
        "length-order",
        "a holding record has 0 <= P <= C <= A <= row width",
        ("req",),
        _length_order,
        _length_order_check,
    ),
    Invariant(
        "live-row-owned",
        "a live record's row is handed out and owned by that record",
        ("req",),
        _live_row_owned,
        _live_row_owned_check,
    ),
    Invariant(
        "released-unallocated",
        "a released record has kv_allocated_len == 0 and holds no tree lock",
        ("req",),
        _released_unallocated,
        _released_unallocated_check,
    ),
    Invariant(
        "released-rowless",
        "a released record names no row (ReqToTokenPool.free cleared it)",
        ("req",),
        _released_rowless,
        _released_rowless_check,
    ),
    Invariant(
        "never-admitted-empty",
        "a record never admitted, or retracted, has no row, lock or lengths",
        ("req",),
        _never_admitted_empty,
        _never_admitted_check,
    ),
    Invariant(
        "row-conservation",
        "free rows + held rows == pool rows; no row freed twice",
        (),
        _row_conservation,
        _row_conservation_check,
    ),
    Invariant(
        "token-conservation",
        "free + pending in the free group + tree-owned + sum of holding records' ceil_align(A) - P == total slots",
        (),
        _token_conservation,
        _token_conservation_check,
    ),
    Invariant(
        "page-ownership",
        "every page has one holder: free, the tree, or one record's own [P, A)",
        (),
        None,
        _page_ownership_check,
    ),
    Invariant(
        "tree-counters",
        "the tree's evictable and protected counters equal a recount of its nodes",
        (),
        None,
        _tree_counters_check,
    ),
    Invariant(
        "tree-lock-holders",
        "locked tree tokens are the union of the lock holders' protected prefixes: "
        "at least the longest, at most their sum",
        (),
        None,
        _lock_holders_check,
    ),
    Invariant(
        "free-group",
        "the allocator's free group is open or not, and holds frees only while open",
        (),
        _free_group,
        _free_group_check,
    ),
    Invariant(
        "allocator-counters",
        "the allocator's own counters agree with the lists they count (0.5.23's num_staged_pages, which "
        "available_size adds to the free pages, against its staged_pages)",
        (),
        None,
        _allocator_counters,
    ),
    Invariant(
        "tree-own-check",
        "the tree's own consistency check passes (upstream's sanity_check: sizes, leaf sets and LRU lists "
        "recomputed node by node)",
        (),
        None,
        _tree_own_check,
    ),
)

BY_ID = {inv.id: inv for inv in INVARIANTS}


def check_every(snap: SnapshotLike) -> list[tuple[str, str]]:
    """Every violation on a snapshot as `(invariant id, message)`, in catalog order, each invariant checked in
    full (`properties.check.check_snapshot` gives the same answer, reading again only what may have broken)."""
    return [(inv.id, msg) for inv in INVARIANTS for msg in inv.concrete(snap)]
