"""The PD decode side on the upstream target: `DecodeReqToTokenPool`, pre-allocation through
`DecodePreallocQueue._pre_alloc` and the decode-offload release through `DecodeKVCacheOffloadManager` agree with
the reference on both caches and page sizes; the raw guard refuses the `-1` sentinel; bugs planted in upstream's
pre-allocation and offload release (in-process) are found with short counterexamples.

Runs only in a sglang venv (`make sglang-test`).
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
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

from fuzz.profiles import POOLS, PROFILES
from fuzz.run import run
from fuzz.targets import pool_config, retarget
from fuzz.upstream_findings import ROOT, fuzz_excluded, load_findings
from fuzz.walker.walk import Walker
from impl.engine import ReferencePool
from impl.target import PoolConfig, Refused
from impl.upstream.dialects import load_dialect, paged_naive_path, supported_version
from impl.upstream.target import SglangPool
from model.trace import load
from properties.abstraction import observe
from properties.check import check_snapshot
from tests.upstream.known import offload_release_crashes_on

VERSION = supported_version()
BACKEND = "torch" if paged_naive_path() else "triton"  # without the kernel switch there is no naive path
QUICK = replace(PROFILES["ci"], max_examples=60)
# A planted bug's hunt stops at its first failure: room for the rules it shares the draws with.
HUNT = replace(PROFILES["ci"], max_examples=300)
Op = Callable[[Any], object]


def decode_side(page_size: int, cache: str, row_pool: str = "decode", speculative: bool = False) -> PoolConfig:
    return PoolConfig(
        rows=2, tokens=64, width=32, page_size=page_size, cache=cache, speculative=speculative,
        row_pool=row_pool, pre_alloc_size=2 if row_pool == "decode" else 0,
        kernel_backend=BACKEND if page_size > 1 else "torch", evict_on_demand=False,
    )  # fmt: skip


SHAPES = [decode_side(ps, cache, rp) for rp in ("decode", "req") for cache in ("chunk", "radix") for ps in (1, 4)]
SHAPE_IDS = [f"{c.row_pool}-{c.cache}-p{c.page_size}" for c in SHAPES]


def outcome(pool: Any, op: Op) -> object:
    try:
        return op(pool)
    except Refused:
        return Refused


def run_observed(config: PoolConfig, ops: list[Op]) -> SglangPool:
    """The ops on the reference and on upstream: equal outcomes (rows included) and observations each step, and
    the invariants upstream's tensors break are those the reference's break."""
    reference, upstream = ReferencePool(config), SglangPool(config)
    for index, op in enumerate(ops):
        assert outcome(upstream, op) == outcome(reference, op), f"step {index}: outcomes differ"
        snap, expected = upstream.snapshot(), reference.snapshot()
        assert observe(snap).differences(observe(expected)) == [], f"step {index}"
        assert {i for i, _ in check_snapshot(snap)} == {i for i, _ in check_snapshot(expected)}, f"step {index}"
    return upstream


@pytest.mark.parametrize("config", SHAPES, ids=SHAPE_IDS)
def test_prealloc_decode_and_both_releases_match_the_reference(config: PoolConfig) -> None:
    ops: list[Op] = [
        lambda p: p.pd_prealloc(0, 6),
        lambda p: p.pd_prealloc(1, 3),
        lambda p: p.decode(0),
        lambda p: p.offload_release(0),
        lambda p: p.offload_release(0),  # released already: the guard returns early
        lambda p: p.offload_release(0, 1),  # the -1 sentinel: the guard returns early
        lambda p: p.decode(1),
        lambda p: p.finish(1),
        lambda p: p.offload_release(1, 1),
        lambda p: p.pd_prealloc(2, 5),
        lambda p: p.pd_prealloc(2, 5),  # a known id
        lambda p: p.pd_prealloc(3, 33),  # past the row width
    ]
    if offload_release_crashes_on(VERSION, config.cache):
        with pytest.raises(AttributeError, match="protected_size_"):  # the known offload-release-unified-crash
            run_observed(config, ops)
        return
    upstream = run_observed(config, ops)
    assert upstream.snapshot().records[2].committed_len == 5


@pytest.mark.parametrize("config", SHAPES[:2], ids=SHAPE_IDS[:2])
def test_the_decode_row_pool_counts_and_hands_out_its_pre_allocation_rows_as_the_reference(config: PoolConfig) -> None:
    """Four rows in all (two running, two pre-allocation), FIFO reuse, a fifth refused."""
    ops: list[Op] = [*(lambda p, r=r: p.pd_prealloc(r, 2) for r in range(5)), lambda p: p.offload_release(1)]
    ops += [lambda p: p.pd_prealloc(5, 2)]
    upstream = run_observed(config, ops)
    snap = upstream.snapshot()
    assert snap.rows_total == 4 and snap.records[5].row == 2


def test_the_sentinel_is_refused_unchanged_on_a_released_record() -> None:
    pool = SglangPool(decode_side(1, "chunk"))
    pool.pd_prealloc(0, 4)
    pool.finish(0)
    before = observe(pool.snapshot())
    with pytest.raises(Refused, match="req_pool_idx is -1"):
        pool.offload_release(0, 1)
    assert observe(pool.snapshot()).differences(before) == []
    assert pool.dialect.row(pool.reqs[0].req) is None


def test_prealloc_with_speculative_decoding_then_offload_release_frees_the_tail() -> None:
    config = decode_side(4, "chunk", speculative=True)
    ops: list[Op] = [lambda p: p.pd_prealloc(0, 5), lambda p: p.spec_prepare(0, 7), lambda p: p.offload_release(0)]
    upstream = run_observed(config, ops)
    assert upstream.allocator.available_size() == 64


def _known_ops() -> frozenset[str]:
    """The ops this version's known findings drop, but the offload release: the finding that drops it
    (`offload-release-protected-drift`) needs a tree, and pd-p1 runs the chunk cache (the clean run checks it)."""
    findings = load_findings(ROOT / "upstream" / "findings.json")
    return fuzz_excluded(findings, VERSION) - {"offload_release"}


def _plant_fill_off_by_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pre-allocation sized one token past the transferred prompt (the prebuilt batch's assert refuses it after
    the row and slots were taken: a refusal that changed state)."""
    load_dialect()
    from sglang.srt.disaggregation.decode import DecodePreallocQueue

    fill = DecodePreallocQueue._pre_alloc_fill_len
    monkeypatch.setattr(DecodePreallocQueue, "_pre_alloc_fill_len", staticmethod(lambda req: fill(req) + 1))


