"""The upstream target on upstream SGLang's own classes: it answers like the reference pool, step for step,
except where the installed version's code differs (each such difference is pinned here by name).

Runs only in a sglang venv (`make sglang-test`); the main venv deliberately lacks sglang.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable

import pytest
import torch

if importlib.util.find_spec("sglang") is None:
    pytest.skip(
        "needs upstream sglang, which the main venv deliberately lacks; run `make sglang-test`",
        allow_module_level=True,
    )

from hypothesis import given, settings
from hypothesis import strategies as st

from impl.engine import PoolConfig, PoolSnapshot, ReferencePool, Refused
from impl.faults import FaultSet
from impl.upstream import compat
from impl.upstream.dialects import SUPPORTED_VERSIONS, installed_version
from impl.upstream.target import SglangPool

CONFIG = PoolConfig(rows=4, tokens=32, width=16)
Pool = ReferencePool | SglangPool
Op = Callable[[Pool], object]


def plain(snap: PoolSnapshot) -> dict[str, object]:
    """Every field of a snapshot as plain values, tensors as lists."""
    return {name: value.tolist() if isinstance(value, torch.Tensor) else value for name, value in vars(snap).items()}


def outcome(pool: Pool, op: Op) -> object:
    """The op's result, or the `Refused` type when the pool declined it."""
    try:
        return op(pool)
    except Refused:
        return Refused


def run_both(ops: list[Op], config: PoolConfig = CONFIG) -> tuple[ReferencePool, SglangPool]:
    """Run the ops on the reference and the upstream target, asserting equal outcomes and snapshots each step."""
    reference, upstream = ReferencePool(config), SglangPool(config)
    for index, op in enumerate(ops):
        assert outcome(upstream, op) == outcome(reference, op), f"step {index}: outcomes differ"
        assert plain(upstream.snapshot()) == plain(reference.snapshot()), f"step {index}: snapshots differ"
    return reference, upstream


def refused_unchanged(pool: Pool, op: Op) -> str:
    """Assert the op is refused and leaves the snapshot as it was; return the reason."""
    before = plain(pool.snapshot())
    with pytest.raises(Refused) as refusal:
        op(pool)
    assert plain(pool.snapshot()) == before
    return str(refusal.value)


def test_installed_version_is_one_the_adapter_speaks() -> None:
    assert installed_version() in SUPPORTED_VERSIONS
    assert SglangPool(CONFIG).version == installed_version()


def test_torchvision_is_the_stub_and_transformers_saw_none() -> None:
    SglangPool(CONFIG)
    from transformers.utils import import_utils

    assert compat.torchvision_stubbed()
    assert import_utils.is_torchvision_available() is False
    with pytest.raises(RuntimeError, match="cannot decode images"):
        compat.decode_jpeg(b"")


def test_faults_and_devices_it_cannot_honour_are_rejected() -> None:
    with pytest.raises(ValueError, match="faults are not supported"):
        SglangPool(CONFIG, FaultSet.of(["legacy_reuse_guard"]))
    with pytest.raises(ValueError, match="cpu"):
        SglangPool(PoolConfig(device="cuda"))


def test_fresh_pool_matches_the_reference() -> None:
    run_both([])


@pytest.mark.parametrize("need_sort", [False, True])
def test_chunked_prefill_decode_and_finish_match_the_reference(need_sort: bool) -> None:
    run_both(
        [
            lambda p: p.admit(0, 5),
            lambda p: p.extend(0, 3),
            lambda p: p.decode(0),
            lambda p: p.admit(1, 4),
            lambda p: p.decode(1),
            lambda p: p.finish(0),
            lambda p: p.admit(2, 6),
            lambda p: p.pp_release(1),
            lambda p: p.decode(2),
            lambda p: p.finish(2),
        ],
        PoolConfig(rows=4, tokens=32, width=16, need_sort=need_sort),
    )


def test_manual_pp_release_matches_release_kv_cache_under_the_pr_preconditions() -> None:
    run_both([lambda p: p.admit(0, 4), lambda p: p.extend(0, 2), lambda p: p.pp_release_manual(0)])


def test_capacity_and_width_refusals_match_the_reference() -> None:
    run_both(
        [
            lambda p: p.admit(0, 0),
            lambda p: p.admit(0, 17),
            lambda p: p.admit(0, 16),
            lambda p: p.decode(0),
            lambda p: p.admit(1, 15),
            lambda p: p.admit(2, 1),
            lambda p: p.admit(3, 1),
            lambda p: p.admit(4, 1),
        ]
    )


def test_negative_steps_after_release_are_refused_and_change_nothing() -> None:
    pool = SglangPool(CONFIG)
    pool.admit(0, 4)
    pool.finish(0)
    assert "mamba" in refused_unchanged(pool, lambda p: p.release_again(0)).lower()
    assert "req_pool_idx" in refused_unchanged(pool, lambda p: p.free_row(0))
    refused_unchanged(pool, lambda p: p.decode(0))
    refused_unchanged(pool, lambda p: p.finish(0))


