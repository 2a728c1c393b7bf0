"""Batches the scheduler's budget does not screen (`batch(..., unchecked=True)`) on the reference: the allocation
paths refuse what does not fit, leaving the pool as it was, and run what fits as a screened batch does; a planted
allocation path that takes slots before its rows is caught by the lockstep as a refusal that changed state."""

from __future__ import annotations

import pytest
import torch

from fuzz.lockstep import Lockstep
from impl import allocation
from impl.engine import ReferencePool
from impl.target import PoolConfig, PoolSnapshot, Refused

CHUNK = PoolConfig(rows=4, tokens=32, width=16)
RADIX = PoolConfig(rows=4, tokens=32, width=16, cache="radix", page_size=4)


def plain(snap: PoolSnapshot) -> dict[str, object]:
    return {name: value.tolist() if isinstance(value, torch.Tensor) else value for name, value in vars(snap).items()}


def admissions(first: int, count: int, n: int = 2, extra: int = 2, family: int = 0) -> list[tuple[str, dict[str, int]]]:
    """`count` new requests from `first` on, each extending `n` tokens of a prompt `extra` tokens longer."""
    entry = {"n": n, "prompt": n + extra, "family": family, "kind": 0}
    return [("admit", {"req": first + i, **entry}) for i in range(count)]


def refused_unchanged(pool: ReferencePool, entries: list[tuple[str, dict[str, int]]]) -> str:
    before = plain(pool.snapshot())
    with pytest.raises(Refused) as refusal:
        pool.batch(entries, unchecked=True)
    assert plain(pool.snapshot()) == before
    return str(refusal.value)


@pytest.mark.parametrize("config", [CHUNK, RADIX], ids=["chunk", "radix"])
def test_more_admissions_than_free_rows_are_refused_by_the_row_allocation(config: PoolConfig) -> None:
    pool = ReferencePool(config)
    pool.batch(admissions(0, 2))
    assert "budget" not in refused_unchanged(pool, admissions(2, 3))
    with pytest.raises(Refused, match="no free row"):
        pool.batch(admissions(2, 3))  # screened, the budget refuses first
    assert "alloc_req_slots runs out of memory" in refused_unchanged(pool, admissions(2, 3))


def test_a_radix_refusal_gives_the_matched_prefix_lock_back() -> None:
    pool = ReferencePool(RADIX)
    pool.batch(admissions(0, 1, n=6, extra=0))
    pool.batch([("decode", {"req": 0})])
    pool.finish(0)  # its prompt is in the tree now, unlocked
    pool.batch(admissions(1, 2, n=4, family=1))  # other prompts: the tree's stays unlocked
    before = pool.snapshot().protected_recount
    refused_unchanged(pool, admissions(3, 3, n=6, extra=0))  # each matches the tree's prompt, then no rows
    assert pool.snapshot().protected_recount == before


def test_a_decode_batch_short_of_slots_is_refused_by_the_allocation_path() -> None:
    pool = ReferencePool(PoolConfig(rows=4, tokens=8, width=8))
    pool.batch(admissions(0, 2, n=4, extra=0))  # two whole prompts of 4: the pool is full, both decode next
    reason = refused_unchanged(pool, [("decode", {"req": 0}), ("decode", {"req": 1})])
    assert "decode out of memory" in reason


def test_an_unchecked_batch_that_fits_runs_as_a_screened_one() -> None:
    screened, unchecked = ReferencePool(CHUNK), ReferencePool(CHUNK)
    assert screened.batch(admissions(0, 3)) == unchecked.batch(admissions(0, 3), unchecked=True)
    assert plain(screened.snapshot()) == plain(unchecked.snapshot())


def _slots_before_rows(pools: allocation.Pools, reqs: list, seq_lens: list[int]) -> list[int]:
    """A planted allocation path: every slot first, then the rows, so a batch short of rows keeps its slots."""
    allocator = pools.allocator
    taken = allocator.alloc(sum(seq_lens))
    if pools.cache.req_to_token_pool.available_size() < len(reqs):
        raise allocation.OutOfMemory("alloc_req_slots runs out of memory (planted: after the slots)")
    if taken is not None:
        allocator.free(taken)
    return ORIGINAL(pools, reqs, seq_lens)


ORIGINAL = allocation.alloc_for_extend


def test_a_refusal_that_changed_the_pool_is_found(monkeypatch: pytest.MonkeyPatch) -> None:
    import impl.engine as engine

    monkeypatch.setattr(engine, "alloc_for_extend", _slots_before_rows)
    lock = Lockstep(dict(vars(CHUNK), target="reference", faults=[]))
    for step in range(2):
        assert lock.step("admit", {"req": step, "n": 2, "prompt": 4, "family": 0}) is None
    args = {"size": 3, "unchecked": 1}
    for slot, rid in enumerate(range(2, 5)):
        args.update({f"op{slot}": 0, f"req{slot}": rid, f"n{slot}": 2, f"prompt{slot}": 4})
    failure = lock.step("batch", args)
    assert failure is not None and (failure.kind, failure.id) == ("refusal-changed-state", "batch"), failure
    assert "free slots" in failure.message
