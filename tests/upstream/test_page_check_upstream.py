"""The whole-pool page check on upstream SGLang's own objects (`check_sglang_pool`): a lifecycle on the upstream
target passes, and corruptions planted in upstream's allocator, rows and trees are named by page and owners.

Runs only in a sglang venv (`make sglang-test`); the main venv deliberately lacks sglang.
"""

from __future__ import annotations

import importlib.util
import re
import textwrap
from array import array
from collections import defaultdict
from types import SimpleNamespace
from typing import Any

import pytest
import torch

if importlib.util.find_spec("sglang") is None:
    pytest.skip(
        "needs upstream sglang, which the main venv deliberately lacks; run `make sglang-test`",
        allow_module_level=True,
    )

from impl.target import PoolConfig, Refused
from impl.upstream.dialects import capabilities, load_dialect, supported_version
from impl.upstream.target import SglangPool
from properties import upstream_check
from properties.page_check import (
    DOUBLE_FREE,
    LEAK,
    OWNED_AND_FREE,
    OWNED_TWICE,
    TREE_AND_FREE,
    PageCheckResult,
    PageViolation,
)
from properties.upstream_check import check_sglang_pool, format_violations
from tests.upstream.known import findings_on

CONFIG = PoolConfig(rows=4, tokens=32, width=16)
# Every release ships RadixCache; a UnifiedRadixCache whose tree core can be named is checked too.
TREES = ["radix", "unified"] if capabilities().tree_core_backend else ["radix"]


def check(pool: SglangPool) -> PageCheckResult:
    """The page check on the target's upstream pool, allocator and cache, with every request it made."""
    reqs = [entry.req for entry in pool.reqs.values()]
    return check_sglang_pool(pool.req_to_token_pool, pool.allocator, pool.cache, reqs)


def lifecycle() -> SglangPool:
    """Request 0 prefilled and decoded, request 1 prefilled in two chunks, request 2 finished and released."""
    pool = SglangPool(CONFIG)
    pool.admit(0, 4, prompt_len=4)
    pool.decode(0)
    pool.admit(1, 3, prompt_len=6)
    pool.extend(1, 3)
    pool.admit(2, 2, prompt_len=2)
    pool.finish(2)
    return pool


def row_and_slots(pool: SglangPool, rid: int) -> tuple[int, list[int]]:
    snap = pool.snapshot()
    row = snap.records[rid].row
    assert row is not None
    return row, snap.row_slots[rid]


def test_a_lifecycle_on_upstream_passes() -> None:
    pool = lifecycle()
    result = check(pool)
    assert result.ok, format_violations(result)
    assert (result.owned_pages_count, result.free_pages_count, result.tree_pages_count) == (11, 21, 0)
    # The same requests reached twice, as through the last and the running batch, count once.
    reqs = [entry.req for entry in pool.reqs.values()] * 2
    assert check_sglang_pool(pool.req_to_token_pool, pool.allocator, pool.cache, reqs).ok


def test_a_live_rows_page_freed_into_the_allocator_is_owned_and_free() -> None:
    pool = lifecycle()
    row, slots = row_and_slots(pool, 0)
    pool.allocator.free(torch.tensor(slots[1:2]))
    assert check(pool).violations == [PageViolation(OWNED_AND_FREE, slots[1], (row, "free"))]


def test_a_free_page_freed_again_is_a_double_free() -> None:
    pool = lifecycle()
    page = int(pool.allocator.free_pages[0])
    pool.allocator.free(torch.tensor([page]))
    assert check(pool).violations == [PageViolation(DOUBLE_FREE, page, ("free", "free"))]


def test_a_page_dropped_from_the_free_list_leaks() -> None:
    pool = lifecycle()
    page = int(pool.allocator.free_pages[-1])
    pool.allocator.free_pages = pool.allocator.free_pages[:-1]
    result = check(pool)
    assert result.violations == [PageViolation(LEAK, page, ())]
    assert result.conservation_gap_pages == -1


def test_stale_row_reuse_is_named_page_by_page_where_the_version_lets_it_through() -> None:
    pool = SglangPool(CONFIG)
    pool.admit(0, 4)
    _, released = row_and_slots(pool, 0)
    pool.finish(0)
    pool.admit(1, 3)
    row, overwritten = row_and_slots(pool, 1)
    if "stale-row-reuse" not in findings_on(supported_version()):
        with pytest.raises(Refused, match="a reused row must carry allocated KV"):
            pool.reuse_released(0, row, 2)
        assert check(pool).ok
        return
    # 0.5.18's guard lets request 0 back onto request 1's row: it writes its freed slots over request 1's
    # prefix, so both requests own them, and request 1's own slots are held by nobody.
    pool.reuse_released(0, row, 2)
    shared = [
        PageViolation(kind, page, (row, row, "free")) for page in released[:3] for kind in (OWNED_AND_FREE, OWNED_TWICE)
    ]
    expected = [*shared, PageViolation(OWNED_AND_FREE, released[3], (row, "free"))]
    expected += [PageViolation(LEAK, page, ()) for page in overwritten]
    result = check(pool)
    assert result.violations == sorted(expected, key=lambda v: (v.page, v.kind)), format_violations(result)


