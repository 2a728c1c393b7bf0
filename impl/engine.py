"""The reference target: scheduler-level operations over the pool, as the harness drives them.

Each operation either completes or raises `Refused` and leaves every record, row and slot as it was.
`Refused` carries the reason: a scheduler precondition (the request is not running), a capacity check
(admission control would not schedule it), or one of the pool's own contract asserts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from impl.allocator import TokenToKVPoolAllocator
from impl.chunk_cache import ChunkCache
from impl.faults import NO_FAULTS, FaultSet
from impl.records import Req, ReqStatus
from impl.release import pp_release_manual, release_kv_cache
from impl.req_pool import ContractViolation, ReqToTokenPool


class Refused(Exception):
    """The target declined the call and changed nothing."""


@dataclass(frozen=True)
class PoolConfig:
    """Sizes of one pool. `rows` excludes the padding row; `tokens` excludes the padding slot."""

    rows: int = 4
    tokens: int = 64
    width: int = 32
    page_size: int = 1
    cache: str = "chunk"
    device: str = "cpu"

    def __post_init__(self) -> None:
        if not 1 <= self.rows <= 1 << 20:
            raise ValueError(f"rows must be in [1, 2^20], got {self.rows}")
        if not 1 <= self.tokens <= 1 << 24:
            raise ValueError(f"tokens must be in [1, 2^24], got {self.tokens}")
        if not 1 <= self.width <= 1 << 20:
            raise ValueError(f"width must be in [1, 2^20], got {self.width}")
        if self.page_size != 1:
            raise ValueError(f"page_size {self.page_size} is not supported by this pool (only 1)")
        if self.cache != "chunk":
            raise ValueError(f"cache {self.cache!r} is not supported by this pool (only 'chunk')")
        if self.device not in ("cpu", "cuda"):
            raise ValueError(f"device must be 'cpu' or 'cuda', got {self.device!r}")


@dataclass(frozen=True)
class RecordView:
    """One request's record and scheduler status, as plain values."""

    row: int | None
    protected_len: int
    committed_len: int
    allocated_len: int
    inflight_middle_chunks: int
    status: str


@dataclass(frozen=True)
class PoolSnapshot:
    """The observable state of a pool after a step: plain values, and tensors for bulk data."""

    rows_total: int
    width: int
    tokens_total: int
    page_size: int
    free_rows: list[int]
    row_generation: list[int]
    records: dict[int, RecordView]
    row_slots: dict[int, list[int]] = field(default_factory=dict)
    free_slots: torch.Tensor = field(default_factory=lambda: torch.empty(0, dtype=torch.int64))
    release_slots: torch.Tensor = field(default_factory=lambda: torch.empty(0, dtype=torch.int64))
    evictable_size: int = 0
    protected_size: int = 0


