"""Speculative (EAGLE) decoding on the upstream target: the over-allocation and the commit agree with the
reference on both caches and page sizes, every release path after them returns every slot (inside the EAGLE
config; outside it upstream's own assert fires), and a leak of the over-allocated tail planted in upstream's code
(in-process) is found with a short counterexample.

Runs only in a sglang venv (`make sglang-test`).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

if importlib.util.find_spec("sglang") is None:
    pytest.skip(
        "needs upstream sglang, which the main venv deliberately lacks; run `make sglang-test`",
        allow_module_level=True,
    )

from hypothesis import given, settings
from hypothesis import strategies as st

from fuzz.profiles import POOLS, PROFILES
from fuzz.run import run
from fuzz.targets import retarget
from fuzz.upstream_findings import ROOT, fuzz_excluded, load_findings
from impl.engine import ReferencePool
from impl.target import PoolConfig, Refused
from impl.upstream import spec
from impl.upstream.dialects import load_dialect, paged_naive_path, supported_version
from impl.upstream.target import SglangPool
from model.trace import load
from properties.abstraction import observe
from properties.check import check_snapshot
from tests.upstream.known import offload_release_crashes_on

VERSION = supported_version()
BACKEND = "torch" if paged_naive_path() else "triton"  # without the kernel switch there is no naive path
QUICK = replace(PROFILES["ci"], max_examples=60)
Op = Callable[[Any], object]


def speculative(page_size: int, cache: str) -> PoolConfig:
    backend = BACKEND if page_size > 1 else "torch"
    return PoolConfig(
        rows=4, tokens=64, width=32, page_size=page_size, cache=cache, speculative=True,
        kernel_backend=backend, evict_on_demand=False,
    )  # fmt: skip


SHAPES = [speculative(ps, cache) for cache in ("chunk", "radix") for ps in (1, 4)]
SHAPE_IDS = [f"{c.cache}-p{c.page_size}" for c in SHAPES]


def outcome(pool: Any, op: Op) -> object:
    try:
        return op(pool)
    except Refused:
        return Refused


def run_observed(config: PoolConfig, ops: list[Op]) -> SglangPool:
    """The ops on the reference and on upstream: equal outcomes and observations each step, and the invariants
    upstream's tensors break are those the reference's break."""
    reference, upstream = ReferencePool(config), SglangPool(config)
    for index, op in enumerate(ops):
        assert outcome(upstream, op) == outcome(reference, op), f"step {index}: outcomes differ"
        snap, expected = upstream.snapshot(), reference.snapshot()
        assert observe(snap).differences(observe(expected)) == [], f"step {index}"
        assert {i for i, _ in check_snapshot(snap)} == {i for i, _ in check_snapshot(expected)}, f"step {index}"
    return upstream


def _lens(pool: SglangPool, rid: int) -> tuple[int, int]:
    view = pool.snapshot().records[rid]
    return view.committed_len, view.allocated_len


@pytest.mark.parametrize("config", SHAPES, ids=SHAPE_IDS)
@pytest.mark.parametrize("reserve", [1, 3, 4, 8])
def test_prepare_takes_the_allocated_length_to_the_aligned_reserve(config: PoolConfig, reserve: int) -> None:
    """Odd reserves through `alloc_for_spec_decode`, even ones through `eagle_prepare_for_decode`."""
    ops: list[Op] = [lambda p: p.admit(0, 5, prompt_len=5), lambda p: p.decode(0), lambda p: p.spec_prepare(0, reserve)]
    upstream = run_observed(config, ops)
    ps = config.page_size
    assert _lens(upstream, 0) == (6, max(6, -(-(6 + reserve) // ps) * ps))


@pytest.mark.parametrize("config", SHAPES, ids=SHAPE_IDS)
@pytest.mark.parametrize("release", ["finish", "pp_release", "retract", "abort", "offload_release"])
def test_every_release_after_a_partial_commit_returns_every_slot(config: PoolConfig, release: str) -> None:
    """The offload manager releases PD-decode requests (they protect no prefix), so its request is pre-allocated."""

    def first(p: Any) -> object:
        return p.pd_prealloc(0, 3) if release == "offload_release" else p.admit(0, 3, prompt_len=3)

    ops: list[Op] = [
        first,
        lambda p: p.spec_prepare(0, 8),
        lambda p: p.spec_commit(0, 2),
        lambda p: p.spec_prepare(0, 3),
        lambda p: getattr(p, release)(0),
        lambda p: p.evict(64),
    ]
    if release == "offload_release" and offload_release_crashes_on(VERSION, config.cache):
        with pytest.raises(AttributeError, match="protected_size_"):  # the known offload-release-unified-crash
            run_observed(config, ops)
        return
    upstream = run_observed(config, ops)
    assert upstream.allocator.available_size() == config.tokens


@pytest.mark.parametrize("config", SHAPES[:2], ids=SHAPE_IDS[:2])
def test_commit_and_prepare_refuse_what_the_reference_refuses(config: PoolConfig) -> None:
    ops: list[Op] = [
        lambda p: p.admit(0, 4, prompt_len=8),
        lambda p: p.spec_prepare(0, 2),  # mid-prefill
        lambda p: p.extend(0, 4),
        lambda p: p.spec_commit(0, 1),  # nothing reserved
        lambda p: p.spec_prepare(0, 0),
        lambda p: p.spec_prepare(0, 30),  # past the row width
        lambda p: p.spec_prepare(0, 4),
        lambda p: p.spec_commit(0, 5),  # more than reserved
        lambda p: p.decode(0),  # draft slots pending
        lambda p: p.spec_commit(0, 4),
        lambda p: p.decode(0),
    ]
    upstream = run_observed(config, ops)
    assert _lens(upstream, 0) == (13, 13)


def test_a_pool_without_speculative_decoding_refuses_the_prepare() -> None:
    pool = SglangPool(PoolConfig(rows=4, tokens=64, width=32))
    pool.admit(0, 4, prompt_len=4)
    with pytest.raises(Refused, match="speculative decoding is off"):
        pool.spec_prepare(0, 2)


def test_outside_the_eagle_config_upstreams_release_asserts_on_the_tail() -> None:
    """Why every call of a speculative pool runs inside `spec.overrides`: without it the release asserts."""
    outside, inside = SglangPool(speculative(1, "chunk")), SglangPool(speculative(1, "chunk"))
    for pool in (outside, inside):
        pool.admit(0, 4, prompt_len=4)
        pool.spec_prepare(0, 4)
    with pytest.raises(AssertionError, match="overallocated"):
        outside.dialect.release(outside.reqs[0].req, outside.cache, False)
    with spec.overrides(inside.config):
        inside.dialect.release(inside.reqs[0].req, inside.cache, False)
    assert inside.allocator.available_size() == 64


def test_the_commit_advances_the_batch_the_next_decode_reads() -> None:
    pool = SglangPool(speculative(4, "chunk"))
    pool.admit(0, 5, prompt_len=5)
    pool.spec_prepare(0, 3)
    pool.spec_commit(0, 3)
    assert pool.reqs[0].batch.seq_lens.tolist() == [8]
    pool.decode(0)
    row = pool.snapshot().row_slots[0]
    assert len(row) == 9 and len(set(row)) == 9


SPEC_CALLS = st.sampled_from(["spec_prepare", "spec_commit", "decode", "finish", "retract", "abort", "admit"])


def _call(kind: str, rid: int, n: int) -> Op:
    calls: dict[str, Op] = {
        "spec_prepare": lambda p: p.spec_prepare(rid, n),
        "spec_commit": lambda p: p.spec_commit(rid, n),
        "decode": lambda p: p.decode(rid),
        "admit": lambda p: p.admit(rid, n, prompt_len=n),
        "finish": lambda p: p.finish(rid),
        "retract": lambda p: p.retract(rid),
        "abort": lambda p: p.abort(rid),
    }
    return calls[kind]


@pytest.mark.parametrize("config", [SHAPES[1], SHAPES[3]], ids=[SHAPE_IDS[1], SHAPE_IDS[3]])
@settings(max_examples=25, deadline=None, derandomize=True)
@given(ops=st.lists(st.builds(_call, SPEC_CALLS, st.integers(0, 2), st.integers(1, 8)), min_size=6, max_size=20))
def test_random_speculative_steps_match_the_reference(config: PoolConfig, ops: list[Op]) -> None:
    run_observed(config, [_call("admit", 0, 5), _call("admit", 1, 3), *ops])


def _plant_tail_leak(monkeypatch: pytest.MonkeyPatch) -> None:
    """A release that forgets the over-allocated tail `[ceil_align(C), A)` (upstream's module, this test only)."""
    load_dialect()
    from sglang.srt.mem_cache import common

    monkeypatch.setattr(common, "_release_overallocated_kv_indices", lambda *args, **kwargs: None)


def test_a_planted_tail_leak_is_found_short(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On pd-p1 (page size 1, speculative: no Triton interpreter on 0.5.18), never drawing the ops of this
    version's known findings."""
    config = retarget({**POOLS["pd-p1"], "faults": []}, "sglang")
    known = fuzz_excluded(load_findings(ROOT / "upstream" / "findings.json"), VERSION)
    clean = run(config, QUICK, None, tmp_path / "clean", tmp_path / "db", exclude=known)
    assert clean.counterexample is None, clean.failure_text
    _plant_tail_leak(monkeypatch)
    found = run(config, QUICK, None, tmp_path / "ce", tmp_path / "db", exclude=known)
    assert found.counterexample is not None
    trace = load(found.counterexample)
    # The leak shows in the counters, the observation, or beside the offload release (which frees the tail itself)
    kinds = {"token-conservation", "abstraction", "pp_release vs offload_release"}
    assert trace.failure is not None and trace.failure.id in kinds, trace.failure
    assert len(trace.steps) <= 4
