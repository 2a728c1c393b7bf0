"""The upstream target on upstream's radix tree (0.5.23 `UnifiedRadixCache` on each tree core, 0.5.18
`RadixCache`): it steps in lockstep with the model, agrees with the reference, reads prefixes without touching
the tree, evicts both ways, and a lock leak or a counter drift planted in upstream's class (in-process, never
the installed file) is found with a short counterexample.

Runs only in a sglang venv (`make sglang-test`).
"""

from __future__ import annotations

import importlib.util
import random
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
from fuzz.targets import retarget
from fuzz.upstream_findings import ROOT, load_findings
from impl.engine import ReferencePool
from impl.target import PoolConfig, Refused
from impl.upstream.dialects import capabilities, load_dialect, paged_naive_path, supported_version, tree_cores
from impl.upstream.target import SglangPool
from model.trace import load
from properties.abstraction import observe
from properties.check import check_snapshot
from tests.upstream.known import findings_on

VERSION = supported_version()
CORES = list(tree_cores()) or ["rust"]  # a tree without cores to name: the config's default is then unread
BACKEND = "torch" if paged_naive_path() else "triton"  # without the kernel switch there is no naive path
QUICK = replace(PROFILES["ci"], max_examples=60)


def radix(page_size: int, core: str, on_demand: bool = False) -> PoolConfig:
    backend = BACKEND if page_size > 1 else "torch"
    return PoolConfig(
        rows=4, tokens=64, width=32, page_size=page_size, cache="radix", tree_core=core,
        evict_on_demand=on_demand, kernel_backend=backend,
    )  # fmt: skip


def _call(pool: Any, op: str, *args: Any, **kwargs: Any) -> object:
    try:
        return getattr(pool, op)(*args, **kwargs)
    except Refused:
        return Refused


def _random_call(rng: random.Random, next_rid: int) -> tuple[str, tuple[int, ...], dict[str, int]]:
    op = rng.choice(["admit", "admit", "extend", "decode", "decode", "finish", "retract", "abort", "evict"])
    if op == "admit":
        return op, (next_rid, rng.randint(1, 20)), {"prompt_len": rng.randint(1, 20), "family": rng.randint(0, 1)}
    if op == "evict":
        return op, (rng.randint(1, 16),), {}
    rid = rng.randrange(max(next_rid, 1))
    return (op, (rid, rng.randint(1, 12)), {}) if op == "extend" else (op, (rid,), {})


@pytest.mark.parametrize("core", CORES)
@pytest.mark.parametrize("page_size", [1, 4])
@pytest.mark.parametrize("on_demand", [False, True])
def test_random_radix_steps_agree_with_the_reference(core: str, page_size: int, on_demand: bool) -> None:
    """Same calls on the reference and on upstream's tree: same outcomes, prefixes, observations and tree sizes
    after every step, and every invariant holds on upstream's own tensors."""
    config = radix(page_size, core, on_demand)
    for seed in range(3):
        reference, upstream, rng, next_rid = ReferencePool(config), SglangPool(config), random.Random(seed), 0
        for _ in range(120):
            op, args, kwargs = _random_call(rng, next_rid)
            next_rid += op == "admit"
            if op == "admit":
                assert reference.peek_prefix(kwargs["family"], kwargs["prompt_len"]) == upstream.peek_prefix(
                    kwargs["family"], kwargs["prompt_len"]
                )
            assert _call(reference, op, *args, **kwargs) == _call(upstream, op, *args, **kwargs), (op, args)
            ref, up = reference.snapshot(), upstream.snapshot()
            assert observe(ref).differences(observe(up)) == [], (op, args)
            assert (ref.evictable_size, ref.protected_size) == (up.evictable_size, up.protected_size)
            assert check_snapshot(up) == [], (op, args)


@pytest.mark.parametrize("core", CORES)
def test_the_prefix_peek_changes_nothing_and_equals_the_match(core: str) -> None:
    """The read-only peek leaves the tree as it was (slots, sizes, the tree's own check) and names the length
    the admission then matches, including a match that ends inside a node."""
    pool = SglangPool(radix(4, core))
    pool.admit(0, 16, prompt_len=16)
    pool.decode(0)
    pool.finish(0)
    before = pool.snapshot()
    assert pool.peek_prefix(0, 10) == 8  # a node of 16 cached tokens; the match stops one page short of 10
    after = pool.snapshot()
    assert (before.tree_slots.tolist(), before.evictable_size) == (after.tree_slots.tolist(), after.evictable_size)
    assert after.tree_problem is None
    pool.admit(1, 4, prompt_len=10)
    assert pool.snapshot().records[1].protected_len == 8


