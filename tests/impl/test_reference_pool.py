"""The reference pool against the record mutations SGLang makes (§1.1), step by step, ending idle-clean."""

from __future__ import annotations

import pytest

from impl.engine import ReferencePool
from impl.records import ReqStatus
from impl.target import PoolConfig, Refused
from properties.check import check_snapshot


def _pool(**sizes: int) -> ReferencePool:
    return ReferencePool(PoolConfig(**sizes))


def _lengths(pool: ReferencePool, rid: int) -> tuple[int | None, int, int, int]:
    kv = pool.reqs[rid].kv
    return kv.req_pool_idx, kv.cache_protected_len, kv.kv_committed_len, kv.kv_allocated_len


def assert_idle_clean(pool: ReferencePool) -> None:
    snap = pool.snapshot()
    assert check_snapshot(snap) == []
    assert sorted(snap.free_rows) == list(range(1, snap.rows_total + 1))
    assert snap.free_slots.numel() == snap.tokens_total
    assert sorted(snap.free_slots.tolist()) == list(range(1, snap.tokens_total + 1))


def test_chunked_prefill_keeps_its_row_then_decodes_and_finishes() -> None:
    pool = _pool()
    row = pool.admit(0, 5)
    assert _lengths(pool, 0) == (row, 0, 5, 5)
    assert pool.reqs[0].prefix_indices.numel() == 5  # the chunk cache stashed the first chunk
    assert pool.extend(0, 3) == row  # next chunk reuses the row (kv_allocated_len > 0)
    assert _lengths(pool, 0) == (row, 0, 8, 8)
    pool.decode(0)
    assert _lengths(pool, 0) == (row, 0, 9, 9)
    assert pool.reqs[0].status is ReqStatus.DECODING
    pool.finish(0)
    # Release zeroes only the allocated length; committed stays stale, as upstream.
    assert _lengths(pool, 0) == (None, 0, 9, 0)
    assert_idle_clean(pool)


def test_row_slots_hold_the_slots_the_request_was_given() -> None:
    pool = _pool()
    pool.admit(0, 4)
    pool.extend(0, 2)
    pool.decode(0)
    snap = pool.snapshot()
    slots = snap.row_slots[0]
    assert len(slots) == 7 and len(set(slots)) == 7
    assert not set(slots) & set(snap.free_slots.tolist())


def test_rows_are_handed_out_lifo() -> None:
    pool = _pool(rows=3)
    assert [pool.admit(r, 1) for r in range(3)] == [3, 2, 1]
    pool.finish(1)
    assert pool.admit(7, 1) == 2


@pytest.mark.parametrize(
    ("setup", "call"),
    [
        (lambda p: p.admit(0, 1), lambda p: p.admit(0, 1)),
        (lambda p: None, lambda p: p.admit(0, 33)),
        (lambda p: [p.admit(r, 1) for r in range(4)], lambda p: p.admit(9, 1)),
        (lambda p: (p.admit(0, 30), p.admit(1, 30)), lambda p: p.admit(2, 5)),
        (lambda p: (p.admit(0, 2), p.decode(0)), lambda p: p.extend(0, 1)),
        (lambda p: (p.admit(0, 2), p.finish(0)), lambda p: p.finish(0)),
        (lambda p: (p.admit(0, 2), p.finish(0)), lambda p: p.release_again(0)),
        (lambda p: (p.admit(0, 2), p.finish(0)), lambda p: p.free_row(0)),
        (lambda p: (p.admit(0, 2), p.finish(0)), lambda p: p.reuse_released(0, 4, 1)),
        (lambda p: (p.admit(0, 32),), lambda p: p.decode(0)),
    ],
    ids=[
        "admit-twice",
        "past-width",
        "no-row",
        "no-slots",
        "decode-then-extend",
        "finish-twice",
        "release-twice",
        "free-row-twice",
        "reuse-released",
        "decode-past-width",
    ],
)
def test_forbidden_calls_are_refused_and_change_nothing(setup, call) -> None:  # type: ignore[no-untyped-def]
    pool = _pool()
    setup(pool)
    before = pool.snapshot()
    with pytest.raises(Refused):
        call(pool)
    after = pool.snapshot()
    assert after.records == before.records
    assert after.free_rows == before.free_rows
    assert after.free_slots.tolist() == before.free_slots.tolist()


def test_released_record_is_readmitted_on_a_fresh_row_from_position_zero() -> None:
    pool = _pool()
    pool.admit(0, 6)
    pool.pp_release(0)
    row = pool.extend(0, 2)
    assert _lengths(pool, 0) == (row, 0, 2, 2)
    pool.finish(0)
    assert_idle_clean(pool)


def test_manual_pp_release_matches_release_kv_cache_here() -> None:
    manual, unified = _pool(), _pool()
    for pool in (manual, unified):
        pool.admit(0, 7)
        pool.admit(1, 3)
    manual.pp_release_manual(0)
    unified.pp_release(0)
    a, b = manual.snapshot(), unified.snapshot()
    assert a.records == b.records
    assert sorted(a.free_slots.tolist()) == sorted(b.free_slots.tolist())
    assert a.free_rows == b.free_rows


def test_pool_config_rejects_what_it_cannot_build() -> None:
    bad_configs = (
        {"rows": 0},
        {"tokens": 1 << 30},
        {"page_size": 3},
        {"page_size": 128},
        {"page_size": 4, "tokens": 66},
        {"cache": "lru"},
        {"device": "tpu"},
        {"row_pool": "beam"},
        {"pre_alloc_size": 2},
        {"row_pool": "decode", "pre_alloc_size": -1},
        {"kernel_backend": "cuda-graph"},
    )
    for bad in bad_configs:
        with pytest.raises(ValueError):
            PoolConfig(**bad)  # type: ignore[arg-type]
