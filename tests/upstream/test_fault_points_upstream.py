"""Fault points on the upstream target: a planned failure of upstream's own allocator or row pool, on the
objects of one pool only, reaches upstream's own handling (its fail-loud RuntimeError, its aux rollback), and the
lockstep holds what upstream leaves to the contract of a failure: the known findings reproduce as triaged, and a
failure upstream does roll back passes."""

from __future__ import annotations

import importlib.util

import pytest

if importlib.util.find_spec("sglang") is None:
    pytest.skip(
        "needs upstream sglang, which the main venv deliberately lacks; run `make sglang-test`",
        allow_module_level=True,
    )

from fuzz.fault_plans import plan_args
from fuzz.lockstep import Lockstep
from fuzz.profiles import POOLS
from fuzz.upstream_verify import upstream_config
from impl.fault_points import FaultyMethod
from impl.upstream.dialects import supported_version

ADMIT = {"req": 0, "prompt": 4, "n": 4, "family": 0, "kind": 0}
HAS_AUX = supported_version() != "0.5.18"  # ReqToTokenPool.alloc_aux_to_lengths, 0.5.19 on


def _lock(pool: str) -> Lockstep:
    return Lockstep(upstream_config({**POOLS[pool], "faults": []}))


def test_the_points_wrap_this_pools_objects_only() -> None:
    lock = _lock("chunk-p1")
    allocator = lock.target.allocator  # type: ignore[attr-defined]
    assert isinstance(allocator.alloc, FaultyMethod)
    assert not isinstance(type(allocator).__dict__.get("alloc"), FaultyMethod)  # the class is untouched
    expected = {"row_alloc", "kv_alloc"} | ({"aux_alloc"} if HAS_AUX else set())
    assert lock.target.fault_points.installed == expected


def test_a_failed_row_allocation_is_upstreams_refusal_and_changes_nothing() -> None:
    lock = _lock("radix-p4")
    assert lock.step("admit", {**ADMIT, **plan_args("row_alloc")}) is None
    assert "fault row_alloc: refused" in lock.corners
    assert lock.step("admit", ADMIT) is None


def test_a_failed_slot_allocation_keeps_the_rows_upstream_took() -> None:
    failure = _lock("chunk-p1").step("admit", {**ADMIT, **plan_args("kv_alloc")})
    assert failure is not None
    assert (failure.kind, failure.id) == ("fault-not-rolled-back", "kv_alloc: leaked rows")  # failed-alloc-keeps-rows


@pytest.mark.skipif(not HAS_AUX, reason="0.5.18 has no aux allocation")
def test_the_aux_rollback_gives_the_slots_of_a_fresh_page_back() -> None:
    failure = _lock("chunk-p1").step("admit", {**ADMIT, **plan_args("aux_alloc")})
    assert failure is not None and failure.id == "aux_alloc: leaked rows"  # the rows kept, the slots back


@pytest.mark.skipif(not HAS_AUX, reason="0.5.18 has no aux allocation")
def test_the_aux_rollback_of_a_decode_frees_the_page_the_request_holds() -> None:
    lock = _lock("chunk-p4")
    assert lock.step("admit", {**ADMIT, "prompt": 5, "n": 5}) is None
    failure = lock.step("decode", {"req": 0, **plan_args("aux_alloc")})
    assert failure is not None and failure.id == "aux_alloc: freed slots"  # aux-rollback-frees-held-page


def test_a_clone_replays_a_planned_failure() -> None:
    lock = _lock("radix-p1")
    assert lock.step("admit", {**ADMIT, **plan_args("row_alloc")}) is None  # refused, nothing changed
    assert lock.step("admit", ADMIT) is None
    assert lock.step("differential", {"req": 0}) is None  # each path's clone took the refused call, refused again
    assert lock.corners  # the paths ran