@pytest.mark.parametrize("core", CORES)
def test_on_demand_eviction_is_logged_and_off_means_off(core: str) -> None:
    """With on-demand eviction an admission that does not fit evicts through upstream's hook, and the target
    reports what was asked and freed; with it off the same admission is refused and the tree keeps its slots."""
    for on_demand in (True, False):
        pool = SglangPool(radix(4, core, on_demand))
        for rid in range(3):  # three released prompts of 20 tokens: 60 cached slots, 4 free
            pool.admit(rid, 20, prompt_len=20, family=0 if rid == 0 else rid + 1)
            pool.finish(rid)
        pool.take_evictions()
        outcome = _call(pool, "admit", 9, 28, prompt_len=28, family=7)
        evictions = pool.take_evictions()
        if on_demand:
            assert outcome is not Refused and evictions and all(e.evicted > 0 for e in evictions)
        else:
            assert outcome is Refused and evictions == []
            assert pool.snapshot().tree_slots.numel() == 60


def _plant_lock_leak(monkeypatch: pytest.MonkeyPatch) -> None:
    """A release that never unlocks the request's prefix (the class, patched for this test only)."""
    load_dialect()
    if _python_radix_tree():
        from sglang.srt.mem_cache.radix_cache import RadixCache

        monkeypatch.setattr(RadixCache, "dec_lock_ref", lambda self, node, params=None: None)
        return
    from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache

    if capabilities().cache_lock:
        monkeypatch.setattr(UnifiedRadixCache, "unlock", lambda self, lock: None)
    else:  # a lock by receipt on last_node
        monkeypatch.setattr(UnifiedRadixCache, "dec_lock_ref", lambda self, node_id, *args, **kwargs: None)


def _python_radix_tree() -> bool:
    """Whether the radix tree upstream's factory builds here is the Python `RadixCache` (else a `UnifiedRadixCache`)."""
    return type(SglangPool(radix(1, CORES[0])).cache).__name__ == "RadixCache"


def _match_node(cache: Any, key: Any) -> Any:
    """The node a match of `key` ends at: side-effect free where the core has such a match, else a real one."""
    if capabilities().match_full_device_prefix:
        return cache.tree_core.match_full_device_prefix(key)[1]
    from sglang.srt.mem_cache.base_prefix_cache import MatchPrefixParams

    return cache.match_prefix(MatchPrefixParams(key=key)).last_device_node


def _plant_counter_drift(monkeypatch: pytest.MonkeyPatch) -> None:
    """An insert that counts one token too many as evictable."""
    load_dialect()
    if _python_radix_tree():
        from sglang.srt.mem_cache.radix_cache import RadixCache

        insert = RadixCache.insert

        def drifting(self: Any, params: Any) -> Any:
            result = insert(self, params)
            self.evictable_size_ += 1
            return result

        monkeypatch.setattr(RadixCache, "insert", drifting)
        return
    from sglang.srt.mem_cache.unified_cache.components import ComponentType
    from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache

    unified_insert = UnifiedRadixCache.insert

    def drifting_unified(self: Any, params: Any) -> Any:
        result = unified_insert(self, params)
        core = self.tree_core
        if hasattr(core, "adjust_component_size"):
            core.adjust_component_size(_match_node(self, params.key), ComponentType.FULL, 1)
        elif hasattr(core, "component_evictable_size_"):  # a core without the call (0.5.19's) keeps a plain dict
            core.component_evictable_size_[ComponentType.FULL] += 1
        else:  # 0.5.21's Rust core keeps its counters inside: the cache's reading of them drifts instead
            self._kvlife_drift = getattr(self, "_kvlife_drift", 0) + 1
        return result

    evictable_size = UnifiedRadixCache.evictable_size
    monkeypatch.setattr(UnifiedRadixCache, "insert", drifting_unified)
    monkeypatch.setattr(
        UnifiedRadixCache, "evictable_size", lambda self: evictable_size(self) + getattr(self, "_kvlife_drift", 0)
    )


@pytest.mark.parametrize("core", CORES)
@pytest.mark.parametrize(
    ("plant", "kinds"),
    [(_plant_lock_leak, {"tree-lock-holders", "abstraction"}), (_plant_counter_drift, {"token-conservation"})],
)
def test_a_planted_tree_bug_is_found_short(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    core: str,
    plant: Callable[[pytest.MonkeyPatch], None],
    kinds: set[str],
) -> None:
    """On radix-p1 (no Triton interpreter where there is no naive path), never drawing the ops of this release's
    known findings."""
    config = retarget({**POOLS["radix-p1"], "faults": [], "tree_core": core}, "sglang")
    here = findings_on(VERSION)
    known = frozenset(op for f in load_findings(ROOT / "upstream" / "findings.json") if f.id in here
                      for op in f.fuzz_exclude)  # fmt: skip
    clean = run(config, QUICK, None, tmp_path / "clean", tmp_path / "db", exclude=known)
    assert clean.counterexample is None, clean.failure_text
    plant(monkeypatch)
    found = run(config, QUICK, None, tmp_path / "ce", tmp_path / "db", exclude=known)
    assert found.counterexample is not None
    trace = load(found.counterexample)
    assert trace.failure is not None and trace.failure.id in kinds, trace.failure
    assert len(trace.steps) <= 3
