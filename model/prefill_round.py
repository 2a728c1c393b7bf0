"""The scheduler's prefill round (`Scheduler.get_new_batch_prefill`: `PrefillAdder` over the waiting queue, then
`prepare_for_extend` and the batch's result pass), judged as one step.

The scheduler, not the caller, picks what runs: the chunked request (the one mid-prefill) continues first, then
waiting requests are admitted while the adder's budgets allow, the last one perhaps cut to a chunk. The model
follows that choice and judges it as a batch of extends (`model.batch`: every guard an entry's own, the rows
then the slots, then each entry's stash), with the rules the scheduler keeps whatever its budgets say: only
waiting requests and the chunked one run; the chunked one runs (`add_chunked_req`: left out, its row and chunk
would be held by a request no batch runs); and afterwards at most one request is mid-prefill (the scheduler has
one chunked request). How much the adder admits (its token and request budgets, the decode reserve of the
running batch) is not judged; the pool states after the round are compared as after any step.

The round is legal only where the chunked request's whole remaining prompt fits the free slots, so that any
chunk of it the adder cuts fits and its budget has room for it; the engines draw the round only where it is
legal. A tree that is not evicted on demand has no round: the adder counts the tree's evictable tokens in its
budget and upstream's allocation evicts them as it needs (a pool that evicts only in its own step is the
harness's restriction, not the scheduler's).

A round may first preempt running requests to make room (`PrefillAdder.preempt_to_schedule`, where the request
it considers has a higher priority): each a retraction of a decoding request, never of one that finished and
waits for the filter. The choices are the preemptions (`preempted`, `pre0`..) and the whole batch: `size` (0:
nothing ran), each entry's op (an extend), request, length, matched prefix and row, the tokens the inserts
found cached (`dup`) and what the round evicted.

Judged by the executable model only (`model.interp.PY`), like the batch.
"""

from __future__ import annotations

from typing import Any

from model.actions import OBSERVED, Action, _after_eviction, _eviction_ok, judged_action
from model.batch import batch_action, batch_params, entries
from model.interp import PY, PyOps
from model.state import Sizes, State
from properties.vocabulary import BATCH_OPS, ROUND_LIMIT, STATUS_DECODE, STATUS_PREFILL, STATUS_WAITING
from properties.vocabulary import ceil_align_in as ceil_align

PREFILL_ROUND = "prefill_round"
# The running requests the round preempted (`PrefillAdder.preempt_to_schedule`), in the order it released them.
PREEMPTED = tuple(f"pre{i}" for i in range(ROUND_LIMIT))
ROUND_PARAMS = (*batch_params(ROUND_LIMIT), ("preempted", "len"), *((name, "req") for name in PREEMPTED))
# What the pool chose: everything but what the lockstep reads off the pool before the round (`OBSERVED`).
ROUND_CHOICE = tuple(name for name, _ in ROUND_PARAMS if name not in OBSERVED)
_EXTEND = BATCH_OPS.index("extend")


def with_status(s: State, status: int) -> list[int]:
    """The requests in `status`, ascending."""
    return sorted(r for r in s.rec_status if s.rec_status.get(r) == status)


def _rest_fits(o: Any, p: Sizes, s: State, rid: int) -> bool:
    """The chunked request's whole remaining prompt fits the free slots: then whatever chunk the adder cuts
    (it always runs the chunked request, whatever its budget says) fits too. Where it may not, the round is
    not one the contract calls legal: the adder would ask for what may not be there."""
    grow = ceil_align(o, p, s.rec_prompt.get(rid)) - ceil_align(o, p, s.rec_A.get(rid))
    return bool(grow <= s.n_free_slots)


def _preempted(retract: Action, p: Sizes, s: State, a: dict[str, Any]) -> State | None:
    """The state after the round's preemptions, each a retraction (`release_req`: the release without insert,
    `reset_for_retract`, the request re-queued; what they evicted is the round's, judged with its batch); None
    where one takes a request that is not decoding (one finished in a result pass and not yet filtered is
    released already, #18694) or takes one twice."""
    k = a.get("preempted", 0)
    picks = [a.get(name, -1) for name in PREEMPTED[:k]] if 0 <= k <= ROUND_LIMIT else None
    if picks is None or len(set(picks)) != len(picks):
        return None
    for rid in picks:
        if s.rec_status.get(rid) != STATUS_DECODE or not retract.enabled(PY, p, s, {"req": rid, "evictable": 0}):
            return None
        s = retract.update(PY, p, s, {"req": rid, "evictable": 0, "evicted": 0})
    return s


def prefill_round_action(table: dict[str, Action]) -> Action:
    """The prefill round over `table`'s extend (a fault's variant where one is on)."""
    batch = batch_action(table, ROUND_LIMIT)
    retract = table["retract"].inner or table["retract"]

    def enabled(o: Any, p: Sizes, s: State, a: dict[str, Any]) -> Any:
        assert isinstance(o, PyOps), "the prefill round is judged by the executable model only"
        chunked, waiting = with_status(s, STATUS_PREFILL), with_status(s, STATUS_WAITING)
        if p.radix and not p.on_demand:
            return False  # the adder budgets with what the tree could evict, which the allocation then evicts
        if s.group_open != 0 or len(chunked) > 1 or not (chunked or waiting):
            return False
        return all(_rest_fits(o, p, s, r) for r in chunked)

    def judged(p: Sizes, s: State, a: dict[str, Any]) -> State | None:
        chunked = with_status(s, STATUS_PREFILL)
        s_after = _preempted(retract, p, s, a)
        if s_after is None:
            return None
        s = s_after
        if a.get("size", 0) == 0:  # nothing ran; what its preemptions' releases evicted left the tree
            if chunked or not _eviction_ok(PY, p, s, a):
                return None
            return _after_eviction(PY, p, s, a)
        found = entries(a, ROUND_LIMIT)
        if found is None or any(a.get(f"op{i}") != _EXTEND for i in range(a["size"])):
            return None
        ran = [e["req"] for _, e in found]
        allowed = {STATUS_PREFILL, STATUS_WAITING}
        preempted = {a.get(name) for name in PREEMPTED[: a.get("preempted", 0)]}
        if any(s.rec_status.get(r) not in allowed or r in preempted for r in ran) or not set(chunked) <= set(ran):
            return None
        if not batch.enabled(PY, p, s, a) or not batch.choice_ok(PY, p, s, a):
            return None
        after = batch.update(PY, p, s, a)
        return after if len(with_status(after, STATUS_PREFILL)) <= 1 else None

    return judged_action(PREFILL_ROUND, ROUND_PARAMS, enabled, judged, ROUND_CHOICE, frozenset(ROUND_CHOICE))
