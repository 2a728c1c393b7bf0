"""The prefix caches upstream builds, read through what each cache object offers (never a version number).

Three kinds: a cache without a tree (`ChunkCache`, or a `UnifiedRadixCache` built with `disable=True`), the
Python `RadixCache` (nodes with `children`, `lock_ref`, `value`), and a `UnifiedRadixCache` over a tree core
(`tree_core.walk_for_kv_canary`, `sanity_check`). `tree_for(cache)` picks the reader by the object's attributes.
"""

from __future__ import annotations

import dataclasses
from array import array
from typing import Any

import torch

from impl.upstream.capabilities import Capabilities


@dataclasses.dataclass(frozen=True)
class TreeView:
    """What the snapshot reads of a prefix cache: its slots (all, and those on unlocked nodes), the token
    counts a node-by-node recount gives, and the complaint of the tree's own consistency check (None: none)."""

    slots: torch.Tensor
    evictable_slots: torch.Tensor
    evictable_recount: int
    protected_recount: int
    problem: str | None = None


def slot_tensor(slots: list[int]) -> torch.Tensor:
    return torch.tensor(slots, dtype=torch.int64)


EMPTY_TREE = TreeView(torch.empty(0, dtype=torch.int64), torch.empty(0, dtype=torch.int64), 0, 0)


