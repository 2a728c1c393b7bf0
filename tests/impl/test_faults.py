"""Fault switches are off by default (proven here), and each one changes behaviour at its named site."""

from __future__ import annotations

import pytest

from impl.engine import PoolConfig, ReferencePool, Refused
from impl.faults import FAULTS, NO_FAULTS, FaultSet, UnknownFault


def test_every_switch_is_off_by_default() -> None:
    pool = ReferencePool(PoolConfig())
    assert pool.faults == NO_FAULTS
    assert pool.req_to_token_pool.faults == NO_FAULTS
    assert not any(pool.faults.on(name) for name in FAULTS)


def test_every_registered_fault_names_its_site_and_origin() -> None:
    for fault in FAULTS.values():
        assert fault.site and fault.mechanism and fault.origin


def test_unknown_fault_names_are_refused() -> None:
    with pytest.raises(UnknownFault, match="no_such_fault"):
        FaultSet.of(["no_such_fault"])


def _released_then_reused(faults: FaultSet) -> ReferencePool:
    pool = ReferencePool(PoolConfig(), faults)
    pool.admit(0, 4)
    pool.finish(0)
    pool.reuse_released(0, stale_row=4, extend_len=1)
    return pool


def test_reuse_guard_refuses_a_stale_record_without_the_fault() -> None:
    with pytest.raises(Refused, match="reused row must carry allocated KV"):
        _released_then_reused(NO_FAULTS)


def test_legacy_reuse_guard_lets_the_stale_record_through() -> None:
    pool = _released_then_reused(FaultSet.of(["legacy_reuse_guard"]))
    assert pool.reqs[0].kv.req_pool_idx == 4
    assert 4 in pool.req_to_token_pool.free_slots  # the row it "reuses" is free


@pytest.mark.parametrize("path", ["finish", "pp_release"])
def test_raw_row_free_leaves_req_pool_idx_set(path: str) -> None:
    clean, faulty = ReferencePool(PoolConfig()), ReferencePool(PoolConfig(), FaultSet.of(["raw_row_free"]))
    for pool in (clean, faulty):
        pool.admit(0, 4)
        getattr(pool, path)(0)
    assert clean.reqs[0].kv.req_pool_idx is None
    assert faulty.reqs[0].kv.req_pool_idx == 4
    assert faulty.reqs[0].kv.kv_allocated_len == 0
    assert sorted(faulty.req_to_token_pool.free_slots) == sorted(clean.req_to_token_pool.free_slots)
