"""The drain check (liveness, after VOPR): stop arrivals, let the scheduler end every request, flush, and the pool
must be back to what it was when it was built.

A drain is one step of the trace (`drain`, no arguments): it works out its own releases from the model's state, so
a shrunk trace that drops an earlier release still drains whatever is left. Each request the scheduler still has
ends the way the scheduler ends it, once the free group of a result pass under way is closed: a decoding one
finishes, one mid-prefill or queued is aborted; then the cache is flushed. Every release runs through the
lockstep like any drawn step (judged by the model, compared with the pool), so a release that goes wrong while
draining is reported as what it is, at the drain's step. At most one step per request the model knows plus two
(the group's end, the flush) are taken: a drain that needs more, or finds no release the model allows for a
request still there, cannot drain, and that is a finding (`drain`), as is a pool that drained but is not back
to full: a row still held, a slot neither free nor the tree's, a lock or a tree node left behind.
"""

from __future__ import annotations

from typing import Any, Protocol

from model.concrete import Model
from model.trace import Failure, Step
from properties.vocabulary import LIVE_STATUSES, STATUS_CODES, STATUS_DECODE, STATUS_WAITING

DRAIN = "drain"
ENDING = LIVE_STATUSES | {STATUS_WAITING}
# How the scheduler ends a request, by status, in the order it tries them.
ENDINGS = {STATUS_DECODE: ("finish", "abort")}
OTHER_ENDINGS = ("abort",)

# A target without both cannot end every request the model can have (a test's narrow stand-in): it is not drained.
NEEDED = frozenset({"finish", "abort"})

Release = tuple[str, dict[str, int]]


def drains(ops: frozenset[str], exclude: frozenset[str]) -> bool:
    """Whether runs over a target with `ops` end with a drain: it can end every request, and it is not excluded."""
    return ops >= NEEDED and DRAIN not in exclude


def drain_args(exclude: frozenset[str]) -> dict[str, int]:
    """The drain step of a run that excludes `exclude`: a run that never flushes (a known finding's trigger on this
    release) drains without the flush, and its pool must then be full but for an unlocked, evictable tree."""
    return {"flush": 0} if "flush" in exclude else {}


class Drained(Protocol):
    """What a drain reads and steps of the lockstep driver (`fuzz.lockstep.Lockstep`)."""

    model: Model
    ops: frozenset[str]
    steps: list[Step]
    corners: list[str]
    snap: Any
    fresh: Any

    def pool_step(self, op: str, inputs: dict[str, int]) -> Failure | None: ...


class Stuck(Exception):
    """No release the model allows is left for what the pool still holds."""


def drain(lock: Drained, flush: bool = True) -> Failure | None:
    """Drain `lock` as one step; the failure it shows, if any. Its releases are not kept as steps of their own.
    Without `flush` the cache keeps what the tree holds, which must then all be evictable."""
    index = len(lock.steps)
    failure, taken = _releases(lock, index, lock.ops if flush else lock.ops - {"flush"})
    del lock.steps[index:]
    lock.steps.append(Step(DRAIN, {} if flush else {"flush": 0}))
    lock.corners = [f"drain: {taken} releases"]
    if failure is not None:
        return failure
    problems = undrained(lock.model, lock.snap, lock.fresh, flushed=flush)
    if problems:
        lock.corners = ["drain: not back to full"]
        return Failure(index, "drain", "not back to full", "after the drain " + "; ".join(problems))
    return None


def _releases(lock: Drained, index: int, ops: frozenset[str]) -> tuple[Failure | None, int]:
    """Run the drain's releases (from `ops`) through the lockstep; the first failure (at the drain's step) and how
    many ran."""
    bound = len(lock.model.known_requests()) + 2
    for taken in range(bound + 1):
        try:
            release = next_release(lock.model, ops)
        except Stuck as exc:
            return Failure(index, "drain", "cannot drain", str(exc)), taken
        if release is None:
            return None, taken
        if taken == bound:
            break
        op, args = release
        failure = lock.pool_step(op, args)
        if failure is not None:
            return Failure(
                index, failure.kind, failure.id, f"while draining, {_named(op, args)}: {failure.message}"
            ), taken
    return Failure(index, "drain", "cannot drain", f"still not drained after {bound} releases"), bound


