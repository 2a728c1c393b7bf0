"""The per-request KV record (`ReqKvInfo`) and the request that owns it, as SGLang 0.5.19 defines them."""

from __future__ import annotations

import copy
import enum
from dataclasses import dataclass, field

import torch

from properties.vocabulary import KIND_NORMAL, KIND_SKIP_INSERT

# Row widths are at most 2^20 tokens (PoolConfig), so a position fits below this bit.
POSITION_BITS = 20


def prompt_token(family: int, position: int) -> int:
    """The prompt token at `position` of every request of `family` (even ids; families share whole prompts)."""
    return 2 * ((family << POSITION_BITS) | position)


def output_token(rid: int, position: int) -> int:
    """The token request `rid` samples for `position` (odd ids, so no output equals a prompt token)."""
    return 2 * ((rid << POSITION_BITS) | position) + 1


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

    def copy(self) -> ReqKvInfo:
        """A copy (every field is an int or None); cheaper than `copy.copy` of a slotted dataclass."""
        copied = object.__new__(ReqKvInfo)
        copied.req_pool_idx, copied.cache_protected_len = self.req_pool_idx, self.cache_protected_len
        copied.kv_committed_len, copied.kv_allocated_len = self.kv_committed_len, self.kv_allocated_len
        return copied

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
    """A request as the memory code sees it: its record plus the scheduler fields that touch KV.

    `fill_ids` are the tokens known so far (prompt, then outputs). `prompt_len` is where prefill ends (after a
    retraction, the prompt and the outputs so far); None is an open-ended prompt that grows with each chunk
    and ends where the first decode step begins.
    """

    rid: int
    kv: ReqKvInfo = field(default_factory=ReqKvInfo)
    prefix_indices: torch.Tensor = field(default_factory=lambda: torch.empty(0, dtype=torch.int64))
    fill_ids: list[int] = field(default_factory=list)
    last_node: object | None = None
    extend_range_end: int = 0
    inflight_middle_chunks: int = 0
    status: ReqStatus = ReqStatus.WAITING
    prompt_len: int | None = None
    origin_len: int = 0  # the prompt it arrived with (`origin_input_ids`), which a retraction does not change
    family: int = 0
    kind: int = KIND_NORMAL
    # Where the KV the client sees ends when a stop landed inside a verified run (`len(origin_input_ids) +
    # finished_len`); None: no such stop, the record owns all it committed.
    stop_len: int | None = None

    def owned_kv_len(self) -> int:
        """`Req.owned_kv_len()`: the committed KV, cut at the stop a verified run accepted past."""
        committed = self.kv.kv_committed_len
        return committed if self.stop_len is None else min(committed, self.stop_len)

    @property
    def skip_radix_cache_insert(self) -> bool:
        """Barred from the tree (PD bootstrap warm-ups, positional-embed overrides): it matches, never inserts."""
        return self.kind == KIND_SKIP_INSERT

    def __deepcopy__(self, memo: dict[int, object]) -> Req:
        """As `copy.deepcopy` would, without a call per token id: `fill_ids` holds ints, so a list copy is deep."""
        copied = object.__new__(Req)
        fields = copied.__dict__
        fields.update(self.__dict__)  # ints, None, an enum: immutable, shared
        memo[id(self)] = copied
        fields["kv"] = self.kv.copy()
        fields["fill_ids"] = list(self.fill_ids)
        prefix, node = self.prefix_indices, self.last_node
        fields["prefix_indices"] = copy.deepcopy(prefix, memo)
        if node is not None:  # through the memo: the clone's own tree node
            fields["last_node"] = memo.get(id(node)) or copy.deepcopy(node, memo)
        return copied

    def tokens(self, end: int) -> list[int]:
        """Token ids of positions `[0, end)`: the known ones, then the family's prompt stream."""
        known = self.fill_ids[:end]
        return known + [prompt_token(self.family, p) for p in range(len(known), end)]
