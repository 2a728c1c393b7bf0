"""A batch upstream refuses for memory after the glue matched and locked a re-admitted request's prefix gives
that lock back, on every sglang: the trace that showed the leak on 0.5.19 (a rematch ending on the same node id,
so the lock handle looked unchanged) replays clean. Runs in a sglang venv (`make sglang-test`)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

if importlib.util.find_spec("sglang") is None:
    pytest.skip("needs upstream sglang; run `make sglang-test`", allow_module_level=True)

from fuzz.replay import replay
from fuzz.upstream_verify import upstream_trace
from model.trace import load

TRACE = Path(__file__).resolve().parent / "traces" / "refused-rematch-gives-its-lock-back.json"


def test_the_refused_rematch_leaves_no_lock_behind() -> None:
    trace = upstream_trace(load(TRACE))
    assert any(step.args.get("unchecked") for step in trace.steps), "the trace lost its refused unchecked batch"
    assert replay(trace).failure is None
