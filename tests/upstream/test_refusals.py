"""Upstream's own refusals: a batch the scheduler's budget does not screen reaches upstream's allocation paths,
whose out-of-memory RuntimeError must leave the pool as it was, as the reference's does; an allocator planted
in-process to take slots before it refuses is caught by the lockstep."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest
import torch

if importlib.util.find_spec("sglang") is None:
    pytest.skip(
        "needs upstream sglang, which the main venv deliberately lacks; run `make sglang-test`",
        allow_module_level=True,
    )

from fuzz.components.contract import AllocContract, contract_for
from fuzz.components.search import target_key
from fuzz.lockstep import Lockstep
from fuzz.replay import load_trace, replay
from impl.engine import ReferencePool
from impl.target import Cause, PoolConfig, PoolSnapshot, Refused
from impl.upstream.target import SglangPool
from properties.abstraction import observe

Entries = list[tuple[str, dict[str, int]]]
SHAPES = {
    "chunk-p1": PoolConfig(rows=4, tokens=8, width=8),
    "chunk-p4": PoolConfig(rows=4, tokens=8, width=8, page_size=4, kernel_backend="triton"),
    "radix-p1": PoolConfig(rows=4, tokens=8, width=8, cache="radix"),
}


def plain(snap: PoolSnapshot) -> dict[str, object]:
    return {name: value.tolist() if isinstance(value, torch.Tensor) else value for name, value in vars(snap).items()}


def admissions(first: int, count: int, n: int, prompt: int) -> Entries:
    return [("admit", {"req": first + i, "n": n, "prompt": prompt, "family": i, "kind": 0}) for i in range(count)]


def refused_as_the_reference(entries_before: list[Entries], entries: Entries, config: PoolConfig, cause: Cause) -> str:
    """Run `entries_before` on both targets, then `entries` unchecked: both refuse for `cause`, neither changes;
    upstream's reason."""
    pools: list[Any] = [ReferencePool(config), SglangPool(config)]
    reasons = []
    for pool in pools:
        for batch in entries_before:
            pool.batch(batch)
        before = plain(pool.snapshot())
        with pytest.raises(Refused) as refusal:
            pool.batch(entries, unchecked=True)
        assert plain(pool.snapshot()) == before, f"{type(pool).__name__}'s refusal changed the pool"
        assert refusal.value.cause is cause, (type(pool).__name__, refusal.value.cause, str(refusal.value))
        reasons.append(str(refusal.value))
    assert observe(pools[0].snapshot()) == observe(pools[1].snapshot())
    return reasons[1]


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_more_admissions_than_free_rows_meet_alloc_req_slots(shape: str) -> None:
    reason = refused_as_the_reference([admissions(0, 2, 1, 2)], admissions(2, 3, 1, 2), SHAPES[shape], Cause.ALLOC_ROWS)
    assert "alloc_req_slots runs out of memory" in reason


# Where a short paged allocation crashes the process (0.5.18's kernel runs before its capacity check), no batch
# short of slots is made: the component lockstep shows that crash in a subprocess.
SLOT_SHAPES = sorted(shape for shape, config in SHAPES.items() if not SglangPool(config).short_alloc_crashes)


def test_only_a_kernel_that_reads_past_the_free_list_bars_slot_shortfalls() -> None:
    crashing = {shape for shape in SHAPES if shape not in SLOT_SHAPES}
    contract = contract_for(target_key("sglang"), "allocator")
    assert isinstance(contract, AllocContract)
    kernel_first = not contract.kernel_reads_within_free_list
    assert crashing == ({"chunk-p4"} if kernel_first else set())


@pytest.mark.parametrize("shape", SLOT_SHAPES)
def test_decodes_short_of_slots_meet_the_decode_allocation(shape: str) -> None:
    config = SHAPES[shape]
    fill = admissions(0, 2, config.tokens // 2, config.tokens // 2)  # two whole prompts fill every slot
    reason = refused_as_the_reference(
        [fill], [("decode", {"req": 0}), ("decode", {"req": 1})], config, Cause.ALLOC_SLOTS
    )
    assert "out of memory" in reason.lower()


def test_an_allocator_that_takes_slots_before_it_refuses_is_caught() -> None:
    lock = Lockstep(dict(vars(SHAPES["chunk-p1"]), target="sglang", faults=[]))
    allocator = lock.target.allocator
    original = type(allocator).alloc

    def leaky(need_size: int) -> Any:  # planted: a short allocation keeps what it took, then refuses
        if need_size > allocator.available_size():
            allocator.free_pages = allocator.free_pages[1:]
            return None
        return original(allocator, need_size)

    allocator.alloc = leaky
    assert lock.step("batch", {"size": 1, "op0": 0, "req0": 0, "n0": 4, "prompt0": 4}) is None
    assert lock.step("batch", {"size": 1, "op0": 0, "req0": 1, "n0": 3, "prompt0": 3}) is None
    assert lock.model.state.n_free_slots == 1  # two decodes are one slot short
    decodes = {"size": 2, "op0": 2, "req0": 0, "op1": 2, "req1": 1, "unchecked": 1}
    failure = lock.step("batch", decodes)
    assert failure is not None and (failure.kind, failure.id) == ("refusal-changed-state", "batch"), failure


def test_a_refused_mixed_batch_puts_the_requests_own_tree_node_back() -> None:
    """Regression (found on 0.5.18 radix-p1): a refused batch of an admission and a continuation put a copy of
    the continuation's `last_node` back, so its next stash unlocked the copy and the tree's counters drifted."""
    trace = load_trace(Path(__file__).with_name("refused_batch_0518.json"), None)
    assert replay(trace).failure is None


def test_a_refused_rematch_on_the_node_already_held_gives_its_lock_back() -> None:
    """Regression (found on 0.5.18 radix-p4): a refused extend whose rematch ended on the node the request already
    held looked, by the handle, as if it took no lock, so the lock leaked (tree-lock-holders)."""
    trace = load_trace(Path(__file__).with_name("refused_rematch_lock_0518.json"), None)
    assert replay(trace).failure is None
