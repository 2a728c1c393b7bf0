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

from fuzz.lockstep import OPS as LOCKSTEP_OPS
from impl.engine import ReferencePool
from impl.faults import FaultSet
from impl.records import ReqStatus
from impl.target import PoolConfig, PoolSnapshot, Refused
from impl.upstream import compat
from impl.upstream.dialects import capabilities, paged_naive_path, supported_version
from impl.upstream.target import SglangPool
from properties.abstraction import observe
from properties.check import check_snapshot
from tests.upstream.known import findings_on

CONFIG = PoolConfig(rows=4, tokens=32, width=16)
VERSION = supported_version()
# The paged backends this sglang's allocator can run: without the kernel switch there is no naive path.
PAGED_BACKENDS = ["torch", "triton"] if paged_naive_path() else ["triton"]
# The triaged findings of this release (of the closest one at or before a source checkout's version).
FINDINGS_HERE = findings_on(VERSION)
PAGED = PoolConfig(rows=4, tokens=32, width=16, page_size=4, kernel_backend=PAGED_BACKENDS[0])
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
    run_both_on(reference, upstream, ops)
    return reference, upstream


def run_both_on(reference: ReferencePool, upstream: SglangPool, ops: list[Op]) -> None:
    for index, op in enumerate(ops):
        assert outcome(upstream, op) == outcome(reference, op), f"step {index}: outcomes differ"
        assert plain(upstream.snapshot()) == plain(reference.snapshot()), f"step {index}: snapshots differ"


def refused_unchanged(pool: Pool, op: Op) -> str:
    """Assert the op is refused and leaves the snapshot as it was; return the reason."""
    before = plain(pool.snapshot())
    with pytest.raises(Refused) as refusal:
        op(pool)
    assert plain(pool.snapshot()) == before
    return str(refusal.value)


def test_installed_sglang_is_one_the_adapter_speaks() -> None:
    assert SglangPool(CONFIG).version == supported_version() == capabilities().version


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
    if "stale-row-reuse" not in FINDINGS_HERE:
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

    if capabilities().prefix_indices:
        # The prefix comes from req.prefix_indices, which still name the slots: a fresh row continues the record.
        assert outcome(upstream, extend) == outcome(reference, extend)
        assert plain(upstream.snapshot()) == plain(reference.snapshot())
        return
    # 0.5.23 reads the prefix of a request without a row off the tree (prefix_device_indices asserts the path
    # to last_node covers prefix_len); the disabled tree has no path, so upstream refuses before it allocates.
    assert refused_unchanged(upstream, extend) == "upstream assert: ('0#', 0, 3)"  # the rid as the scheduler sees it
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
    if capabilities().prefix_indices:
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


# -- page size 4 ----------------------------------------------------------------------------------------------

LIFECYCLE: list[Op] = [
    lambda p: p.admit(0, 5),
    lambda p: p.extend(0, 3),
    lambda p: p.decode(0),
    lambda p: p.admit(1, 4),
    lambda p: p.decode(1),
    lambda p: p.finish(0),
    lambda p: p.admit(2, 6, prompt_len=9),
    lambda p: p.extend(2, 2),
    lambda p: p.pp_release(1),
    lambda p: p.decode(2),
    lambda p: p.finish(2),
]


@pytest.mark.parametrize("backend", PAGED_BACKENDS)
def test_paged_lifecycle_matches_the_reference(backend: str) -> None:
    _, upstream = run_both(LIFECYCLE, PoolConfig(rows=4, tokens=32, width=16, page_size=4, kernel_backend=backend))
    assert upstream.allocator.page_size == 4
    assert type(upstream.allocator).__name__ == "PagedTokenToKVPoolAllocator"


