"""The prefill round on the upstream target is upstream's own: `Scheduler.get_new_batch_prefill` and its
`PrefillAdder` pick from the waiting queue after the chunked request, and the lockstep follows what they ran."""

from __future__ import annotations

import importlib.util
from typing import Any

import pytest

if importlib.util.find_spec("sglang") is None:
    pytest.skip(
        "needs upstream sglang, which the main venv deliberately lacks; run `make sglang-test`",
        allow_module_level=True,
    )

from fuzz.lockstep import Lockstep
from fuzz.profiles import POOLS
from fuzz.upstream_verify import upstream_config
from properties.vocabulary import STATUS_DECODE, STATUS_PREFILL, STATUS_WAITING


def _lock(pool: str) -> Lockstep:
    return Lockstep(upstream_config({**POOLS[pool], "faults": []}))


def _queue(lock: Lockstep, *prompts: int) -> None:
    for rid, prompt in enumerate(prompts):
        assert lock.step("queue", {"req": rid, "prompt": prompt, "family": rid % 2, "kind": 0, "priority": 0}) is None


@pytest.mark.parametrize("pool", ["chunk-p1", "radix-p1"])
def test_upstreams_adder_chunks_the_first_request_and_continues_it_first(pool: str) -> None:
    lock = _lock(pool)
    _queue(lock, 20, 20)
    calls: list[Any] = []
    scheduler = lock.target.host.scheduler
    original = scheduler.get_new_batch_prefill
    scheduler.get_new_batch_prefill = lambda batch: calls.append(batch) or original(batch)
    assert lock.step("prefill_round", {}) is None
    first = lock.steps[-1].choice
    assert len(calls) == 1, "the round is upstream's get_new_batch_prefill"
    assert (first["size"], first["req0"], first["n0"]) == (1, 0, 16)  # its chunked prefill size: half a row
    assert scheduler.chunked_req is lock.target.reqs[0].req
    assert lock.model.state.rec_status.get(0) == STATUS_PREFILL
    assert lock.model.state.rec_status.get(1) == STATUS_WAITING
    assert lock.step("prefill_round", {}) is None
    second = lock.steps[-1].choice
    assert (second["req0"], second["n0"]) == (0, 4), "the chunked request's rest runs first"
    assert lock.model.state.rec_status.get(0) == STATUS_DECODE
    assert lock.step("drain", {"flush": 0}) is None


def test_a_round_with_nothing_to_admit_runs_nothing() -> None:
    lock = _lock("chunk-p1")
    _queue(lock, 20)
    scheduler = lock.target.host.scheduler
    scheduler.max_running_requests = 0  # upstream's own request budget: no request may run
    scheduler.max_prefill_bs = 0
    assert lock.step("prefill_round", {}) is None
    assert lock.steps[-1].choice["size"] == 0
    assert lock.model.state.rec_status.get(0) == STATUS_WAITING


def test_a_higher_priority_request_preempts_a_running_one_where_the_rows_ran_out() -> None:
    lock = _lock("roomy-p1")  # two rows on much memory
    _queue(lock, 3, 3)
    assert lock.step("prefill_round", {}) is None
    assert lock.steps[-1].choice["size"] == 2
    assert lock.step("decode_round", {}) is None
    assert lock.step("queue", {"req": 9, "prompt": 3, "family": 1, "kind": 0, "priority": 2}) is None
    assert lock.step("prefill_round", {}) is None
    choice = lock.steps[-1].choice
    assert (choice["preempted"], choice["size"], choice["req0"]) == (1, 1, 9)
    assert lock.model.state.rec_status.get(choice["pre0"]) == STATUS_WAITING
    assert "prefill_round: preempted one" in lock.corners
    assert lock.step("drain", {"flush": 0}) is None