def _plant_offload_tail_leak(monkeypatch: pytest.MonkeyPatch) -> None:
    """An offload release that forgets the speculative tail: it reads the allocated length as the committed one."""
    load_dialect()
    from sglang.srt.disaggregation.decode_kvcache_offload_manager import DecodeKVCacheOffloadManager

    release = DecodeKVCacheOffloadManager._release_finished_req
    dialect = load_dialect()

    def leaky(self: Any, req: Any, *args: Any) -> Any:
        if dialect.row(req) not in (None, -1):
            req.kv.kv_allocated_len = dialect.committed_len(req)
        return release(self, req, *args)

    monkeypatch.setattr(DecodeKVCacheOffloadManager, "_release_finished_req", leaky)


@pytest.mark.parametrize(
    ("plant", "kinds"),
    [
        (_plant_fill_off_by_one, {"pd_prealloc"}),
        (_plant_offload_tail_leak, {"token-conservation", "abstraction", "pp_release vs offload_release"}),
    ],
)
def test_a_planted_decode_side_bug_is_found_short(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, plant: Callable[[pytest.MonkeyPatch], None], kinds: set[str]
) -> None:
    """On pd-p1 (page size 1: no Triton interpreter on 0.5.18), never drawing the ops of this version's known
    findings."""
    config = retarget({**POOLS["pd-p1"], "faults": []}, "sglang")
    clean = run(config, QUICK, None, tmp_path / "clean", tmp_path / "db", exclude=_known_ops())
    assert clean.counterexample is None, clean.failure_text
    plant(monkeypatch)
    found = run(config, HUNT, None, tmp_path / "ce", tmp_path / "db", exclude=_known_ops())
    assert found.counterexample is not None
    trace = load(found.counterexample)
    assert trace.failure is not None and trace.failure.id in kinds, trace.failure
    assert len(trace.steps) <= 4


@pytest.mark.parametrize("shape", ["pd-p1", "pd-p4"])
def test_an_allocator_that_never_merges_its_staged_frees_is_found(shape: str) -> None:
    """A disaggregated server's allocator stages its frees (`need_sort`); one whose `merge_and_sort_free` does
    nothing refuses an allocation the staged pages would cover. The walker finds it (in a child process: where the
    paged kernel runs before the capacity check, 0.5.18-0.5.21, the short free list can crash the interpreter,
    which counts as found too), and the same seed without the plant walks clean."""
    config = retarget({**POOLS[shape], "faults": []}, "sglang")
    assert config["need_sort"]
    child = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", _NO_MERGE_HUNT, shape], cwd=ROOT, capture_output=True, text=True
    )
    crashed = child.returncode < 0 and SglangPool(pool_config(config)).short_alloc_crashes
    assert crashed or (child.returncode == 0 and child.stdout.startswith("refused-legal")), (child.stdout, child.stderr)
    if not crashed:
        seed, steps = (int(word) for word in child.stdout.split()[1:3])
        clean = Walker(config, seed, _known_ops()).run(steps=steps)
        assert clean.failure is None, clean.failure


# The hunt of the test above: plant, walk up to six seeds, print the failure's kind, its seed and steps.
_NO_MERGE_HUNT = """
import sys
from fuzz.flags import one_torch_thread
one_torch_thread()
from fuzz.profiles import POOLS
from fuzz.targets import pool_config, retarget
from fuzz.walker.walk import Walker
from impl.upstream.target import SglangPool
from tests.upstream.test_pd_target import _known_ops
config = retarget({**POOLS[sys.argv[1]], "faults": []}, "sglang")
setattr(type(SglangPool(pool_config(config)).allocator), "merge_and_sort_free", lambda self: None)
for seed in range(6):
    result = Walker(config, seed, _known_ops()).run(steps=600)
    if result.failure is not None:
        print(result.failure.kind, seed, result.steps)
        break
else:
    print("clean")
"""