@pytest.mark.parametrize("backend", PAGED_BACKENDS)
def test_paged_snapshot_names_pages_and_row_slots_fill_them(backend: str) -> None:
    pool = SglangPool(PoolConfig(rows=4, tokens=32, width=16, page_size=4, kernel_backend=backend))
    pool.admit(0, 5)
    snap = pool.snapshot()
    # 8 pages of 4 (page 0 reserved): request 0 took two pages, its 5 slots fill the first and start the second.
    assert (snap.page_size, snap.num_pages, snap.free_slots.numel()) == (4, 8, 6)
    slots = snap.row_slots[0]
    assert [s // 4 for s in slots] == [slots[0] // 4] * 4 + [slots[4] // 4]
    assert [s % 4 for s in slots] == [0, 1, 2, 3, 0]
    assert not set(slots) & {page * 4 + k for page in snap.free_slots.tolist() for k in range(4)}


class _LaunchCounter:
    """Counts launches of a Triton kernel (`kernel[grid](...)`) and forwards them."""

    def __init__(self, kernel: object) -> None:
        self.kernel, self.launches = kernel, 0

    def __getitem__(self, grid: object) -> object:
        self.launches += 1
        return self.kernel[grid]  # type: ignore[index]


@pytest.mark.parametrize("backend", PAGED_BACKENDS)
def test_kernel_backend_picks_upstreams_kernels_or_naive_path(backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    pool = SglangPool(PoolConfig(rows=4, tokens=32, width=16, page_size=4, kernel_backend=backend))
    from sglang.srt.mem_cache.allocator import paged

    extend, decode = _LaunchCounter(paged.alloc_extend_kernel), _LaunchCounter(paged.alloc_decode_kernel)
    monkeypatch.setattr(paged, "alloc_extend_kernel", extend)
    monkeypatch.setattr(paged, "alloc_decode_kernel", decode)
    pool.admit(0, 3)
    pool.decode(0)
    pool.decode(0)
    launched = 1 if backend == "triton" else 0
    assert (extend.launches, decode.launches) == (launched, 2 * launched)
    assert pool.snapshot().records[0].allocated_len == 5


def test_naive_path_and_kernels_hand_out_the_same_slots() -> None:
    if not paged_naive_path():
        with pytest.raises(ValueError, match="always launches its Triton kernels"):
            SglangPool(PoolConfig(page_size=4, kernel_backend="torch"))
        return
    snaps = []
    for backend in ("torch", "triton"):
        pool = SglangPool(PoolConfig(rows=4, tokens=32, width=16, page_size=4, kernel_backend=backend))
        for op in LIFECYCLE[:8]:
            op(pool)
        snaps.append(plain(pool.snapshot()))
    assert snaps[0] == snaps[1]


def test_paged_capacity_counts_whole_pages_as_the_reference() -> None:
    # 8 pages: two 13-token requests take 4 pages each; a decode at position 16 needs a fifth page and is refused.
    run_both(
        [
            lambda p: p.admit(0, 13),
            lambda p: p.admit(1, 13),
            lambda p: p.decode(0),
            lambda p: p.decode(0),
            lambda p: p.decode(0),
            lambda p: p.decode(0),
            lambda p: p.admit(2, 1),
            lambda p: p.finish(1),
            lambda p: p.decode(0),
            lambda p: p.admit(2, 3),
        ],
        PAGED,
    )


# -- retract, abort, flush ------------------------------------------------------------------------------------


@pytest.mark.parametrize("config", [CONFIG, PAGED], ids=["page1", "page4"])
def test_retract_then_readmission_recomputes_the_outputs_as_the_reference(config: PoolConfig) -> None:
    _, upstream = run_both(
        [
            lambda p: p.admit(0, 6, prompt_len=6),
            lambda p: p.decode(0),
            lambda p: p.decode(0),
            lambda p: p.admit(1, 3),
            lambda p: p.retract(0),
            lambda p: p.retract(0),
            lambda p: p.decode(0),
            lambda p: p.extend(0, 5),
            lambda p: p.extend(0, 5),
            lambda p: p.decode(0),
        ],
        config,
    )
    view = upstream.snapshot().records[0]
    assert (view.status, view.prompt_len, view.committed_len) == ("decoding", 8, 9)
    assert upstream.reqs[0].req.retraction_count == 1


@pytest.mark.parametrize("config", [CONFIG, PAGED], ids=["page1", "page4"])
def test_abort_in_each_state_matches_the_reference(config: PoolConfig) -> None:
    _, upstream = run_both(
        [
            lambda p: p.admit(0, 4, prompt_len=9),  # mid-prefill: the pending chunked abort
            lambda p: p.admit(1, 3),  # decoding (open-ended prompt): finished with FINISH_ABORT
            lambda p: p.admit(2, 2),
            lambda p: p.retract(2),  # waiting: leaves the queue, nothing to release
            lambda p: p.abort(0),
            lambda p: p.abort(1),
            lambda p: p.abort(2),
            lambda p: p.abort(2),
        ],
        config,
    )
    for rid in range(2):  # each through a release upstream's abort path finishes with FINISH_ABORT
        assert type(upstream.reqs[rid].req.finished_reason).__name__ == "FINISH_ABORT"
    # abort_request pops a queued request (abort method 1) with no finish reason: it holds nothing to release
    assert upstream.reqs[2].req.finished_reason is None
    assert all(entry.status is ReqStatus.FINISHED for entry in upstream.reqs.values())
    snap = upstream.snapshot()
    assert snap.free_rows and len(snap.free_rows) == config.rows
    assert snap.free_slots.numel() * config.page_size == config.tokens


def test_flush_is_refused_while_busy_and_clears_an_idle_pool() -> None:
    reference, upstream = run_both([lambda p: p.admit(0, 4), lambda p: p.admit(1, 2), lambda p: p.finish(0)])
    assert "requests [1]" in refused_unchanged(upstream, lambda p: p.flush())
    run_both_on(reference, upstream, [lambda p: p.finish(1)])
    generation_before = upstream.snapshot().row_generation
    assert generation_before != [0] * (CONFIG.rows + 1)
    for pool in (reference, upstream):
        pool.flush()
    after, expected = plain(upstream.snapshot()), plain(reference.snapshot())
    # The reference keeps generations monotonic across a flush, as 0.5.23 does; 0.5.18 zeroes them (finding
    # clear-zeroes-generations).
    zeroed = "clear-zeroes-generations" in FINDINGS_HERE
    assert after.pop("row_generation") == ([0] * (CONFIG.rows + 1) if zeroed else generation_before)
    assert expected.pop("row_generation") == generation_before
    assert after == expected


def test_ops_lists_every_lockstep_call() -> None:
    """The target takes every op the model has (the differential is the harness's own step)."""
    assert LOCKSTEP_OPS - {"differential", "drain"} == SglangPool.OPS
    assert all(callable(getattr(SglangPool, op, None)) for op in SglangPool.OPS)


# -- the random differential at page sizes 1 and 4 ------------------------------------------------------------


def broken(snap: PoolSnapshot) -> set[str]:
    """The ids of the invariants a snapshot breaks."""
    return {inv_id for inv_id, _ in check_snapshot(snap)}


def run_observed(ops: list[Op], config: PoolConfig) -> None:
    """Run the ops on both pools: equal outcomes and observations each step, and every invariant checked on
    upstream's tensors, broken exactly where the reference breaks it (a forbidden `release_again` of a live
    request is accepted by both). Free-list order and so page identity are not compared: upstream frees a row's
    pages in row order (`free_kv_row` → `free_segments`), the reference in sorted order (`free` → `torch.unique`)."""
    reference, upstream = ReferencePool(config), SglangPool(config)
    for index, op in enumerate(ops):
        assert outcome(upstream, op) == outcome(reference, op), f"step {index}: outcomes differ"
        snap, expected = upstream.snapshot(), reference.snapshot()
        assert observe(snap).differences(observe(expected)) == [], f"step {index}"
        assert broken(snap) == broken(expected), f"step {index}"


def _any_op(kind: str, rid: int, length: int, prompt_len: int | None) -> Op:
    """Every op both pools treat alike (all but the raw row free and the hand-written release without a row)."""
    calls: dict[str, Op] = {
        "retract": lambda p: p.retract(rid),
        "abort": lambda p: p.abort(rid),
        "flush": lambda p: p.flush(),
    }
    return calls[kind] if kind in calls else _op(kind, rid, length, prompt_len)


# Three admissions first, so that most later steps find a request to act on.
PROMPT_LENS = st.none() | st.integers(1, 16)
ADMISSIONS = st.tuples(
    *(st.builds(_op, st.just("admit"), st.just(rid), st.integers(1, 9), PROMPT_LENS) for rid in range(3))
)
ALL_OPS = st.builds(
    lambda first, rest: [*first, *rest],
    ADMISSIONS,
    st.lists(
        st.builds(
            _any_op,
            st.sampled_from(
                [
                    "admit",
                    "extend",
                    "decode",
                    "decode",
                    "finish",
                    "pp_release",
                    "release_again",
                    "retract",
                    "abort",
                    "abort",
                    "flush",
                ]
            ),
            st.integers(0, 3),
            st.integers(1, 9),
            st.none() | st.integers(1, 16),
        ),
        min_size=4,
        max_size=24,
    ),
)


@pytest.mark.parametrize("config", [CONFIG, PAGED], ids=["page1", "page4"])
@settings(max_examples=80, deadline=None, derandomize=True)
@given(ops=ALL_OPS)
def test_random_steps_over_every_shared_op_match_the_reference(config: PoolConfig, ops: list[Op]) -> None:
    run_observed(ops, config)