def next_release(model: Model, ops: frozenset[str]) -> Release | None:
    """The next release a drain makes on `model`'s state with the target's `ops`; None once nothing is left."""
    s = model.state
    if s.group_open == 1 and "group_end" in ops:  # the result pass under way ends first
        return "group_end", {}
    for rid in model.known_requests():
        status = s.rec_status.get(rid)
        if status in ENDING:
            return _ending(model, ops, rid, status)
    if s.tree_slots > 0 and "flush" in ops:
        if not model.enabled("flush", {}):
            raise Stuck(f"every request ended, but the model does not let the cache flush: {_holdings(model)}")
        return "flush", {}
    return None


def _ending(model: Model, ops: frozenset[str], rid: int, status: int) -> Release:
    tried = [op for op in ENDINGS.get(status, OTHER_ENDINGS) if op in ops]
    for op in tried:
        if model.enabled(op, {"req": rid}):
            return op, {"req": rid}
    raise Stuck(f"request {rid} ({_status_name(status)}) is still there and none of {tried} is allowed on it")


def undrained(model: Model, snap: Any, fresh: Any, flushed: bool = True) -> list[str]:
    """What a drained pool (`snap`, and the model's state) still holds that the pool as built (`fresh`) did not;
    an unflushed drain may leave the tree holding slots, none protected, all evictable and counted back as free."""
    s, problems = model.state, []
    if len(snap.free_rows) != len(fresh.free_rows):
        problems.append(f"{len(fresh.free_rows) - len(snap.free_rows)} rows not free")
    cached = 0 if flushed else _cached(snap, fresh)
    if _free(snap) + cached != _free(fresh):
        problems.append(f"{_free(snap)} of the {_free(fresh)} free slots (or pages) at the start are free")
    if snap.row_slots:
        problems.append(f"requests {sorted(snap.row_slots)} still hold rows")
    problems += _tree_problems(snap, flushed)
    if snap.group_open or snap.pending_pages.numel():
        problems.append(f"a free group is open or pending ({snap.pending_pages.numel()} pages)")
    locked = sorted(r for r in model.known_requests() if s.rec_locked.get(r))
    if locked:
        problems.append(f"the model says requests {locked} still lock the tree")
    if s.n_held_rows or s.owned_slots or (s.tree_slots and flushed) or s.pending_slots:
        problems.append(f"the model is not back to full: {_holdings(model)}")
    return problems


def _tree_problems(snap: Any, flushed: bool) -> list[str]:
    """What the tree still holds that a drain (flushed, or not) must not leave."""
    held, evictable = int(snap.tree_slots.numel()), int(snap.evictable_size)
    problems = []
    if (held or evictable) if flushed else evictable != held:
        tail = "" if flushed else ", not all of them evictable"
        problems.append(f"the tree still holds {held} slots (evictable {evictable}){tail}")
    if snap.protected_size:
        problems.append(f"the tree still protects {snap.protected_size} slots")
    return problems


def _cached(snap: Any, fresh: Any) -> int:
    """What the tree holds, in the free list's unit (pages where the pool counts pages; the tree holds whole
    pages)."""
    return int(snap.tree_slots.numel()) // max(1, int(fresh.page_size))


def _free(snap: Any) -> int:
    return int(snap.free_slots.numel()) + int(snap.release_slots.numel())


def _holdings(model: Model) -> str:
    s = model.state
    return (
        f"{s.n_held_rows} rows held, {s.owned_slots} slots owned by records, {s.tree_slots} by the tree, "
        f"{s.pending_slots} pending in a free group"
    )


def _status_name(status: int) -> str:
    return next((name for name, code in STATUS_CODES.items() if code == status), str(status))


def _named(op: str, args: dict[str, int]) -> str:
    return f"{op} of request {args['req']}" if "req" in args else op
