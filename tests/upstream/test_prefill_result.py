"""The prefill result pass on the upstream target is upstream's own: `process_batch_result_prefill` after every
prefill batch outside the harness's open free group, a middle chunk counted as the scheduler counts its chunked
request and stashed by `Scheduler.stash_chunked_request`, and the first sampled token taken back off."""

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


def _lock(pool: str = "chunk-p1") -> Lockstep:
    return Lockstep(upstream_config({**POOLS[pool], "faults": []}))


def _recording(monkeypatch: pytest.MonkeyPatch, obj: Any, name: str) -> list[tuple[Any, ...]]:
    """Record each call of `obj.name` on this object (the method still runs), patched on its class where the
    instance is frozen (the result processor is a frozen dataclass)."""
    calls: list[tuple[Any, ...]] = []
    method = getattr(type(obj), name)

    def call(self: Any, *args: Any) -> Any:
        if self is obj:
            calls.append(args)
        return method(self, *args)

    monkeypatch.setattr(type(obj), name, call)
    return calls


def test_a_prefill_batch_runs_upstreams_result_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    lock = _lock()
    host = lock.target.host  # type: ignore[attr-defined]
    passes = _recording(monkeypatch, host.processor, "process_batch_result_prefill")
    assert lock.step("admit", {"req": 0, "prompt": 4, "n": 4, "family": 0, "kind": 0}) is None
    ((batch, result),) = passes
    req = lock.target.reqs[0].req  # type: ignore[attr-defined]
    assert batch.reqs == [req] and result.next_token_ids.tolist() and not req.finished()
    assert len(req.output_ids) == 0  # the pass's first token taken back off: the next decode appends it
    assert req.inflight_middle_chunks == 0
    assert lock.step("decode", {"req": 0}) is None and len(req.output_ids) == 1


def test_a_middle_chunk_is_counted_down_by_the_pass_and_stashed_by_the_scheduler(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    lock = _lock()
    host = lock.target.host  # type: ignore[attr-defined]
    stashes = _recording(monkeypatch, host.scheduler, "stash_chunked_request")
    assert lock.step("admit", {"req": 0, "prompt": 8, "n": 4, "family": 0, "kind": 0}) is None
    req = lock.target.reqs[0].req  # type: ignore[attr-defined]
    assert stashes == [(req,)] and req.inflight_middle_chunks == 0
    assert lock.target.dialect.prefix_len(req) == 4  # type: ignore[attr-defined]  # the stash: the next chunk reads it
    assert lock.step("extend", {"req": 0, "n": 4}) is None
    assert stashes == [(req,)] and len(req.output_ids) == 0  # the last chunk is the pass's, not a stash


def test_inside_the_harness_group_the_pass_does_not_run(monkeypatch: pytest.MonkeyPatch) -> None:
    lock = _lock()
    host = lock.target.host  # type: ignore[attr-defined]
    passes = _recording(monkeypatch, host.processor, "process_batch_result_prefill")
    assert lock.step("group_begin", {}) is None
    assert lock.step("admit", {"req": 0, "prompt": 4, "n": 4, "family": 0, "kind": 0}) is None
    assert passes == []  # the pass would open a group inside the open one; the entry's stash stands in
    assert lock.step("group_end", {}) is None
