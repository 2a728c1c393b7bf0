"""The drain on the upstream target: every request ends through the scheduler's own methods and the pool comes back
to full; an upstream `flush_cache` that will not flush a drained pool (changed in-process, for the test only) is a
finding at the drain, which a drain re-enacted in the adapter would not show."""

from __future__ import annotations

import importlib.util
from typing import Any

import pytest

if importlib.util.find_spec("sglang") is None:
    pytest.skip(
        "needs upstream sglang, which the main venv deliberately lacks; run `make sglang-test`",
        allow_module_level=True,
    )

from fuzz.drain import DRAIN, drain_args, undrained
from fuzz.lockstep import Lockstep
from fuzz.profiles import POOLS
from fuzz.targets import retarget
from fuzz.walker.walk import Walker
from impl.upstream.dialects import supported_version
from tests.upstream.known import excluded_on, findings_on

VERSION = supported_version()
# A release whose flush is a known finding's trigger (clear-zeroes-generations) drains without it, as its runs do.
EXCLUDED = excluded_on(VERSION)


def _busy(pool: str) -> Lockstep:
    """A decoding request, one mid-prefill, one retracted, on the upstream target."""
    lock = Lockstep(retarget({**POOLS[pool], "faults": []}, "sglang"))
    for rid, n, prompt, family in ((0, 8, 8, 0), (1, 4, 12, 1), (2, 8, 8, 2)):
        assert lock.step("admit", {"req": rid, "n": n, "prompt": prompt, "family": family}) is None
    for rid in (0, 2):
        assert lock.step("decode", {"req": rid}) is None
    assert lock.step("retract", {"req": 2}) is None
    return lock


@pytest.mark.parametrize("pool", ["radix-p1", "chunk-p4"])
def test_the_upstream_pool_drains_back_to_full(pool: str) -> None:
    lock = _busy(pool)
    assert undrained(lock.model, lock.snap, lock.fresh)
    args = drain_args(EXCLUDED)
    assert lock.step(DRAIN, args) is None
    assert undrained(lock.model, lock.snap, lock.fresh, flushed=args.get("flush", 1) == 1) == []


def test_a_flushed_drain_shows_this_release_s_flush_finding_or_none() -> None:
    """Where flush is a known finding's trigger the flushed drain shows the finding (so the unflushed drain above
    hides nothing else); elsewhere it passes."""
    failure = _busy("radix-p1").step(DRAIN, {})
    if "clear-zeroes-generations" in findings_on(VERSION):
        assert failure is not None and (failure.kind, failure.id) == ("mismatch", "abstraction")
        assert "row generations" in failure.message
    else:
        assert failure is None


def test_a_flush_cache_that_will_not_flush_is_a_drain_finding(monkeypatch: pytest.MonkeyPatch) -> None:
    from sglang.srt.managers.scheduler import Scheduler

    def never_idle(self: Any) -> bool:
        return False

    lock = _busy("radix-p1")
    monkeypatch.setattr(Scheduler, "flush_cache", never_idle)
    failure = lock.step(DRAIN, {})
    assert failure is not None and failure.kind == "refused-legal"
    assert failure.message.startswith("while draining, flush:")


def test_upstream_walks_end_drained() -> None:
    result = Walker(retarget({**POOLS["radix-p4"], "faults": []}, "sglang"), 5, exclude=EXCLUDED).run(steps=300)
    assert result.failure is None and result.ops[DRAIN] == result.walks
