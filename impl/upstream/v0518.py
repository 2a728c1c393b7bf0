"""sglang 0.5.18: record fields on `Req`, an optional `req.kv`, `release_kv_cache(req, cache, is_insert)`."""

from __future__ import annotations

from array import array
from typing import Any

from impl.target import PoolConfig, RecordView
from impl.upstream.dialects import EMPTY_TREE, GLUE_LOCKS, Dialect, EvictionLog, TreeView, slot_tensor


class Dialect0518(Dialect):
    """Speaks sglang 0.5.18, the last release before the row index moved into `ReqKvInfo` (#37094)."""

    version = "0.5.18"
    paged_checks_before_kernel = False  # allocator/paged.py alloc_extend / alloc_decode: the kernel runs first
    glue_fields = (
        "origin_input_ids",
        "full_untruncated_fill_ids",
        "prefix_indices",
        "extend_range",
        "last_node",
        "finished_reason",
    )

    def select_kernels(self, paged: Any, kernels: bool) -> None:
        # No switch: alloc_extend / alloc_decode always launch the Triton kernels (interpreted on CPU, since the
        # adapter set TRITON_INTERPRET=1 before importing sglang). `_unsupported` refuses the naive path first.
        if not kernels:
            raise ValueError("sglang 0.5.18's paged allocator has no naive path; use kernel_backend 'triton'")

    def new_cache(self, pool: Any, allocator: Any, config: PoolConfig) -> Any:
        from sglang.srt.mem_cache.cache_init_params import CacheInitParams

        # What registry.py builds for a full-attention model: ChunkCache for --disable-radix-cache with chunked
        # prefill, else the Python RadixCache (0.5.18's default; it has no tree cores).
        params = CacheInitParams(
            disable=config.cache != "radix",
            req_to_token_pool=pool,
            token_to_kv_pool_allocator=allocator,
            page_size=config.page_size,
        )
        if config.cache != "radix":
            from sglang.srt.mem_cache.chunk_cache import ChunkCache

            return ChunkCache(params)
        from sglang.srt.mem_cache.radix_cache import RadixCache

        return RadixCache(params)

    def lock(self, req: Any, cache: Any) -> None:
        cache.inc_lock_ref(req.last_node)  # PrefillAdder._req_inc_lock_ref (a no-op on the chunk cache)

    def unlock(self, req: Any, cache: Any) -> None:
        cache.dec_lock_ref(req.last_node)

    def lock_handle(self, req: Any) -> Any:
        return req.last_node

    def tree_locked(self, req: Any, cache: Any) -> bool:
        # `cache_finished_req` unlocks `last_node` but leaves the handle on the request until the next match
        # (or `reset_for_retract`), and lock counts are per node, not per holder: a request holds its lock while
        # it holds its row. A lock the release forgot shows in the tree's protected count, which the
        # lock-holder invariant compares with the records that still hold one.
        root = getattr(cache, "root_node", None)
        handle = req.last_node
        return root is not None and req.req_pool_idx is not None and handle is not None and handle is not root

    def peek(self, cache: Any, token_ids: list[int]) -> tuple[int, frozenset[int]]:
        """A read-only copy of `_match_prefix_helper`'s walk, with upstream's own `RadixKey.child_key` and
        `RadixKey.match`: no split, no access time, and `children.get` (a defaultdict would grow on `[]`)."""
        from sglang.srt.mem_cache.radix_cache import RadixKey

        if not hasattr(cache, "root_node") or not token_ids:
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

    def tree_view(self, cache: Any) -> TreeView:
        if not hasattr(cache, "root_node"):
            return EMPTY_TREE
        nodes = _nodes(cache.root_node)
        slots = [int(v) for n in nodes for v in n.value.tolist()]
        unlocked = [int(v) for n in nodes if n.lock_ref == 0 for v in n.value.tolist()]
        # 0.5.18 has no sanity_check; its own bookkeeping beside the counters is the set of evictable leaves.
        leaves = {n for n in nodes if n.lock_ref == 0 and not any(not c.evicted for c in n.children.values())}
        problem = None
        if leaves != set(cache.evictable_leaves):
            problem = (
                f"evictable_leaves holds {sorted(n.id for n in cache.evictable_leaves)}, "
                f"the unlocked leaves are {sorted(n.id for n in leaves)}"
            )
        return TreeView(slot_tensor(slots), slot_tensor(unlocked), len(unlocked), len(slots) - len(unlocked), problem)

    def watch_evictions(self, cache: Any, allocator: Any, on_demand: bool) -> EvictionLog:
        from sglang.srt.mem_cache.base_prefix_cache import EvictResult

        log = EvictionLog(on_demand)
        if not hasattr(cache, "root_node"):
            return log
        # Allocation and retraction reach the tree through `evict_from_tree_cache` -> `tree_cache.evict`; the
        # explicit step calls the class's `evict` around this instance attribute.
        evict = type(cache).evict

        def on_demand_evict(params: Any) -> Any:
            if not log.enabled:
                return EvictResult()
            result = evict(cache, params)
            log.entries.append((params.num_tokens, result.num_tokens_evicted))
            return result

        cache.evict = on_demand_evict
        return log

    def evict(self, cache: Any, num_tokens: int) -> int:
        from sglang.srt.mem_cache.base_prefix_cache import EvictParams

        if not hasattr(cache, "root_node"):
            return 0
        return int(type(cache).evict(cache, EvictParams(num_tokens=num_tokens)).num_tokens_evicted)

    def row(self, req: Any) -> int | None:
        return req.req_pool_idx

    def set_row(self, req: Any, row: int | None) -> None:
        req.req_pool_idx = row

    def committed_len(self, req: Any) -> int:
        return req.kv_committed_len

    def set_committed_len(self, req: Any, length: int) -> None:
        req.kv_committed_len = length

    def protected_len(self, req: Any) -> int:
        return req.cache_protected_len

    def set_protected_len(self, req: Any, length: int) -> None:
        req.cache_protected_len = length

    def record_view(self, req: Any, cache: Any, status: str, prompt_len: int | None) -> RecordView:
        # A released record is `req.kv is None`: it holds no allocated length.
        allocated_len = 0 if req.kv is None else req.kv.kv_allocated_len
        return RecordView(
            row=req.req_pool_idx,
            protected_len=req.cache_protected_len,
            committed_len=req.kv_committed_len,
            allocated_len=allocated_len,
            inflight_middle_chunks=req.inflight_middle_chunks,
            status=status,
            prefix_len=req.prefix_indices.shape[0],
            tree_locked=self.tree_locked(req, cache),
            extend_end=0 if req.extend_range is None else req.extend_range.end,
            prompt_len=prompt_len,
        )

    def open_extend(self, req: Any, cache: Any, rematch: bool, seq_len: int) -> None:
        if rematch:
            req.init_next_round_input(cache)  # sets prefix_indices and cache_protected_len from the match
            setattr(req, GLUE_LOCKS, getattr(req, GLUE_LOCKS, 0) + 1)
            self.lock(req, cache)
        else:
            req.init_next_round_input()  # a continuation keeps its prefix: no tree, as for the chunked request
        req.set_extend_range(len(req.prefix_indices), seq_len)  # PrefillAdder's extend range

    def retract(self, req: Any, pool: Any, allocator: Any, cache: Any, remaining: int) -> None:
        self.schedule_batch.release_req(
            req=req,
            remaing_req_count=remaining,
            server_args=self.server_args,
            req_to_token_pool=pool,
            token_to_kv_pool_allocator=allocator,
            tree_cache=cache,
            hisparse_coordinator=None,
        )

    def stash(self, req: Any, cache: Any) -> None:
        self.common.maybe_cache_unfinished_req(req, cache, chunked=True)

    def release(self, req: Any, cache: Any, insert: bool) -> None:
        self.common.release_kv_cache(req, cache, is_insert=insert)

    def pp_release_manual(self, req: Any, cache: Any) -> None:
        # Scheduler.profile_and_init_predictor (scheduler_pp_mixin.py) releases its synthetic request inline
        # with exactly these steps; the mamba step is left out because this pool has no mamba state.
        if req.req_pool_idx is None:
            return
        pool = cache.req_to_token_pool
        cache.token_to_kv_pool_allocator.free(pool.req_to_token[req.req_pool_idx, : req.extend_range.end])
        pool.free(req)
        req.kv = None


def _nodes(root: Any) -> list[Any]:
    """Every node of the tree below `root`, parents first."""
    nodes, stack = [], list(root.children.values())
    while stack:
        node = stack.pop()
        nodes.append(node)
        stack.extend(node.children.values())
    return nodes