def test_raw_row_free_then_release_is_refused_by_the_entry_assert() -> None:
    _, upstream = run_both([lambda p: p.admit(0, 4), lambda p: p.free_row(0), lambda p: p.finish(0)])
    view = upstream.snapshot().records[0]
    assert (view.row, view.allocated_len) == (None, 4)


def test_stale_row_reuse_follows_the_versions_guard() -> None:
    pool = SglangPool(CONFIG)
    pool.admit(0, 4)
    pool.finish(0)
    pool.admit(1, 3)
    row_of_1 = pool.snapshot().records[1].row
    assert row_of_1 is not None
    if pool.version == "0.5.23":
        # The record-based guard (#37167): a released record carries no allocated KV.
        assert "a reused row must carry allocated KV" in refused_unchanged(
            pool, lambda p: p.reuse_released(0, row_of_1, 2)
        )
        return
    # 0.5.18's guard reads kv_committed_len, which release leaves stale: two requests end up on one row.
    assert pool.reuse_released(0, row_of_1, 2) == row_of_1
    records = pool.snapshot().records
    assert records[0].row == records[1].row == row_of_1


def test_manual_pp_release_after_a_decode_frees_up_to_the_extend_end_as_the_reference() -> None:
    # Both free row[:extend_range.end]: the decoded slot is neither free nor owned afterwards.
    _, upstream = run_both([lambda p: p.admit(0, 4), lambda p: p.decode(0), lambda p: p.pp_release_manual(0)])
    assert upstream.snapshot().free_slots.numel() == CONFIG.tokens - 1


def test_manual_pp_release_without_a_row_is_a_no_op_upstream() -> None:
    # Upstream's inline release is guarded by `if req_pool_idx is not None`; the reference refuses the call.
    ops: list[Op] = [lambda p: p.admit(0, 4), lambda p: p.release_again(0)]
    reference, upstream = run_both(ops)
    with pytest.raises(Refused, match="must have req_pool_idx"):
        reference.pp_release_manual(0)
    before = plain(upstream.snapshot())
    upstream.pp_release_manual(0)
    after = plain(upstream.snapshot())
    assert upstream.snapshot().records[0].status == "finished"
    del before["records"], after["records"]
    assert after == before


def test_extend_after_a_raw_row_free_follows_the_versions_prefix_source() -> None:
    ops: list[Op] = [lambda p: p.admit(0, 3), lambda p: p.free_row(0)]
    reference, upstream = run_both(ops)

    def extend(p: Pool) -> object:
        return p.extend(0, 2)

    if upstream.version == "0.5.18":
        # The prefix comes from req.prefix_indices, which still name the slots: a fresh row continues the record.
        assert outcome(upstream, extend) == outcome(reference, extend)
        assert plain(upstream.snapshot()) == plain(reference.snapshot())
        return
    # 0.5.23 reads the prefix of a request without a row off the tree (prefix_device_indices asserts the path
    # to last_node covers prefix_len); the disabled tree has no path, so upstream refuses before it allocates.
    assert refused_unchanged(upstream, extend) == "upstream assert: ('0', 0, 3)"
    assert outcome(reference, extend) != Refused


def test_stale_row_after_a_raw_free_takes_its_prefix_per_version() -> None:
    # A raw free leaves A > 0, so the record-based guard lets the stale row through in every version.
    ops: list[Op] = [lambda p: p.admit(0, 3), lambda p: p.free_row(0), lambda p: p.admit(1, 4)]
    reference, upstream = run_both(ops)
    before = upstream.snapshot()
    row_of_1, slots_of_1 = before.records[1].row, before.row_slots[1]
    assert row_of_1 is not None
    for pool in (reference, upstream):
        assert pool.reuse_released(0, row_of_1, 2) == row_of_1
    slots, expected = upstream.snapshot().row_slots[0], reference.snapshot().row_slots[0]
    if upstream.version == "0.5.18":
        assert slots == expected  # both write req.prefix_indices, the record's old slots, over request 1's
        return
    # 0.5.23 takes a row holder's prefix from the row itself: request 0 adopts request 1's first slots.
    assert slots[:3] == slots_of_1[:3] != expected[:3]


def _op(kind: str, rid: int, length: int, prompt_len: int | None) -> Op:
    """One legal-or-forbidden step among those both pools treat alike in every supported version."""
    calls: dict[str, Op] = {
        "admit": lambda p: p.admit(rid, length, prompt_len=prompt_len, family=rid % 2),
        "extend": lambda p: p.extend(rid, length),
        "decode": lambda p: p.decode(rid),
        "finish": lambda p: p.finish(rid),
        "pp_release": lambda p: p.pp_release(rid),
        "release_again": lambda p: p.release_again(rid),
    }
    return calls[kind]


OPS = st.lists(
    st.builds(
        _op,
        st.sampled_from(["admit", "extend", "decode", "finish", "pp_release", "release_again"]),
        st.integers(0, 3),
        st.integers(1, 9),
        st.none() | st.integers(1, 16),
    ),
    max_size=16,
)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(OPS)
def test_random_steps_match_the_reference(ops: list[Op]) -> None:
    run_both(ops)