class EvictionLog:
    """The tree's on-demand evictions as (tokens asked, tokens freed), appended by the hooks `watch_evictions`
    installs on one cache instance; `enabled` False turns on-demand eviction off there."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.entries: list[tuple[int, int]] = []

    def take(self) -> list[tuple[int, int]]:
        taken, self.entries = self.entries, []
        return taken


class NoTree:
    """A cache without a tree: nothing to match, lock, walk or evict."""

    def __init__(self, caps: Capabilities) -> None:
        self.caps = caps

    def node_locked(self, cache: Any, node: Any) -> bool:
        return False

    def peek(self, cache: Any, token_ids: list[int]) -> tuple[int, frozenset[int]]:
        return 0, frozenset()

    def view(self, cache: Any) -> TreeView:
        return EMPTY_TREE

    def watch_evictions(self, cache: Any, allocator: Any, on_demand: bool) -> EvictionLog:
        return EvictionLog(on_demand)

    def evict(self, cache: Any, num_tokens: int) -> int:
        return 0


class PythonRadixTree(NoTree):
    """`radix_cache.RadixCache`: a node tree the adapter walks itself."""

    def node_locked(self, cache: Any, node: Any) -> bool:
        return node is not None and node is not cache.root_node

    def peek(self, cache: Any, token_ids: list[int]) -> tuple[int, frozenset[int]]:
        """A read-only copy of `_match_prefix_helper`'s walk, with upstream's own `RadixKey.child_key` and
        `RadixKey.match`: no split, no access time, and `children.get` (a defaultdict would grow on `[]`)."""
        from sglang.srt.mem_cache.radix_cache import RadixKey

        if not token_ids:
            return 0, frozenset()
        ps = cache.page_size
        key = RadixKey(array("q", token_ids)).page_aligned(ps)
        node, matched, unlocked = cache.root_node, 0, set[int]()
        while len(key) > 0:
            child = node.children.get(key.child_key(ps))
            if child is None:
                break
            common = child.key.match(key, page_size=ps)
            if child.lock_ref == 0:
                unlocked.update(int(slot) for slot in child.value[:common].tolist())
            matched += common
            if common < len(child.key):
                break
            node, key = child, key[common:]
        return matched, frozenset(unlocked)

    def view(self, cache: Any) -> TreeView:
        nodes = _nodes(cache.root_node)
        slots = [int(v) for n in nodes for v in n.value.tolist()]
        unlocked = [int(v) for n in nodes if n.lock_ref == 0 for v in n.value.tolist()]
        return TreeView(
            slot_tensor(slots), slot_tensor(unlocked), len(unlocked), len(slots) - len(unlocked), _leaf_problem(cache)
        )

    def watch_evictions(self, cache: Any, allocator: Any, on_demand: bool) -> EvictionLog:
        # Allocation and retraction reach this tree through `evict_from_tree_cache` -> `tree_cache.evict`; the
        # explicit step calls the class's `evict` around this instance attribute.
        return _hook(cache, "evict", EvictionLog(on_demand))

    def evict(self, cache: Any, num_tokens: int) -> int:
        from sglang.srt.mem_cache.base_prefix_cache import EvictParams

        return int(type(cache).evict(cache, EvictParams(num_tokens=num_tokens)).num_tokens_evicted)


class UnifiedTree(PythonRadixTree):
    """`UnifiedRadixCache` on a tree core (Python or Rust), read through the core's walk and the cache's check."""

    def node_locked(self, cache: Any, node: Any) -> bool:
        try:
            return node is not None and not cache.is_root(node)
        except KeyError:  # the Rust core's answer for a node of a tree since reset: it locks nothing here
            return False

    def peek(self, cache: Any, token_ids: list[int]) -> tuple[int, frozenset[int]]:
        if not token_ids:
            return 0, frozenset()
        path = self._match_path(cache, token_ids)
        if not path:
            return 0, frozenset()
        return len(path), frozenset(path) & frozenset(self._walk(cache, unlocked_only=True))

    def _match_path(self, cache: Any, token_ids: list[int]) -> list[int]:
        """The slots a fresh match of `token_ids` would find, without splitting a node or touching access times:
        the core's side-effect-free match where it has one, else a read-only copy of the Python core's
        `_match_prefix_helper` walk (a core without that match has no Rust twin)."""
        from sglang.srt.mem_cache.radix_cache import RadixKey

        core = cache.tree_core
        if self.caps.match_full_device_prefix and self.caps.collect_full_device_indices:
            matched, node, _ = core.match_full_device_prefix(RadixKey(array("q", token_ids)))
            if matched == 0:
                return []
            return core.collect_full_device_indices(node, core.root_node_handle()).tolist()[:matched]
        return _walk_python_core(core, RadixKey(array("q", token_ids)))

    def view(self, cache: Any) -> TreeView:
        slots = self._walk(cache, unlocked_only=False)
        unlocked = self._walk(cache, unlocked_only=True)
        problem = None
        try:
            cache.sanity_check()
        except Exception as exc:  # upstream's check raises AssertionError or its own errors; all are findings
            problem = f"{type(exc).__name__}: {exc}"
        return TreeView(slot_tensor(slots), slot_tensor(unlocked), len(unlocked), len(slots) - len(unlocked), problem)

    def watch_evictions(self, cache: Any, allocator: Any, on_demand: bool) -> EvictionLog:
        log = EvictionLog(on_demand)
        if not self.caps.evict_for_alloc:
            return _hook(cache, "evict", log)
        if not on_demand:
            # Allocation asks the allocator to make room (`evict_to_free_tokens`); without on-demand eviction
            # it makes none, and the tree is evicted only by the explicit step.
            allocator.evict_to_free_tokens = lambda tree_cache, num_tokens: None
        return _hook(cache, "evict_for_alloc", log)

    def _walk(self, cache: Any, unlocked_only: bool) -> list[int]:
        walk = cache.tree_core.walk_for_kv_canary(unlocked_only=unlocked_only, swa_resident_only=False)
        return [int(slot) for slot in walk.slot_indices.tolist()]


def tree_for(cache: Any, caps: Capabilities) -> NoTree:
    """The reader of `cache`, by what the object offers."""
    if hasattr(cache, "tree_core"):
        return NoTree(caps) if cache.disable else UnifiedTree(caps)
    if hasattr(cache, "root_node"):
        return PythonRadixTree(caps)
    return NoTree(caps)


def _walk_python_core(core: Any, key: Any) -> list[int]:
    """The device slots along `key` in the Python `UnifiedTreeCore`, as its match walks (page-aligned, stopping at
    an evicted node or inside a node), reading `children.get` (a defaultdict would grow on `[]`)."""
    from sglang.srt.mem_cache.unified_cache.components import ComponentType

    ps = core.page_size
    key = key.page_aligned(ps)
    node, path = core.root_node, list[int]()
    while len(key) > 0:
        child = node.children.get(key.child_key(ps))
        if child is None or child.evicted:
            break
        common = child.key.match(key, page_size=ps)
        path += [int(slot) for slot in child.component_data[ComponentType.FULL].value[:common].tolist()]
        if common < len(child.key):
            break
        node, key = child, key[common:]
    return path


def _hook(cache: Any, method: str, log: EvictionLog) -> EvictionLog:
    """Wrap this instance's `method` (the tree's on-demand eviction) so that it logs, or evicts nothing when off."""
    from sglang.srt.mem_cache.base_prefix_cache import EvictResult

    evict = getattr(cache, method)

    def on_demand(params: Any, **kwargs: Any) -> Any:
        if not log.enabled:
            return EvictResult()
        result = evict(params, **kwargs)
        log.entries.append((params.num_tokens, result.num_tokens_evicted))
        return result

    setattr(cache, method, on_demand)
    return log


def _leaf_problem(cache: Any) -> str | None:
    """The Python tree's own bookkeeping beside its counters, where it keeps one: the set of evictable leaves."""
    if not hasattr(cache, "evictable_leaves"):
        return None
    nodes = _nodes(cache.root_node)
    leaves = {n for n in nodes if n.lock_ref == 0 and not any(not c.evicted for c in n.children.values())}
    if leaves == set(cache.evictable_leaves):
        return None
    return (
        f"evictable_leaves holds {sorted(n.id for n in cache.evictable_leaves)}, "
        f"the unlocked leaves are {sorted(n.id for n in leaves)}"
    )


def _nodes(root: Any) -> list[Any]:
    """Every node of the tree below `root`, parents first."""
    nodes, stack = [], list(root.children.values())
    while stack:
        node = stack.pop()
        nodes.append(node)
        stack.extend(node.children.values())
    return nodes
