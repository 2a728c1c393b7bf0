"""`DecodeReqToTokenPool`: the PD-decode row pool, with extra rows for pre-allocated requests, handed out FIFO."""

from __future__ import annotations

from impl.faults import NO_FAULTS, FaultSet
from impl.req_pool import ReqToTokenPool


class DecodeReqToTokenPool(ReqToTokenPool):
    """`size` running rows plus `pre_alloc_size` rows for pre-allocation, not partitioned (the scheduler splits
    them). Rows are popped from the head: FIFO reuse widens the window before a freed row is handed out again,
    which upstream chose to shrink the damage of a late write from an aborted transfer."""

    def __init__(
        self, size: int, max_context_len: int, pre_alloc_size: int, device: str = "cpu", faults: FaultSet = NO_FAULTS
    ):
        assert pre_alloc_size >= 0, f"pre_alloc_size must be non-negative, got {pre_alloc_size}"
        super().__init__(size + pre_alloc_size, max_context_len, device, faults)
        self.size = size
        self.pre_alloc_size = pre_alloc_size

    def alloc_rows(self, need_size: int) -> list[int] | None:
        """Pop `need_size` rows from the head; None (nothing taken) when too few are free."""
        if need_size > len(self.free_slots):
            return None
        rows = self.free_slots[:need_size]
        del self.free_slots[:need_size]
        for row in rows:
            self.req_generation[row] += 1
        return rows
