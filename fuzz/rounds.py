"""A pool's prefill round (`prefill_round`) as the model's choice: the batch the scheduler ran, written as the
model's batch of extends (`model.prefill_round`).

Each request the round ran is one extend entry: its length is what the round computed (`seq_len - start`), its
prefix what a fresh match found (`start`) or, for the chunked request it continued, the record's own protected
length before the round, as the extend's reuse reads it. The tokens its inserts found cached (`dup`) are what
the inserting entries protect after the round less what the tree gained (what the round evicted left the tree
first): only the total is observable, as for a batch.
"""

from __future__ import annotations

from typing import Any

from impl.target import PoolSnapshot, Round
from properties.vocabulary import BATCH_OPS, KIND_SKIP_INSERT, ROUND_LIMIT

_EXTEND = BATCH_OPS.index("extend")


def round_choice(result: Round, before: PoolSnapshot, after: PoolSnapshot, kinds: Any, evicted: int) -> dict[str, int]:
    """The round's choice; `kinds` the model's request kinds, `evicted` what the round evicted on demand. A round
    of more requests than a step carries is written with its first `ROUND_LIMIT` and its true size, which the
    model refuses; so are its preemptions."""
    ran = result.ran
    choice = {"size": len(ran), "preempted": len(result.preempted)}
    choice.update((f"pre{i}", rid) for i, rid in enumerate(result.preempted[:ROUND_LIMIT]))
    for i, entry in enumerate(ran[:ROUND_LIMIT]):
        record = before.records.get(entry.rid)
        prefix = record.protected_len if record is not None and record.row is not None else entry.start
        fields = {"op": _EXTEND, "req": entry.rid, "n": entry.seq_len - entry.start, "prefix": prefix, "row": entry.row}
        choice.update((f"{name}{i}", value) for name, value in fields.items())
    if before.cache == "radix":
        inserting = [e.rid for e in ran if kinds.get(e.rid) != KIND_SKIP_INSERT]
        gained = int(after.tree_slots.numel()) - int(before.tree_slots.numel()) + evicted
        choice["dup"] = sum(after.records[rid].protected_len for rid in inserting) - gained
    return choice


def round_corners(choice: dict[str, int], before: PoolSnapshot, after: PoolSnapshot) -> list[str]:
    """The corners a round reached: how many it ran, whether it continued the chunked request, admitted a new
    waiting request, left one mid-prefill, matched a prefix, or left a waiting request waiting."""
    size = choice["size"]
    corners = [f"prefill_round: ran {('none', 'one', 'several')[min(size, 2)]}"]
    if choice.get("preempted", 0):
        corners.append(f"prefill_round: preempted {('one', 'several')[min(choice['preempted'], 2) - 1]}")
    ran = [choice[f"req{i}"] for i in range(min(size, ROUND_LIMIT))]
    for i, rid in enumerate(ran):
        record, done = before.records.get(rid), after.records.get(rid)
        if record is not None and record.row is not None:
            corners.append("prefill_round: continued the chunked request")
        else:
            corners.append("prefill_round: admitted a waiting request")
        if done is not None and done.prompt_len is not None and done.committed_len < done.prompt_len:
            corners.append("prefill_round: left a request mid-prefill")
        if choice.get(f"prefix{i}", 0) > 0 and (record is None or record.row is None):
            corners.append("prefill_round: prefix matched in the tree")
    waiting = [r for r, rec in before.records.items() if rec.status == "waiting" and rec.row is None]
    if any(r not in ran for r in waiting):
        corners.append("prefill_round: a waiting request turned down or not reached")
    return corners