def test_an_open_free_group_is_refused() -> None:
    pool = lifecycle()
    pool.allocator.free_group_begin()
    with pytest.raises(ValueError, match="free group open"):
        check(pool)
    pool.allocator.free_group_end()
    assert check(pool).ok


def new_tree(kind: str) -> tuple[Any, Any, Any]:
    """A fresh upstream row pool, token allocator (16 slots) and a prefix tree of `kind` that caches."""
    dialect = load_dialect()  # imports sglang behind the CPU compat shims
    from sglang.srt.mem_cache.cache_init_params import CacheInitParams

    pool, allocator = dialect.new_pool(4, 16), dialect.new_allocator(16, False)
    params: dict[str, Any] = dict(
        disable=False, req_to_token_pool=pool, token_to_kv_pool_allocator=allocator, page_size=1
    )
    if kind == "radix":
        from sglang.srt.mem_cache.radix_cache import RadixCache

        return pool, allocator, RadixCache(CacheInitParams(**params))
    from sglang.srt.mem_cache.unified_cache.components import ComponentType
    from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache

    return pool, allocator, UnifiedRadixCache(CacheInitParams(**params, tree_components=(ComponentType.FULL,)))


@pytest.mark.parametrize("kind", TREES)
def test_tree_pages_are_read_from_upstreams_trees(kind: str) -> None:
    from sglang.srt.mem_cache.base_prefix_cache import InsertParams
    from sglang.srt.mem_cache.radix_cache import RadixKey

    pool, allocator, tree = new_tree(kind)
    slots = allocator.alloc(4)
    tree.insert(InsertParams(key=RadixKey(array("q", [11, 12, 13, 14])), value=slots.clone()))
    result = check_sglang_pool(pool, allocator, tree, [])
    assert result.ok, format_violations(result)
    assert (result.tree_pages_count, result.free_pages_count) == (4, 12)
    allocator.free(slots[2:3])  # a tree page handed back while the tree still holds it
    expected = [PageViolation(TREE_AND_FREE, int(slots[2]), ("tree", "free"))]
    assert check_sglang_pool(pool, allocator, tree, []).violations == expected


def documented_plugin() -> dict[str, Any]:
    """Run the plugin code block of `properties.upstream_check`'s docstring; return the names it defines."""
    doc = upstream_check.__doc__ or ""
    block = re.search(r"adds the page\s+check:\n\n((?:    .*\n|\n)+)", doc)
    assert block is not None, "the module docstring lost its plugin code block"
    names: dict[str, Any] = {}
    exec(compile(textwrap.dedent(block.group(1)), "<upstream_check docstring>", "exec"), names)
    return names


def test_the_documented_plugin_hook_runs_the_check_after_the_busy_check(monkeypatch: pytest.MonkeyPatch) -> None:
    pool = lifecycle()
    from sglang.srt.managers.scheduler_components.invariant_checker import SchedulerInvariantChecker
    from sglang.srt.plugins.hook_registry import HookRegistry

    # A registry of this test's own, and the checker's method put back afterwards.
    monkeypatch.setattr(HookRegistry, "_hooks", defaultdict(list))
    monkeypatch.setattr(HookRegistry, "_patched", set())
    busy_check = SchedulerInvariantChecker.__dict__["self_check_during_busy"]
    monkeypatch.setattr(SchedulerInvariantChecker, "self_check_during_busy", busy_check)
    documented_plugin()["register"]()
    HookRegistry.apply_hooks()
    # The fields the hook and the busy check read; no last batch, so upstream's own check returns at once.
    checker = SimpleNamespace(
        get_last_batch=lambda: None,
        get_running_batch=lambda: SimpleNamespace(reqs=[entry.req for entry in pool.reqs.values()]),
        req_to_token_pool=pool.req_to_token_pool,
        token_to_kv_pool_allocator=pool.allocator,
        tree_cache=pool.cache,
        scheduler_stage_metrics=None,
    )
    SchedulerInvariantChecker.self_check_during_busy(checker)
    leaked = int(pool.allocator.free_pages[-1])
    pool.allocator.free_pages = pool.allocator.free_pages[:-1]
    with pytest.raises(AssertionError, match=f"page {leaked} leak: held by nobody"):
        SchedulerInvariantChecker.self_check_during_busy(checker)
