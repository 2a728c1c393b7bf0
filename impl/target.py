"""What a target is: the pool config it is built from, the snapshot it hands back, and the `Target` protocol.

A target is a pool driven as a scheduler drives it, one lifecycle step per call: the reference pool
(`impl.engine.ReferencePool`) and the adapter over upstream SGLang's own classes
(`impl.upstream.target.SglangPool`) both implement `Target`. A call either completes or raises `Refused`;
a refused call must leave every record, row, slot and tree node as it was. The harness drives targets only
through this protocol and reads them only through `snapshot()`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import ClassVar, Protocol

import torch

from impl.alloc_kernels import BACKENDS
from impl.fault_points import FaultPoints
from impl.faults import FaultSet
from properties.vocabulary import FINISH_BY

CACHES = ("chunk", "radix")
ROW_POOLS = ("req", "decode")
# The tree cores upstream's UnifiedRadixCache can be built with; the reference has one tree and ignores this.
TREE_CORES = ("rust", "python")
MAX_PAGE_SIZE = 64
_PAGE_SIZES = tuple(1 << k for k in range(MAX_PAGE_SIZE.bit_length()))


class Cause(enum.Enum):
    """Why a target refused a call: what verdicts and coverage corners read (a refusal's message is for people)."""

    GUARD = "guard"  # the glue's own check: a status, a length, an argument, a state the scheduler never has
    NO_ROW = "no free row"  # the scheduler's budget: no row for an admission
    NO_SLOTS = "short of slots"  # the scheduler's budget: not enough free and evictable slots
    ALLOC_ROWS = "allocation path: out of rows"  # an allocation path's own out-of-memory refusal, rows
    ALLOC_SLOTS = "allocation path: out of slots"  # the same, slots
    CONTRACT_ASSERT = "contract assert"  # the reference pool's own contract assert
    UPSTREAM_ASSERT = "upstream assert"  # an assert in upstream's code
    INJECTED = "injected failure"  # a fault point's planned failure, raised through the call (`impl.fault_points`)


class Refused(Exception):
    """The target declined the call and changed nothing; `cause` says why."""

    def __init__(self, message: str, cause: Cause = Cause.GUARD) -> None:
        super().__init__(message)
        self.cause = cause


def check_finish_by(by: int) -> None:
    """A finishing step names what its check matched (`FINISH_BY`); anything else is refused."""
    if not 0 <= by < len(FINISH_BY):
        raise Refused(f"finish kind {by} is none of {len(FINISH_BY)} ({', '.join(FINISH_BY)})")


@dataclass(frozen=True)
class PoolConfig:
    """One pool. `rows` excludes the padding row (and the pre-allocation rows); `tokens` excludes padding.

    `page_size` 1 uses `TokenToKVPoolAllocator`, a larger power of two `PagedTokenToKVPoolAllocator` whose slot
    math runs on `kernel_backend`. `row_pool` 'decode' is the PD-decode row pool with `pre_alloc_size` extra rows.
    Without `evict_on_demand`, allocations and retractions never evict the tree; only `evict` does.
    `tree_core` names the core of upstream's unified radix tree (the reference ignores it).
    """

    rows: int = 4
    tokens: int = 64
    width: int = 32
    page_size: int = 1
    cache: str = "chunk"
    device: str = "cpu"
    need_sort: bool = False
    speculative: bool = False
    row_pool: str = "req"
    pre_alloc_size: int = 0
    kernel_backend: str = "torch"
    evict_on_demand: bool = True
    tree_core: str = "rust"

    def __post_init__(self) -> None:
        problem = _config_problem(self)
        if problem:
            raise ValueError(problem)


def _config_problem(c: PoolConfig) -> str | None:
    """Why the pool cannot be built, or None."""
    checks = [
        (1 <= c.rows <= 1 << 20, f"rows must be in [1, 2^20], got {c.rows}"),
        (1 <= c.tokens <= 1 << 24, f"tokens must be in [1, 2^24], got {c.tokens}"),
        (1 <= c.width <= 1 << 20, f"width must be in [1, 2^20], got {c.width}"),
        (c.page_size in _PAGE_SIZES, f"page_size must be a power of two up to {MAX_PAGE_SIZE}, got {c.page_size}"),
        (c.tokens % c.page_size == 0, f"tokens {c.tokens} is not a whole number of pages of {c.page_size}"),
        (c.cache in CACHES, f"cache must be one of {CACHES}, got {c.cache!r}"),
        (c.device in ("cpu", "cuda"), f"device must be 'cpu' or 'cuda', got {c.device!r}"),
        (c.row_pool in ROW_POOLS, f"row_pool must be one of {ROW_POOLS}, got {c.row_pool!r}"),
        (c.pre_alloc_size >= 0, f"pre_alloc_size must be non-negative, got {c.pre_alloc_size}"),
        (c.row_pool == "decode" or c.pre_alloc_size == 0, "pre_alloc_size needs row_pool 'decode'"),
        (c.kernel_backend in BACKENDS, f"kernel_backend must be one of {BACKENDS}, got {c.kernel_backend!r}"),
        (c.tree_core in TREE_CORES, f"tree_core must be one of {TREE_CORES}, got {c.tree_core!r}"),
    ]
    return next((message for ok, message in checks if not ok), None)


@dataclass(frozen=True)
class RecordView:
    """One request's record and scheduler status, as plain values.

    `prefix_len` is `len(prefix_indices)`; `tree_locked` says the request holds a lock on a tree node below
    the root; `extend_end` is `extend_range.end`; `prompt_len` None is an open-ended prompt.
    """

    row: int | None
    protected_len: int
    committed_len: int
    allocated_len: int
    inflight_middle_chunks: int
    status: str
    prefix_len: int = 0
    tree_locked: bool = False
    extend_end: int = 0
    prompt_len: int | None = None


def _empty() -> torch.Tensor:
    return torch.empty(0, dtype=torch.int64)


@dataclass(frozen=True)
class PoolSnapshot:
    """The observable state of a pool after a step: plain values, and tensors for bulk data.

    `free_slots` / `release_slots` are the allocator's `free_pages` / `release_pages`: slot ids when
    `page_size` is 1, page ids otherwise. `row_slots` holds each holding record's row `[0, A)` (tree slots
    of `[0, P)` included); `tree_slots` every slot the tree owns, `evictable_slots` those on unlocked nodes;
    `req_to_token` the whole row table. `tree_problem` is the tree's own consistency check's complaint
    (upstream's `sanity_check`, or the reference's recount), None when it passes. `group_open` says the
    allocator's free group is open, and `pending_pages` lists the pages (slots at page size 1) freed into it,
    each as often as the group's end will release it.
    """

    rows_total: int
    width: int
    tokens_total: int
    page_size: int
    free_rows: list[int]
    row_generation: list[int]
    records: dict[int, RecordView]
    row_slots: dict[int, list[int]] = field(default_factory=dict)
    free_slots: torch.Tensor = field(default_factory=_empty)
    release_slots: torch.Tensor = field(default_factory=_empty)
    evictable_size: int = 0
    protected_size: int = 0
    cache: str = "chunk"
    speculative: bool = False
    num_pages: int = 0
    tree_slots: torch.Tensor = field(default_factory=_empty)
    evictable_slots: torch.Tensor = field(default_factory=_empty)
    evictable_recount: int = 0
    protected_recount: int = 0
    tree_problem: str | None = None
    allocator_problem: str | None = None  # the allocator's own counters against its lists, where it keeps any
    group_open: bool = False
    pending_pages: torch.Tensor = field(default_factory=_empty)
    req_to_token: torch.Tensor = field(default_factory=lambda: torch.zeros((0, 0), dtype=torch.int32))


@dataclass(frozen=True)
class Retracted:
    """What a decode retraction (`retract_decode`) did: the requests it retracted, in the order it picked them, and
    the last one it aborted because even alone it did not fit (None if it kept it)."""

    retracted: list[int]
    aborted: int | None


@dataclass(frozen=True)
class Admitted:
    """One request a prefill round ran (`prefill_round`), in the batch's order: its extend computed positions
    `[start, seq_len)` (`start` the matched prefix of a request it admitted, the committed length of the chunked
    one it continued) on `row`."""

    rid: int
    start: int
    seq_len: int
    row: int


@dataclass(frozen=True)
class Round:
    """What a prefill round (`prefill_round`) did: the running requests it preempted to make room, in the order
    it released them, then the requests it ran, in the batch's order."""

    preempted: list[int]
    ran: list[Admitted]


@dataclass(frozen=True)
class Eviction:
    """One eviction a call made on its own (on-demand, inside an allocation or a retraction): the tokens it
    asked the tree for and the tokens the tree freed. `take_evictions` hands back those made since the last
    take, oldest first."""

    asked: int
    evicted: int


# The decode-offload release (`_release_finished_req`) as the model reads it (0.5.19): the row from 0, the tree lock
# kept; it equals `release_kv_cache(is_insert=False)` where no tree prefix is protected
# (theorem `sentinel-boundary:release-equivalence`).
OFFLOAD_FROM_ZERO = "from 0, lock kept"
# As sglang 0.5.21 on: from `cache_protected_len`, the lock given back; `release_kv_cache(is_insert=False)` exactly.
OFFLOAD_FROM_PROTECTED = "from cache_protected_len, lock given back"


class Target(Protocol):
    """A pool the harness drives: every lifecycle op, the read-only prefix peeks, a snapshot and a clone.

    `OPS` names the ops the target implements (`fuzz.lockstep` names); the harness draws only those.
    """

    OPS: ClassVar[frozenset[str]]
    config: PoolConfig
    # An allocation short of free pages crashes the process instead of refusing (0.5.18's paged allocator runs
    # its kernel before its capacity check): the harness then draws no unchecked batch short of slots.
    short_alloc_crashes: bool
    # What the decode-offload release frees (`OFFLOAD_FROM_ZERO`, `OFFLOAD_FROM_PROTECTED`), which decides how the
    # release-path differential holds it to `release_kv_cache(is_insert=False)`; None: not compared at all.
    offload_frees: str | None
    # The fault points on this pool's objects (`impl.fault_points`): what a step's plan arms, and the counts.
    fault_points: FaultPoints

    def __init__(self, config: PoolConfig, faults: FaultSet = ...) -> None: ...

    # -- prefill and decode ----------------------------------------------------------------------------------
    def admit(
        self, rid: int, extend_len: int, *, prompt_len: int | None = None, family: int = 0, kind: int = 0
    ) -> int: ...
    def extend(self, rid: int, extend_len: int) -> int: ...
    def decode(self, rid: int) -> None: ...
    def batch(self, entries: list[tuple[str, dict[str, int]]], unchecked: bool = False) -> list[int]: ...
    def spec_prepare(self, rid: int, reserve: int) -> None: ...
    def spec_commit(self, rid: int, accepted: int) -> None: ...

    # -- release -----------------------------------------------------------------------------------------
    def finish(self, rid: int) -> None: ...
    def decode_finish(self, rid: int, by: int) -> None: ...
    def spec_finish(self, rid: int, accepted: int, stop: int, by: int) -> None: ...
    def pp_release(self, rid: int) -> None: ...
    def pp_release_manual(self, rid: int) -> None: ...
    def pp_profile(self, quarter: int) -> None: ...
    def retract(self, rid: int) -> None: ...
    def retract_decode(self) -> Retracted: ...
    def decode_round(self) -> Retracted: ...
    def pause_retract(self) -> None: ...
    def queue(self, rid: int, prompt_len: int, family: int = 0, kind: int = 0, priority: int = 0) -> None: ...
    def prefill_round(self) -> Round: ...
    def abort(self, rid: int) -> None: ...
    def offload_release(self, rid: int, sentinel: int = 0) -> None: ...

    # -- pool maintenance and PD decode ----------------------------------------------------------------------
    def evict(self, num_tokens: int) -> int: ...
    def flush(self) -> None: ...
    def group_begin(self) -> None: ...
    def group_end(self) -> None: ...
    def pd_prealloc(self, rid: int, fill_len: int, *, family: int = 0) -> int: ...

    # -- calls the contract forbids --------------------------------------------------------------------------
    def reuse_released(self, rid: int, stale_row: int, extend_len: int) -> int: ...
    def release_again(self, rid: int) -> None: ...
    def free_row(self, rid: int) -> None: ...

    # -- observation -------------------------------------------------------------------------------------
    def peek_prefix(self, family: int, prompt_len: int) -> int: ...
    def peek_prefix_of(self, rid: int, extend_len: int = 1) -> int: ...
    def peek_evictable(
        self, rid: int, extend_len: int | None = None, *, prompt_len: int | None = None, family: int = 0
    ) -> int: ...
    def peek_batch_evictable(self, entries: list[tuple[str, dict[str, int]]]) -> int: ...
    def take_evictions(self) -> list[Eviction]: ...
    def snapshot(self) -> PoolSnapshot: ...
    def clone(self) -> Target: ...
