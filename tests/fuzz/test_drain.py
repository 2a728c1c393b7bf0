"""The drain check: it ends every request the way the scheduler would and leaves the pool as built; a release that
goes wrong while draining, a request no release can end, and a pool not back to full are each a finding; a trace
ending in a drain replays it; both engines end their runs with one."""

from __future__ import annotations

import pytest

from fuzz.drain import DRAIN, Stuck, drain_args, next_release, undrained
from fuzz.lockstep import Lockstep
from fuzz.profiles import POOLS
from fuzz.replay import replay
from fuzz.walker.walk import Walker
from impl.engine import ReferencePool
from impl.target import Refused
from model.trace import Step, Trace
from properties.vocabulary import STATUS_DONE

RADIX = {**POOLS["radix-p4"], "faults": []}
CHUNK = {**POOLS["chunk-p1"], "faults": []}


def _busy(config: dict[str, object]) -> Lockstep:
    """A pool with a decoding request, one mid-prefill, one retracted and a free group open."""
    lock = Lockstep(config)
    for rid, n, prompt, family in ((0, 8, 8, 0), (1, 4, 12, 1), (2, 8, 8, 2)):
        assert lock.step("admit", {"req": rid, "n": n, "prompt": prompt, "family": family}) is None
    for rid in (0, 2):
        assert lock.step("decode", {"req": rid}) is None
    assert lock.step("retract", {"req": 2}) is None
    assert lock.step("group_begin", {}) is None
    return lock


@pytest.mark.parametrize("config", [RADIX, CHUNK], ids=["radix", "chunk"])
def test_a_drain_ends_every_request_and_the_pool_is_back_to_full(config: dict[str, object]) -> None:
    lock = _busy(config)
    assert undrained(lock.model, lock.snap, lock.fresh), "the busy pool must not already look drained"
    before = len(lock.steps)
    assert lock.step(DRAIN, {}) is None
    assert lock.steps[before:] == [Step(DRAIN, {})]  # one step, whatever it released
    flushed = 1 if config is RADIX else 0  # a chunk cache keeps no tree to flush
    assert lock.corners == [f"drain: {4 + flushed} releases"]  # the group's end, three requests, the flush
    assert undrained(lock.model, lock.snap, lock.fresh) == []
    s = lock.model.state
    assert {s.rec_status.get(rid) for rid in lock.model.known_requests()} == {STATUS_DONE}


def test_the_drain_ends_requests_as_the_scheduler_does() -> None:
    lock = _busy(RADIX)
    ops = lock.ops
    assert next_release(lock.model, ops) == ("group_end", {})
    lock.step("group_end", {})
    assert next_release(lock.model, ops) == ("finish", {"req": 0})  # decoding: it finishes
    lock.step("finish", {"req": 0})
    assert next_release(lock.model, ops) == ("abort", {"req": 1})  # mid-prefill: aborted
    lock.step("abort", {"req": 1})
    assert next_release(lock.model, ops) == ("abort", {"req": 2})  # retracted, queued: aborted
    lock.step("abort", {"req": 2})
    assert next_release(lock.model, ops) == ("flush", {})
    lock.step("flush", {})
    assert next_release(lock.model, ops) is None


def test_a_request_no_release_can_end_stops_the_drain() -> None:
    lock = _busy(RADIX)
    lock.step("group_end", {})
    lock.step("finish", {"req": 0})
    with pytest.raises(Stuck, match=r"request 1 \(running\) is still there and none of \[\] is allowed"):
        next_release(lock.model, lock.ops - {"abort"})


def test_a_release_refused_while_draining_is_a_finding_at_the_drain(monkeypatch: pytest.MonkeyPatch) -> None:
    def flush(self: ReferencePool) -> None:
        raise Refused("the scheduler is not idle")

    lock = _busy(RADIX)
    monkeypatch.setattr(ReferencePool, "flush", flush)
    failure = lock.step(DRAIN, {})
    assert failure is not None and failure.step == len(lock.steps) - 1 and lock.steps[-1] == Step(DRAIN, {})
    assert failure.kind == "refused-legal" and failure.message.startswith("while draining, flush: the pool refused")


