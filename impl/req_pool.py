"""`ReqToTokenPool`: the request-row table and its free rows, with the 0.5.19 reuse and free asserts."""

from __future__ import annotations

import torch

from impl.faults import NO_FAULTS, FaultSet
from impl.field_copy import FieldCopy
from impl.records import Req


class ContractViolation(AssertionError):
    """A call the memory contract forbids, refused by one of the pool's own asserts."""


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ContractViolation(message)


class ReqToTokenPool(FieldCopy):
    """Rows of `req_to_token` (row 0 is padding), handed out LIFO from the tail of `free_slots`."""

    def __init__(self, size: int, max_context_len: int, device: str = "cpu", faults: FaultSet = NO_FAULTS):
        assert size >= 1 and max_context_len >= 1
        self.size = size
        self.max_context_len = max_context_len
        self.device = device
        self.faults = faults
        self.req_to_token = torch.zeros((size + 1, max_context_len), dtype=torch.int32, device=device)
        self.req_generation = [0] * (size + 1)
        self.free_slots: list[int] = list(range(1, size + 1))

    def available_size(self) -> int:
        return len(self.free_slots)

    def write(self, row: int, start: int, values: torch.Tensor) -> None:
        self.req_to_token[row, start : start + values.numel()] = values.to(torch.int32)

    def alloc_rows(self, need_size: int) -> list[int] | None:
        """Pop `need_size` rows from the tail; None (nothing taken) when too few are free."""
        if need_size > len(self.free_slots):
            return None
        if need_size == 0:
            return []  # free_slots[-0:] would be the whole list
        rows = self.free_slots[-need_size:]
        del self.free_slots[-need_size:]
        for row in rows:
            self.req_generation[row] += 1
        return rows

    def free_rows(self, rows: list[int]) -> None:
        # No double-free check here, as upstream: the callers' record asserts are the guard.
        self.free_slots.extend(rows)

    def _reuse_allowed(self, req: Req) -> bool:
        if self.faults.on("legacy_reuse_guard"):
            return req.inflight_middle_chunks > 0 or req.kv.kv_committed_len > 0
        return req.kv.kv_allocated_len > 0

    def alloc(self, reqs: list[Req]) -> list[int] | None:
        """Give a row to each record that holds none; records that hold one keep it (chunk continuation)."""
        reusing = [r for r in reqs if r.kv.holds_kv]
        for r in reusing:
            _require(self._reuse_allowed(r), f"a reused row must carry allocated KV (request {r.rid})")
        rows = self.alloc_rows(len(reqs) - len(reusing))
        if rows is None:
            return None
        fresh = iter(rows)
        for r in reqs:
            if not r.kv.holds_kv:
                r.kv.req_pool_idx = next(fresh)
        return [r.kv.req_pool_idx for r in reqs]  # type: ignore[misc]

    def free(self, req: Req) -> None:
        _require(req.kv.holds_kv, f"request {req.rid} must have req_pool_idx")
        assert req.kv.req_pool_idx is not None
        self.free_rows([req.kv.req_pool_idx])
        req.kv.req_pool_idx = None

    def clear(self) -> None:
        """Every row free again. Generations stay: they must only grow, or a reader's stored (row, generation)
        pair could match the row's next holder (0.5.23 keeps them; 0.5.18 zeroed them)."""
        self.free_slots = list(range(1, len(self.req_generation)))  # every row, pre-allocation rows included
        if self.faults.on("clear_zeroes_generations"):
            self.req_generation = [0] * len(self.req_generation)
