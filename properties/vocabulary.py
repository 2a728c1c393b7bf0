"""The lifecycle's vocabulary, written once: scheduler status codes, the record predicates the symbolic forms
are built from, and the page arithmetic every allocation and release path depends on.

It imports nothing outside the standard library, so the model (`model/`), the invariant catalog
(`properties/`) and the pools (`impl/`) can all use it, and importing the model never loads torch. It lives in
`properties/`, the bottom layer that depends on nothing; it is the one module of the catalog that `impl/`
imports, since it holds the contract's words (SGLang's `ceil_align`), not the harness. The model's actions call
the page roundings with the interpreter and sizes first, as every symbolic form is called: `ceil_align_in` and
`page_floor_in` are those spellings of the same functions.

The predicates take an interpreter `o` (Python values or Z3 terms, see `model.interp`), a model state `s`
and pool sizes `p`, as the symbolic forms do. The page arithmetic states its contracts for ints (CrossHair
checks them in `make verify`); the same code runs elementwise on integer tensors (the allocation kernels, the
page check) and on Z3 integer terms (the model), because it uses only `+`, `-`, `*` and `%` (and `//` where no
Z3 term reaches it), which mean the same on all three for a positive divisor.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from torch import Tensor

    Length = TypeVar("Length", int, Tensor)
else:
    Length = int  # CrossHair reads the annotations at run time: the contracts are stated, and checked, for ints

Term = Any

# Scheduler statuses, as the model codes them and as targets report them (`SnapshotLike.records[*].status`).
# A live request is in prefill (possibly between chunks) or decoding; only prefill extends again.
# A retracted request waits with no KV (STATUS_WAITING); a request never admitted is unknown to the pool.
STATUS_NEW, STATUS_PREFILL, STATUS_DONE, STATUS_DECODE, STATUS_WAITING = 0, 1, 2, 3, 4
STATUS_CODES = {
    "running": STATUS_PREFILL,
    "finished": STATUS_DONE,
    "decoding": STATUS_DECODE,
    "waiting": STATUS_WAITING,
}
LIVE_STATUSES = frozenset({STATUS_PREFILL, STATUS_DECODE})
# Request kinds whose lifecycle differs: a normal request, and one barred from the tree
# (`Req.skip_radix_cache_insert`: PD bootstrap warm-ups, positional-embed overrides), which still matches a
# prefix but never inserts (neither between chunks nor at release).
KIND_NORMAL, KIND_SKIP_INSERT = 0, 1
KIND_NAMES = {KIND_NORMAL: "normal", KIND_SKIP_INSERT: "skip-insert"}
# How a run names a kind it does not draw (beside the ops it does not draw), e.g. once a known finding needs it.
KIND_EXCLUSIONS = {f"kind:{name}": kind for kind, name in KIND_NAMES.items() if kind != KIND_NORMAL}
# The most extends and decodes one batch step schedules together (targets refuse more; the model calls more
# malformed).
MAX_BATCH = 3
# The most requests one prefill round (`prefill_round`) admits that a step can carry: every row of the largest
# fuzzed pool.
ROUND_LIMIT = 8
# What a result pass's finish check matched (a finishing step's `by`): a stop token of the sampling params, an EOS
# id, the length cap, a stop string. Each ends the request alike; the targets realize each their own way.
FINISH_BY = ("stop_token", "eos", "length", "stop_str")
# PP dynamic-chunk profiling (`pp_profile`) is drawn by a quarter of its chunked prefill size: upstream profiles
# `int(chunked_prefill_size * 1.25)` tokens, five per quarter, and up to `PROFILE_REQUESTS` requests of it and less.
PROFILE_TOKENS_PER_QUARTER = 5
PROFILE_REQUESTS = 128
BATCH_OPS = ("admit", "extend", "decode")  # a batch entry's op; `op{i}` in a batch step is its index here


def holds(o: Any, s: Any, i: Term) -> Term:
    """`holds_kv` of record `i`: its row is set (row 0 is padding and means none)."""
    return o.select(s.rec_row, i) != 0


def live_status(o: Any, status: Term) -> Term:
    """The scheduler runs the request: in prefill (between chunks included) or decoding."""
    return o.Or(*(status == code for code in sorted(LIVE_STATUSES)))


def live(o: Any, s: Any, i: Term) -> Term:
    """Record `i` is live and holds its row."""
    return o.And(live_status(o, o.select(s.rec_status, i)), holds(o, s, i))


def row_free(o: Any, p: Any, s: Any, r: Term) -> Term:
    """Row `r` is a real row and sits in the free list."""
    return o.And(r >= 1, r <= p.rows, o.Not(o.select(s.row_held, r)))


def ceil_div(n: Length, d: int) -> Length:
    """`n / d` rounded up.

    pre: d >= 1
    post: (__return__ - 1) * d < n <= __return__ * d
    """
    return -(-n // d)


def ceil_align(x: Length, page_size: int) -> Length:
    """`x` rounded up to a whole number of pages (SGLang's `ceil_align`).

    pre: page_size >= 1
    post: __return__ % page_size == 0
    post: x <= __return__ < x + page_size
    """
    return x if page_size == 1 else x + (-x) % page_size


def page_floor(x: Length, page_size: int) -> Length:
    """`x` rounded down to a whole number of pages.

    pre: page_size >= 1
    post: __return__ % page_size == 0
    post: x - page_size < __return__ <= x
    """
    return x if page_size == 1 else x - x % page_size


def num_new_pages(prefix_len: Length, seq_len: Length, page_size: int) -> Length:
    """Pages an extend from `prefix_len` to `seq_len` takes from the free list (the prefix's open page is kept).

    pre: 0 <= prefix_len <= seq_len
    pre: page_size >= 1
    post: __return__ >= 0
    post: __return__ * page_size == ceil_align(seq_len, page_size) - ceil_align(prefix_len, page_size)
    """
    return ceil_div(seq_len, page_size) - ceil_div(prefix_len, page_size)


def owned_slots(protected_len: Length, allocated_len: Length, page_size: int) -> Length:
    """Slots a record owns alone: its pages from `P` (page-aligned) up to `ceil_align(A)`.

    pre: 0 <= protected_len <= allocated_len
    pre: page_size >= 1
    pre: protected_len % page_size == 0
    post: __return__ >= allocated_len - protected_len
    post: __return__ % page_size == 0
    """
    return ceil_align(allocated_len, page_size) - protected_len


def ceil_align_in(o: Any, p: Any, x: Term) -> Term:
    """`ceil_align(x)` at the page size of sizes `p`, called as the model's actions call it (`o` is not needed)."""
    return ceil_align(x, p.page_size)


def page_floor_in(o: Any, p: Any, x: Term) -> Term:
    """`page_floor(x)` at the page size of sizes `p`, called as the model's actions call it."""
    return page_floor(x, p.page_size)


# The fault points (`impl.fault_points`): calls inside a step that a step's `fault` argument makes fail, where the
# real allocator fails. A step's `fault` is 1 + an index here (0: none); `fault_call` which call to it fails, from
# 0 (the first) to MAX_FAULT_CALL.
FAULT_POINTS = ("row_alloc", "kv_alloc", "aux_alloc")
MAX_FAULT_CALL = 3
