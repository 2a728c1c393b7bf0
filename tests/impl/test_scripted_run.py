"""A seeded random run of thousands of mixed operations on a small radix-cached, paged, speculative pool: every
page has one holder after every step, refusals change nothing, and releasing everything leaves it idle-clean."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable

from test_flows import assert_idle_clean, assert_unchanged, page_problems

from impl.engine import ReferencePool
from impl.records import ReqStatus
from impl.target import PoolConfig, Refused

SEED = 20240917
STEPS = 3000
FAMILIES = 4  # few families, so that prompts share cached prefixes
CONFIG = PoolConfig(rows=6, tokens=96, width=40, page_size=4, cache="radix", speculative=True)

Op = Callable[[ReferencePool], object]


class Script:
    """Draws one operation at a time, on requests in the status it fits (and sometimes on any request)."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.next_rid = 0

    def draw(self, pool: ReferencePool) -> tuple[str, Op]:
        name = self.rng.choices(list(_WEIGHTS), weights=list(_WEIGHTS.values()))[0]
        return name, getattr(self, name)(pool)

    def _pick(self, pool: ReferencePool, *statuses: ReqStatus, drafts: bool | None = None) -> int:
        """A request in one of `statuses` (with or without draft slots `[C, A)` when `drafts` says), or now and
        then any id (the call may then be refused)."""
        fitting = [
            rid
            for rid, r in pool.reqs.items()
            if r.status in statuses and drafts in (None, r.kv.kv_allocated_len > r.kv.kv_committed_len)
        ]
        if fitting and self.rng.random() < 0.9:
            return self.rng.choice(fitting)
        return self.rng.randrange(self.next_rid + 1)

    def _new_rid(self) -> int:
        self.next_rid += 1
        return self.next_rid - 1

    def admit(self, pool: ReferencePool) -> Op:
        rid, n, family = self._new_rid(), self.rng.randint(1, 24), self.rng.randrange(FAMILIES)
        prompt = None if self.rng.random() < 0.15 else self.rng.randint(1, CONFIG.width)
        return lambda p: p.admit(rid, n, prompt_len=prompt, family=family)

    def extend(self, pool: ReferencePool) -> Op:
        rid = self._pick(pool, ReqStatus.RUNNING, ReqStatus.WAITING, ReqStatus.FINISHED)
        n = self.rng.randint(1, 24)
        return lambda p: p.extend(rid, n)

    def decode(self, pool: ReferencePool) -> Op:
        rid = self._pick(pool, ReqStatus.DECODING, drafts=False)
        return lambda p: p.decode(rid)

    def spec_prepare(self, pool: ReferencePool) -> Op:
        rid, reserve = self._pick(pool, ReqStatus.DECODING), self.rng.randint(1, 6)
        return lambda p: p.spec_prepare(rid, reserve)

    def spec_commit(self, pool: ReferencePool) -> Op:
        rid = self._pick(pool, ReqStatus.DECODING, drafts=True)
        kv = pool.reqs[rid].kv if rid in pool.reqs else None
        room = kv.kv_allocated_len - kv.kv_committed_len if kv else 0
        accepted = self.rng.randint(1, max(room, 1) + 1)  # now and then one more than reserved
        return lambda p: p.spec_commit(rid, accepted)

    def release(self, pool: ReferencePool) -> Op:
        rid = self._pick(pool, ReqStatus.RUNNING, ReqStatus.DECODING, ReqStatus.WAITING)
        waiting = rid in pool.reqs and pool.reqs[rid].status is ReqStatus.WAITING
        path = "abort" if waiting else self.rng.choice(["finish", "retract", "abort", "pp_release"])
        return lambda p: getattr(p, path)(rid)

    def evict(self, pool: ReferencePool) -> Op:
        num_tokens = self.rng.randint(0, 24)
        return lambda p: p.evict(num_tokens)

    def flush(self, pool: ReferencePool) -> Op:
        return ReferencePool.flush

    def pd_prealloc(self, pool: ReferencePool) -> Op:
        rid, fill_len, family = self._new_rid(), self.rng.randint(1, CONFIG.width), self.rng.randrange(FAMILIES)
        return lambda p: p.pd_prealloc(rid, fill_len, family=family)

    def forbidden(self, pool: ReferencePool) -> Op:
        # Only on released records: on a live one these bypass calls are accepted (and break ownership).
        finished = [rid for rid, r in pool.reqs.items() if r.status is ReqStatus.FINISHED]
        rid = self.rng.choice(finished) if finished else self.next_rid
        call, stale_row = self.rng.choice(["release_again", "free_row", "reuse_released"]), self.rng.randint(1, 6)
        if call == "reuse_released":
            return lambda p: p.reuse_released(rid, stale_row, 1)
        return lambda p: getattr(p, call)(rid)