def test_a_pool_not_back_to_full_is_named_field_by_field() -> None:
    lock = _busy(RADIX)
    problems = undrained(lock.model, lock.snap, lock.fresh)
    assert "2 rows not free" in problems
    assert any(p.startswith("requests [0, 1] still hold rows") for p in problems)
    assert any(p.startswith("a free group is open") for p in problems)
    assert any(p.startswith("the model is not back to full: 2 rows held") for p in problems)


def test_a_drain_that_leaves_the_tree_locked_is_found(monkeypatch: pytest.MonkeyPatch) -> None:
    lock = _busy(RADIX)
    real = ReferencePool.snapshot

    def snapshot(self: ReferencePool) -> object:
        snap = real(self)
        object.__setattr__(snap, "protected_size", snap.protected_size + 4)
        return snap

    monkeypatch.setattr(ReferencePool, "snapshot", snapshot)
    monkeypatch.setattr("fuzz.lockstep.Lockstep._observe", lambda self, index: None)
    failure = lock.step(DRAIN, {})
    assert failure is not None and (failure.kind, failure.id) == ("drain", "not back to full")
    assert "the tree still protects 4 slots" in failure.message


def test_a_trace_ending_in_a_drain_replays_it() -> None:
    lock = _busy(RADIX)
    lock.step(DRAIN, {})
    replayed = replay(Trace(RADIX, None, lock.steps))
    assert replayed.failure is None and replayed.steps[-1] == Step(DRAIN, {})
    assert undrained(Lockstep(RADIX).model, lock.snap, lock.fresh) == []


def test_every_walk_ends_with_a_drain_unless_it_is_excluded() -> None:
    result = Walker(CHUNK, 3).run(steps=600)
    assert result.failure is None and result.ops[DRAIN] == result.walks
    assert DRAIN not in Walker(CHUNK, 3, exclude=frozenset({DRAIN})).run(steps=600).ops


def test_a_run_that_excludes_flush_drains_without_one_and_leaves_an_evictable_tree() -> None:
    lock = _busy(RADIX)
    args = drain_args(frozenset({"flush"}))
    assert lock.step(DRAIN, args) is None and lock.steps[-1] == Step(DRAIN, {"flush": 0})
    assert lock.snap.tree_slots.numel() > 0 and lock.snap.evictable_size == lock.snap.tree_slots.numel()
    assert undrained(lock.model, lock.snap, lock.fresh, flushed=False) == []
    assert any(p.startswith("the tree still holds") for p in undrained(lock.model, lock.snap, lock.fresh))
    assert replay(Trace(RADIX, None, lock.steps)).failure is None


def test_an_unflushed_drain_still_finds_a_locked_tree(monkeypatch: pytest.MonkeyPatch) -> None:
    lock = _busy(RADIX)
    real = ReferencePool.snapshot

    def snapshot(self: ReferencePool) -> object:
        snap = real(self)
        object.__setattr__(snap, "evictable_size", max(0, snap.evictable_size - 4))
        return snap

    monkeypatch.setattr(ReferencePool, "snapshot", snapshot)
    monkeypatch.setattr("fuzz.lockstep.Lockstep._observe", lambda self, index: None)
    failure = lock.step(DRAIN, {"flush": 0})
    assert failure is not None and (failure.kind, failure.id) == ("drain", "not back to full")
    assert "not all of them evictable" in failure.message


def test_walks_that_exclude_flush_end_with_unflushed_drains() -> None:
    walker = Walker(RADIX, 4, exclude=frozenset({"flush"}))
    result = walker.run(steps=400)
    assert result.failure is None and result.ops[DRAIN] == result.walks and "flush" not in result.ops
    assert walker.lock.steps[-1] == Step(DRAIN, {"flush": 0})
