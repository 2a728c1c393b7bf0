"""The scheduler's own methods drive the target's flush, abort, finish and decode result pass: each test changes one
upstream method in-process (monkeypatched for the test only) and shows the target's outcome follows it, which a
re-enactment of the method in the adapter would not."""

from __future__ import annotations

import importlib.util
from typing import Any

import pytest

if importlib.util.find_spec("sglang") is None:
    pytest.skip(
        "needs upstream sglang, which the main venv deliberately lacks; run `make sglang-test`",
        allow_module_level=True,
    )

from impl.target import PoolConfig, Refused
from impl.upstream.target import SglangPool

CHUNK = PoolConfig(rows=4, tokens=16, width=16)
RADIX = PoolConfig(rows=4, tokens=16, width=16, cache="radix")


def _scheduler_class() -> Any:
    from sglang.srt.managers.scheduler import Scheduler

    return Scheduler


def _processor_class() -> Any:
    from sglang.srt.managers.scheduler_components.batch_result_processor import SchedulerBatchResultProcessor

    return SchedulerBatchResultProcessor


def _free(pool: SglangPool) -> int:
    snap = pool.snapshot()
    return len(snap.free_slots) + len(snap.release_slots)


def _decoding(config: PoolConfig = CHUNK) -> SglangPool:
    pool = SglangPool(config)
    pool.admit(0, 4, prompt_len=4)
    pool.decode(0)
    return pool


def test_flush_asks_upstreams_idle_check(monkeypatch: pytest.MonkeyPatch) -> None:
    pool = SglangPool(CHUNK)
    pool.flush()  # idle: upstream flushes
    monkeypatch.setattr(_scheduler_class(), "is_fully_idle", lambda self, **kwargs: False)
    with pytest.raises(Refused, match="not fully idle"):
        pool.flush()


def test_flush_is_refused_while_a_request_is_mid_prefill() -> None:
    pool = SglangPool(CHUNK)
    pool.admit(0, 2, prompt_len=6)
    with pytest.raises(Refused, match="not fully idle"):
        pool.flush()
    assert _free(pool) == CHUNK.tokens - 2


def test_an_abort_upstream_ignores_leaves_the_request_running(monkeypatch: pytest.MonkeyPatch) -> None:
    pool = _decoding()
    monkeypatch.setattr(_scheduler_class(), "abort_request", lambda self, recv_req: None)
    with pytest.raises(Refused, match="unfinished"):
        pool.abort(0)
    monkeypatch.undo()
    pool.abort(0)
    assert _free(pool) == CHUNK.tokens


def test_a_chunked_abort_runs_upstreams_pending_abort(monkeypatch: pytest.MonkeyPatch) -> None:
    pool = SglangPool(CHUNK)
    pool.admit(0, 2, prompt_len=6)
    monkeypatch.setattr(_scheduler_class(), "process_pending_chunked_abort", lambda self: None)
    with pytest.raises(Refused, match="chunked request"):
        pool.abort(0)


def test_the_finish_release_is_the_result_passs(monkeypatch: pytest.MonkeyPatch) -> None:
    pool = _decoding(RADIX)
    seen: list[str] = []
    original = _processor_class()._handle_finish_state_updated_req

    def spy(self: Any, req: Any, *args: Any) -> None:
        seen.append(req.rid)
        original(self, req, *args)

    monkeypatch.setattr(_processor_class(), "_handle_finish_state_updated_req", spy)
    pool.decode(0)  # the decode result pass checks every request of the batch
    pool.finish(0)
    assert seen == ["0#", "0#"]
    assert _free(pool) + pool.snapshot().evictable_size == RADIX.tokens


def test_a_finish_upstream_does_not_release_leaks_and_is_seen(monkeypatch: pytest.MonkeyPatch) -> None:
    pool = _decoding()
    monkeypatch.setattr(_processor_class(), "_handle_finish_state_updated_req", lambda self, *args: None)
    pool.finish(0)  # finished by upstream's check, never released by the stubbed pass
    assert _free(pool) < CHUNK.tokens