# Relative frequencies: mostly growth and decoding, releases often enough that rows and pages cycle.
_WEIGHTS = {
    "admit": 12,
    "extend": 10,
    "decode": 20,
    "spec_prepare": 6,
    "spec_commit": 6,
    "release": 20,
    "evict": 3,
    "flush": 1,
    "pd_prealloc": 3,
    "forbidden": 4,
}
DRAIN_EVERY = 500  # steps between moments where everything is released, checked idle-clean and flushed


def run_script(seed: int, steps: int) -> tuple[ReferencePool, Counter[str]]:
    """Run `steps` drawn operations, draining the pool every `DRAIN_EVERY` steps."""
    pool, script, outcomes = ReferencePool(CONFIG), Script(random.Random(seed)), Counter[str]()
    for step in range(1, steps + 1):
        name, op = script.draw(pool)
        outcomes[_step(pool, step, name, op)] += 1
        if step % DRAIN_EVERY == 0:
            drain(pool)
            outcomes["flush"] += 1
    return pool, outcomes


def _step(pool: ReferencePool, step: int, name: str, op: Op) -> str:
    """Run one operation: a refusal must leave the pool as it was, a completed step must leave it page-clean.
    Returns the outcome to count."""
    before = pool.snapshot()
    try:
        op(pool)
    except Refused:
        assert_unchanged(before, pool.snapshot())
        return f"{name} refused"
    assert name != "forbidden", f"step {step}: a forbidden call was accepted"
    after = pool.snapshot()
    problems = page_problems(after)
    assert not problems, f"step {step} ({name}): {problems[:3]}"
    if name in _ALLOCATING and after.evictable_size < before.evictable_size:
        return f"{name} after eviction"
    return name


_ALLOCATING = ("admit", "extend", "decode", "spec_prepare", "pd_prealloc")


def drain(pool: ReferencePool) -> None:
    """Abort every request the scheduler still has (waiting ones are dropped, running ones released), check
    that the pool is idle-clean, flush it, and check again."""
    for rid, req in pool.reqs.items():
        if req.status is not ReqStatus.FINISHED:
            pool.abort(rid)
    assert_idle_clean(pool)
    pool.flush()
    assert_idle_clean(pool)
    assert pool.snapshot().tree_slots.numel() == 0


def test_a_seeded_run_keeps_every_page_owned_once_and_ends_idle_clean() -> None:
    pool, outcomes = run_script(SEED, STEPS)
    drain(pool)
    # The run exercised what it is for: every operation completed (forbidden calls never did), pools ran short,
    # and allocations evicted the tree.
    for name in set(_WEIGHTS) - {"forbidden"}:
        assert outcomes[name] > 0, f"{name} never completed: {outcomes}"
    assert outcomes["forbidden"] == 0 and outcomes["forbidden refused"] > 0
    assert outcomes["admit refused"] > 0 and outcomes["decode refused"] > 0
    assert sum(n for outcome, n in outcomes.items() if outcome.endswith("after eviction")) > 0
