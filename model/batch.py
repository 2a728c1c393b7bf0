"""A batch: up to `MAX_BATCH` extends and decodes scheduled together, judged as upstream runs them.

Upstream allocates a batch all at once (`prepare_for_extend` takes every prefill entry's row, then all their
slots in one allocation; a mixed batch's decode entries are allocated after), and only its result pass stashes
each prefill entry in order. So the model runs a batch as the alloc halves of its prefill entries in order,
then its decode entries, then the prefill entries' result halves (`model.actions.Halves`): every guard is an
entry's own, read on the state the allocations before it left (the batch fits as a whole or not at all), and
the choices are each entry's row, one eviction for the batch and the tokens all its inserts found cached
(`dup`: only their total is observable, and only the total moves the counters).

The batch is built from the same halves the atomic actions are, and is judged by the executable model only:
its functions take Python values (`model.interp.PY`).
"""

from __future__ import annotations

from typing import Any

from model.actions import (
    EVICT_PARAMS,
    Action,
    _after_eviction,
    _eviction_ok,
    _inserts,
    _room,
    freed,
    page_floor,
)
from model.interp import PY, PyOps
from model.state import Sizes, State
from properties.vocabulary import BATCH_OPS, MAX_BATCH

ENTRY_OPS = BATCH_OPS
PREFILL_OPS = frozenset({"admit", "extend"})
# An entry's arguments, as its atomic action names them; slot i carries them suffixed with i.
ENTRY_FIELDS = ("req", "n", "prompt", "family", "kind", "prefix", "row")
_SORTS = {"req": "req", "row": "row"}


def batch_params(limit: int) -> tuple[tuple[str, str], ...]:
    """A batch's arguments with `limit` entry slots."""
    return (
        ("size", "len"),
        *((f"op{i}", "len") for i in range(limit)),
        *((f"{name}{i}", _SORTS.get(name, "len")) for i in range(limit) for name in ENTRY_FIELDS),
        ("dup", "len"),
        # 1: the caller skipped the scheduler's budget and the allocation paths must refuse what does not fit; the
        # model judges the batch the same either way.
        ("unchecked", "len"),
        *EVICT_PARAMS,
    )


BATCH_PARAMS = batch_params(MAX_BATCH)
# A step names only the slots it uses, and of those only the fields their op takes: the rest are 0.
BATCH_OPTIONAL = frozenset(name for name, _ in BATCH_PARAMS) - {"size"}
BATCH_CHOICE = (*(f"row{i}" for i in range(MAX_BATCH)), "dup", "evicted")
Entry = tuple[str, dict[str, Any]]


def entries(a: dict[str, Any], limit: int = MAX_BATCH) -> list[Entry] | None:
    """The batch's entries, prefill ones first then decodes (each in slot order), with the arguments their atomic
    actions take; None for a malformed batch (a size out of range, an unknown op, a request twice)."""
    size = a["size"]
    if not 1 <= size <= limit or any(not 0 <= a[f"op{i}"] < len(ENTRY_OPS) for i in range(size)):
        return None
    found = [(ENTRY_OPS[a[f"op{i}"]], _entry_args(a, i)) for i in range(size)]
    if len({args["req"] for _, args in found}) != size:
        return None
    return [e for e in found if e[0] in PREFILL_OPS] + [e for e in found if e[0] not in PREFILL_OPS]


def _entry_args(a: dict[str, Any], i: int) -> dict[str, Any]:
    return {**{name: a.get(f"{name}{i}", 0) for name in ENTRY_FIELDS}, "dup": 0, "evictable": 0, "evicted": 0}


def _first_free_row(p: Sizes, s: State) -> int:
    return next((r for r in range(1, p.rows + 1) if not s.row_held.get(r)), 0)


def batch_action(table: dict[str, Action], limit: int = MAX_BATCH) -> Action:
    """The batch over `table`'s extend and decode (a fault's variant where one is on), of up to `limit` entries."""

    def inner(op: str) -> Action:
        action = table[op]
        return action.inner or action

    def alloc(o: Any, p: Sizes, s: State, op: str, a: dict[str, Any]) -> State:
        action = inner(op)
        return action.halves.alloc(o, p, s, a) if action.halves else action.update(o, p, s, a)

    def enabled(o: Any, p: Sizes, s: State, a: dict[str, Any]) -> Any:
        assert isinstance(o, PyOps), "the batch is judged by the executable model only"
        found = entries(a, limit)
        if found is None:
            return False
        s = _room(o, p, s, a)
        for op, e in found:  # rows are not chosen yet: any free one moves the counters the same way
            if not inner(op).enabled(o, p, s, e):
                return False
            s = alloc(o, p, s, op, {**e, "row": _first_free_row(p, s)})
        return True

    def choice_ok(o: Any, p: Sizes, s: State, a: dict[str, Any]) -> Any:
        found = entries(a, limit)
        if found is None or not _eviction_ok(o, p, s, a):
            return False
        s = _after_eviction(o, p, s, a)
        inserts: list[tuple[int, int]] = []
        for op, e in found:
            action = inner(op)
            if not action.enabled(o, p, s, e) or (action.halves and not action.halves.row_ok(o, p, s, e)):
                return False
            if action.halves:
                low, key_len = action.halves.insert(o, p, s, e)
            s = alloc(o, p, s, op, e)
            if action.halves and _inserts(o, p, s, e["req"]):
                inserts.append((low, key_len))
        return _dup_total_ok(p, s, inserts, a["dup"])

    def update(o: Any, p: Sizes, s: State, a: dict[str, Any]) -> State:
        found = entries(a, limit)
        assert found is not None
        s = _after_eviction(o, p, s, a)
        for op, e in found:
            s = alloc(o, p, s, op, e)
        low_total = 0
        for op, e in found:
            action = inner(op)
            if action.halves:
                low = _low(o, p, s, e)
                low_total += low if _inserts(o, p, s, e["req"]) else 0
                s = action.halves.result(o, p, s, {**e, "dup": low})
        extra = a["dup"] - low_total if p.radix else 0  # what the inserts found cached beyond what they locked
        return freed(o, s.but(tree_slots=s.tree_slots - extra), extra)

    params = batch_params(limit)
    optional = frozenset(name for name, _ in params) - {"size"}
    return Action("batch", params, enabled, update, choice_ok, choice=BATCH_CHOICE, optional=optional)


def _low(o: Any, p: Sizes, s: State, e: dict[str, Any]) -> int:
    """What an entry's insert is sure to find cached, read after the allocations: the prefix it protects."""
    return int(s.rec_P.get(e["req"]))


def _dup_total_ok(p: Sizes, s: State, inserts: list[tuple[int, int]], dup: int) -> bool:
    """The total the inserts found cached: whole pages, at least what each locked, at most each key, and no more
    than the tree held before each insert (bounded as if the earlier inserts found only what they locked)."""
    if not p.radix:
        return dup == 0
    tree, low_total, bound = s.tree_slots, 0, 0
    for low, key_len in inserts:
        bound += max(min(key_len, tree) - low, 0)
        tree += key_len - low
        low_total += low
    extra = dup - low_total
    return bool(0 <= extra <= bound and page_floor(PY, p, dup) == dup)
