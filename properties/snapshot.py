"""What properties/ reads from a target: a pool snapshot, described structurally (targets never import us)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

import torch


class RecordLike(Protocol):
    """One request's record and scheduler status."""

    @property
    def row(self) -> int | None: ...
    @property
    def protected_len(self) -> int: ...
    @property
    def committed_len(self) -> int: ...
    @property
    def allocated_len(self) -> int: ...
    @property
    def inflight_middle_chunks(self) -> int: ...
    @property
    def status(self) -> str: ...
    @property
    def tree_locked(self) -> bool: ...
    @property
    def extend_end(self) -> int: ...


class SnapshotLike(Protocol):
    """A pool after a step: sizes, free rows, records, and each holding record's row slots `[0, A)`."""

    @property
    def rows_total(self) -> int: ...
    @property
    def width(self) -> int: ...
    @property
    def tokens_total(self) -> int: ...
    @property
    def page_size(self) -> int: ...
    @property
    def free_rows(self) -> list[int]: ...
    @property
    def records(self) -> Mapping[int, RecordLike]: ...
    @property
    def row_slots(self) -> Mapping[int, list[int]]: ...
    @property
    def free_slots(self) -> torch.Tensor: ...
    @property
    def release_slots(self) -> torch.Tensor: ...
    @property
    def cache(self) -> str: ...
    @property
    def speculative(self) -> bool: ...
    @property
    def req_to_token(self) -> torch.Tensor: ...
    @property
    def tree_slots(self) -> torch.Tensor: ...
    @property
    def evictable_recount(self) -> int: ...
    @property
    def protected_recount(self) -> int: ...
    @property
    def evictable_size(self) -> int: ...
    @property
    def protected_size(self) -> int: ...


# Scheduler statuses as targets report them, and the model's status codes for each.
# A live request is in prefill (possibly between chunks) or decoding; only prefill extends again.
# A retracted request waits with no KV (STATUS_WAITING); a request never admitted is unknown to the pool.
STATUS_NEW, STATUS_PREFILL, STATUS_DONE, STATUS_DECODE, STATUS_WAITING = 0, 1, 2, 3, 4
STATUS_CODES = {
    "running": STATUS_PREFILL,
    "finished": STATUS_DONE,
    "decoding": STATUS_DECODE,
    "waiting": STATUS_WAITING,
}
STATUS_NAMES = {
    STATUS_NEW: "new",
    STATUS_PREFILL: "prefill",
    STATUS_DONE: "released",
    STATUS_DECODE: "decoding",
    STATUS_WAITING: "waiting",
}
LIVE_STATUSES = frozenset({STATUS_PREFILL, STATUS_DECODE})
