"""The reference pool's prefill adder: which requests a prefill round runs, first come first served.

Our reading of `PrefillAdder` with the scheduler's defaults and no priorities: the chunked request (the one
mid-prefill) continues first, whatever else fits; then the waiting requests in the order they queued, each
whole or cut to what is left of the round's chunk budget (half a row, page aligned, as the upstream host's
`chunked_prefill_size`), while the batch still fits as a whole (rows, slots less what the tree could evict, the
round's request limit). The first waiting request that does not fit ends the round, and so does a spent budget;
so at most one request is left mid-prefill. The budgets of the running batch's future decodes are not reserved.
"""

from __future__ import annotations

from typing import Any

from impl.records import ReqStatus
from impl.scheduler import BatchEntry, BatchPlan, SchedulerGlue
from impl.target import Refused
from properties.vocabulary import ROUND_LIMIT


def chunk_budget(width: int, page_size: int) -> int:
    """The round's chunked prefill size: half a row, page aligned, at least a page."""
    return max(width // 2 // page_size * page_size, page_size)


def plan_round(glue: SchedulerGlue[Any], chunked: list[int]) -> BatchPlan[Any] | None:
    """The round's batch, planned and checked (None: nothing fits); `chunked` the request mid-prefill, if any,
    which a round that cannot fit it refuses."""
    budget = chunk_budget(glue.config.width, glue.config.page_size)
    waiting = [rid for rid, e in glue.reqs.items() if e.status is ReqStatus.WAITING]
    entries: list[BatchEntry] = []
    plan: BatchPlan[Any] | None = None
    for rid in [*chunked, *waiting]:
        if budget <= 0 or len(entries) == ROUND_LIMIT:
            break
        tried = [*entries, ("extend", {"req": rid, "n": budget})]
        try:
            plan = glue._plan_batch(tried, limit=ROUND_LIMIT)
        except Refused:
            if rid in chunked:
                raise  # the chunked request always runs: a round that cannot fit it is refused
            break
        entries = tried
        _, _, extend = plan.prefill[-1]
        budget -= extend.seq_len - extend.start
    return plan if entries else None