class ReferencePool:
    """The reference pool: `ReqToTokenPool` + token allocator + chunk cache, driven as a scheduler would."""

    def __init__(self, config: PoolConfig, faults: FaultSet = NO_FAULTS):
        if config.device == "cuda" and not torch.cuda.is_available():
            raise ValueError("device 'cuda' asked for, but no CUDA device is available")
        self.config = config
        self.faults = faults
        self.req_to_token_pool = ReqToTokenPool(config.rows, config.width, config.device, faults)
        self.allocator = TokenToKVPoolAllocator(config.tokens, config.device)
        self.cache = ChunkCache(self.req_to_token_pool, self.allocator)
        self.reqs: dict[int, Req] = {}

    # -- lifecycle operations ---------------------------------------------------------------------------

    def admit(self, rid: int, extend_len: int) -> int:
        """A new request's first extend (prefill or first chunk): a fresh row and `extend_len` slots."""
        if rid in self.reqs:
            raise Refused(f"request {rid} already exists")
        req = Req(rid)
        self._check_extend_capacity(req, extend_len)
        self.reqs[rid] = req
        return self._alloc_for_extend(req, extend_len)

    def extend(self, rid: int, extend_len: int) -> int:
        """The next extend of an existing request: keeps its row (chunk continuation) or takes a new one."""
        req = self._get(rid)
        if req.kv.holds_kv and req.status is ReqStatus.DECODING:
            raise Refused(f"request {rid} is decoding; only a retraction returns it to prefill")
        self._check_extend_capacity(req, extend_len)
        return self._alloc_for_extend(req, extend_len)

    def decode(self, rid: int) -> None:
        """One non-speculative decode step: one slot at position `kv_committed_len`."""
        req = self._running(rid)
        kv = req.kv
        if not kv.holds_kv:
            raise Refused(f"request {rid} holds no row to decode into")
        if kv.kv_committed_len + 1 > self.config.width:
            raise Refused(f"request {rid} would decode past the row width {self.config.width}")
        out = self.allocator.alloc(1)
        if out is None:
            raise Refused("no free token slot for decode")
        assert kv.req_pool_idx is not None
        self.req_to_token_pool.write(kv.req_pool_idx, kv.kv_committed_len, out)
        kv.kv_allocated_len += 1
        kv.kv_committed_len += 1
        req.status = ReqStatus.DECODING

    def finish(self, rid: int) -> None:
        """The request finished: `release_kv_cache(req, cache, is_insert=True)`."""
        req = self._running(rid)
        self._contract(lambda: release_kv_cache(req, self.cache, is_insert=True))
        req.status = ReqStatus.FINISHED

    def pp_release(self, rid: int) -> None:
        """PP-profiling release after PR #37167: `release_kv_cache(req, cache, is_insert=False)`."""
        req = self._running(rid)
        self._contract(lambda: release_kv_cache(req, self.cache, is_insert=False))
        req.status = ReqStatus.FINISHED

    def pp_release_manual(self, rid: int) -> None:
        """PP-profiling release as hand-written before PR #37167 (frees `[0, kv_committed_len)` raw)."""
        req = self._running(rid)
        self._contract(lambda: pp_release_manual(req, self.cache, req.kv.kv_committed_len))
        req.status = ReqStatus.FINISHED

    # -- calls the contract forbids (the harness's negative steps) ---------------------------------------

    def release_again(self, rid: int) -> None:
        """Call `release_kv_cache` directly, whatever the scheduler thinks of the request."""
        req = self._get(rid)
        self._contract(lambda: release_kv_cache(req, self.cache, is_insert=False))

    def free_row(self, rid: int) -> None:
        """Call `ReqToTokenPool.free` directly (a second free of a released record must be refused)."""
        req = self._get(rid)
        self._contract(lambda: self.req_to_token_pool.free(req))

    def reuse_released(self, rid: int, stale_row: int, extend_len: int) -> int:
        """A released record re-enters `alloc` still naming its old row, as a bypassed free leaves it."""
        req = self._get(rid)
        if req.kv.holds_kv:
            raise Refused(f"request {rid} still holds a row; nothing stale to reuse")
        if not 1 <= stale_row <= self.config.rows:
            raise Refused(f"row {stale_row} is not a row of this pool")
        req.kv.req_pool_idx = stale_row
        try:
            return self.extend(rid, extend_len)
        except Refused:
            req.kv.req_pool_idx = None
            raise

    # -- observation ------------------------------------------------------------------------------------

    def snapshot(self) -> PoolSnapshot:
        pool = self.req_to_token_pool
        records = {rid: _record_view(req) for rid, req in self.reqs.items()}
        row_slots = {
            rid: pool.req_to_token[req.kv.req_pool_idx, : req.kv.kv_allocated_len].tolist()
            for rid, req in self.reqs.items()
            if req.kv.req_pool_idx is not None and 1 <= req.kv.req_pool_idx <= pool.size
        }
        return PoolSnapshot(
            rows_total=pool.size,
            width=pool.max_context_len,
            tokens_total=self.allocator.size,
            page_size=self.allocator.page_size,
            free_rows=list(pool.free_slots),
            row_generation=list(pool.req_generation),
            records=records,
            row_slots=row_slots,
            free_slots=self.allocator.free_pages.clone(),
            release_slots=self.allocator.release_pages.clone(),
            evictable_size=self.cache.evictable_size(),
            protected_size=self.cache.protected_size(),
        )

    # -- internals --------------------------------------------------------------------------------------

    def _get(self, rid: int) -> Req:
        req = self.reqs.get(rid)
        if req is None:
            raise Refused(f"no request {rid}")
        return req

    def _running(self, rid: int) -> Req:
        req = self._get(rid)
        if req.status not in (ReqStatus.RUNNING, ReqStatus.DECODING):
            raise Refused(f"request {rid} is {req.status.value}, not running")
        return req

    def _contract(self, call: Callable[[], None]) -> None:
        try:
            call()
        except ContractViolation as exc:
            raise Refused(f"contract assert: {exc}") from exc

    def _check_extend_capacity(self, req: Req, extend_len: int) -> None:
        start = req.kv.kv_committed_len if req.kv.holds_kv else 0
        if extend_len < 1:
            raise Refused(f"extend length must be positive, got {extend_len}")
        if start + extend_len > self.config.width:
            raise Refused(f"request {req.rid} would extend past the row width {self.config.width}")
        if extend_len > self.allocator.available_size():
            raise Refused(f"{extend_len} slots asked for, {self.allocator.available_size()} free")
        if not req.kv.holds_kv and self.req_to_token_pool.available_size() == 0:
            raise Refused("no free row")

    def _alloc_for_extend(self, req: Req, extend_len: int) -> int:
        """`alloc_for_extend` for one request: row (kept or new), prefix into the row, new slots after it."""
        kv = req.kv
        if not kv.holds_kv:
            req.prefix_indices = torch.empty(0, dtype=torch.int64)
        try:
            rows = self.req_to_token_pool.alloc([req])
        except ContractViolation as exc:
            raise Refused(f"contract assert: {exc}") from exc
        assert rows is not None, "capacity was checked before the row allocation"
        out = self.allocator.alloc(extend_len)
        assert out is not None, "capacity was checked before the slot allocation"
        row, prefix_len = rows[0], req.prefix_indices.numel()
        self.req_to_token_pool.write(row, 0, req.prefix_indices)
        self.req_to_token_pool.write(row, prefix_len, out)
        kv.kv_allocated_len = kv.kv_committed_len = prefix_len + extend_len
        req.status = ReqStatus.RUNNING
        self.cache.cache_unfinished_req(req)
        return row


def _record_view(req: Req) -> RecordView:
    kv = req.kv
    return RecordView(
        row=kv.req_pool_idx,
        protected_len=kv.cache_protected_len,
        committed_len=kv.kv_committed_len,
        allocated_len=kv.kv_allocated_len,
        inflight_middle_chunks=req.inflight_middle_chunks,
        status=req.status.value,
    )
