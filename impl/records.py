"""The per-request KV record (`ReqKvInfo`) and the request that owns it, as SGLang 0.5.19 defines them."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

import torch


@dataclass(slots=True, kw_only=True)
class ReqKvInfo:
    """The request's KV record. Its own KV is `[cache_protected_len, kv_allocated_len)`."""

    req_pool_idx: int | None = None
    cache_protected_len: int = 0
    kv_committed_len: int = 0
    kv_allocated_len: int = 0

    @property
    def holds_kv(self) -> bool:
        return self.req_pool_idx is not None

    @property
    def is_kv_released(self) -> bool:
        return self.kv_allocated_len == 0

    def mark_kv_released(self) -> None:
        # Only the allocated length is zeroed: committed and protected lengths stay stale, as upstream.
        self.kv_allocated_len = 0


class ReqStatus(enum.Enum):
    """Where the scheduler has the request; the pool never reads this."""

    WAITING = "waiting"
    RUNNING = "running"
    DECODING = "decoding"
    FINISHED = "finished"


@dataclass(eq=False)
class Req:
    """A request as the memory code sees it: its record plus the scheduler fields that touch KV."""

    rid: int
    kv: ReqKvInfo = field(default_factory=ReqKvInfo)
    prefix_indices: torch.Tensor = field(default_factory=lambda: torch.empty(0, dtype=torch.int64))
    fill_ids: list[int] = field(default_factory=list)
    last_node: object | None = None
    extend_range_end: int = 0
    inflight_middle_chunks: int = 0
    status: ReqStatus = ReqStatus.WAITING
