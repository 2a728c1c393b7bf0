"""How the installed sglang spells the pool's calls and the KV record; the target speaks through one `Dialect`.

Every spelling is chosen by capability (`impl.upstream.capabilities.probe()`: attributes, signatures, modules
present), never by version number, so a release between two known ones, or a source checkout, is spoken as
far as its API goes; a sglang lacking something the adapter needs is `UnsupportedUpstream`, one line naming it.
What moved between releases: the record (0.5.18 keeps `req_pool_idx`, `kv_committed_len`, `cache_protected_len`
on `Req`, with an optional `req.kv` that release sets to None; later releases keep all of them in a `req.kv`
that release marks), the prefix (`prefix_indices` / `prefix_len`), the extend range, the tree lock (`last_node`,
a receipt, a handle), the stash and release calls, and the prefix cache, which upstream's own factory chooses.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import logging
import types
from array import array
from collections.abc import Callable
from typing import Any

import torch

from impl.target import PoolConfig, RecordView
from impl.upstream.capabilities import ADAPTER_NEEDS, Capabilities, missing, probe
from impl.upstream.compat import prepare_sglang_import
from impl.upstream.trees import EMPTY_TREE, EvictionLog, NoTree, TreeView, tree_for

__all__ = ["EMPTY_TREE", "Dialect", "EvictionLog", "TreeView", "UnsupportedUpstream", "load_dialect"]

SETUP_HINT = "build a venv with `make sglang-setup` (upstream/setup.sh VERSION) and run under its python"
# The class each `PoolConfig.tree_core` builds (`unified_cache/tree_core_registry.py`).
TREE_CORE_CLASSES = {"rust": "RustUnifiedTreeCore", "python": "UnifiedTreeCore"}
# The prefix of every attribute the adapter itself sets on upstream's objects (its bookkeeping, not a field upstream
# keeps: the field inventory leaves them out).
GLUE_ATTR_PREFIX = "_kvlife_"
# Set by the adapter on a `Req` whose hand-written PP release freed its row but kept its tree lock (that release
# never unlocks): without a lock handle, nothing else on the request says it still holds one.
LOCK_KEPT = f"{GLUE_ATTR_PREFIX}lock_kept_without_row"
# Counted up on a `Req` each time the glue locks its matched node, so that a refused extend knows whether it took a
# lock to give back: a handle compared by identity cannot tell where a rematch ends on the same node (0.5.19's node
# ids are small ints, 0.5.18's nodes the same object).
GLUE_LOCKS = f"{GLUE_ATTR_PREFIX}glue_locks"
# The chunked-prefill size the factory's context names: chunking on, as the harness drives it (a chunk cache
# is what sglang builds for `--disable-radix-cache` only when chunked prefill is on).
CHUNKED_PREFILL_SIZE = 8192


class UnsupportedUpstream(RuntimeError):
    """sglang is not installed here, or lacks a capability the adapter needs."""


def capabilities(device: str = "cpu") -> Capabilities:
    """The installed sglang's capabilities, probed once per process (all absent where there is none); the probe
    imports sglang, which fixes Triton's mode for `device` (a process runs one device)."""
    return probe(device)


def unsupported_reason(caps: Capabilities | None = None) -> str | None:
    """Why the adapter cannot speak the installed sglang (one line), or None."""
    caps = capabilities() if caps is None else caps
    if caps.version is None:
        return f"sglang is not installed in this environment; {SETUP_HINT}"
    return missing(ADAPTER_NEEDS, caps)


def supported_version(device: str = "cpu") -> str:
    """The installed sglang's version, once its capabilities meet the adapter's needs (else `UnsupportedUpstream`)."""
    caps = capabilities(device)
    problem = unsupported_reason(caps)
    if problem:
        raise UnsupportedUpstream(problem)
    assert caps.version is not None
    return caps.version


def tree_cores(device: str = "cpu") -> tuple[str, ...]:
    """The tree cores the installed sglang can name and build (none where there is no sglang or no choice)."""
    return capabilities(device).tree_cores


def paged_naive_path(device: str = "cpu") -> bool:
    """Whether the paged allocator has a naive torch path beside its Triton kernels (True without sglang: the
    check is then left to `load_dialect`)."""
    caps = capabilities(device)
    return caps.version is None or caps.paged_kernels_attr


# The process-wide config sglang's pool code reads (get_spec, get_serving, attention_backends): no speculative
# decoding, no radix tree, and the CPU attention backend, whose row writes use torch rather than a Triton kernel.
SERVER_ARGS = {"model_path": "dummy", "device": "cpu", "disable_radix_cache": True, "attention_backend": "torch_native"}


def _kept(value: Any) -> Any:
    """What a refused extend puts back: a copy of a list, dict or set, else the object itself."""
    return copy.copy(value) if isinstance(value, list | dict | set) else value


class Dialect:
    """The installed sglang's calls, each spelled as its capabilities say."""

    def __init__(self, caps: Capabilities, device: str = "cpu") -> None:
        self.caps = caps
        self.version = caps.version or ""
        self.device = device  # every pool, allocator and published config of this process lives there
        # Whether the paged allocator checks its free pages before it launches its kernel (else a short
        # allocation reads past the free list: a segfault under the interpreter, found by the component lockstep).
        self.paged_checks_before_kernel = caps.paged_checks_before_kernel
        prepare_sglang_import(device)
        from sglang.srt.managers import schedule_batch
        from sglang.srt.mem_cache import allocator, common, memory_pool
        from sglang.srt.runtime_context import publish
        from sglang.srt.sampling.sampling_params import SamplingParams
        from sglang.srt.server_args import ServerArgs
        from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

        self.schedule_batch = schedule_batch
        self.memory_pool = memory_pool
        self.allocator = allocator
        self.common = common
        self.sampling_params = SamplingParams
        self.no_speculation = SpeculativeAlgorithm.NONE
        self.server_args = ServerArgs(**{**SERVER_ARGS, "device": device})
        publish(self.server_args, role="scheduler")
        # The request fields the extend glue and `init_next_round_input` write before `prepare_for_extend` can
        # refuse.
        self.glue_fields = (
            "origin_input_ids",
            "full_untruncated_fill_ids",
            "prefix_len" if caps.prefix_len else "prefix_indices",
            "extend_end" if caps.extend_end else "extend_range",
            "last_node",
            *(("lock",) if caps.req_lock else ("lock_receipt",) if caps.lock_receipt else ()),
            "finished_reason",
        )

    def new_pool(self, rows: int, width: int) -> Any:
        return self.memory_pool.ReqToTokenPool(rows, width, device=self.device, enable_memory_saver=False)

    def new_allocator(self, tokens: int, need_sort: bool, page_size: int = 1, kernels: bool = False) -> Any:
        """`TokenToKVPoolAllocator` for page size 1, else `PagedTokenToKVPoolAllocator` whose extend and decode
        slot math runs upstream's Triton kernels (`kernels`) or its naive torch path."""
        # dtype and kvcache only size the KV buffers, which the allocator itself never touches.
        if page_size == 1:
            return self.allocator.TokenToKVPoolAllocator(tokens, torch.float16, self.device, None, need_sort)
        paged_class = self.allocator.PagedTokenToKVPoolAllocator
        paged = paged_class(tokens, page_size, torch.float16, self.device, None, need_sort)
        self.select_kernels(paged, kernels)
        return paged

    def select_kernels(self, paged: Any, kernels: bool) -> None:
        """Point the paged allocator at its Triton kernels or its naive path (refused where it has no switch)."""
        if self.caps.paged_kernels_attr:
            # Upstream reads the switch from the platform's Triton support (False on CPU); its interpreted
            # kernels run because the adapter set TRITON_INTERPRET=1 before importing sglang.
            paged.use_triton_kernels = kernels
        elif not kernels:
            # No switch: alloc_extend / alloc_decode always launch the Triton kernels (interpreted on CPU).
            raise ValueError(f"sglang {self.version}'s paged allocator has no naive path; use kernel_backend 'triton'")

    def in_free_group(self, allocator: Any) -> bool:
        """Whether the allocator's free group is open."""
        if self.caps.is_not_in_free_group:  # a flag beside an always-present list
            return not allocator.is_not_in_free_group
        return allocator.free_group is not None

    def free_group(self, allocator: Any) -> tuple[bool, torch.Tensor]:
        """Whether the allocator's free group is open, and the pages (slots at page size 1) freed into it, each as
        often as the group's end will release it: the slot tensors `free` deferred (deduplicated per page, as
        the paged free's `unique`) and the page ids or representatives the segment frees deferred."""
        is_open = self.in_free_group(allocator)
        ps = allocator.page_size
        slots = list(allocator.free_group or []) if is_open else []
        pages = [torch.cat(slots)] if slots and ps == 1 else [torch.unique(torch.cat(slots) // ps)] if slots else []
        if hasattr(allocator, "free_page_ids_group"):
            pages += list(allocator.free_page_ids_group)  # page ids
        else:
            pages += [reps // ps for reps in getattr(allocator, "free_page_reps_group", [])]  # slot representatives
        pending = torch.cat(pages).to(torch.int64) if pages and is_open else torch.empty(0, dtype=torch.int64)
        return is_open, pending

    def allocator_problem(self, allocator: Any) -> str | None:
        """Where the allocator keeps a counter beside a list (`num_staged_pages` beside `staged_pages`, which
        `available_size` reads), the two disagreeing; None when they agree or there is no such counter."""
        counted, staged = getattr(allocator, "num_staged_pages", None), getattr(allocator, "staged_pages", None)
        if counted is None or not isinstance(staged, list):
            return None
        listed = sum(int(pages.numel()) for pages in staged)
        return None if counted == listed else f"num_staged_pages {counted}, staged_pages hold {listed} pages"

    def release_slots(self, allocator: Any) -> torch.Tensor:
        """The freed pages waiting for a merge under `need_sort`, oldest first: the `release_pages` tensor, or
        the paged allocator's `staged_pages` list of tensors (newest last) where it stages them."""
        if allocator.page_size > 1 and self.caps.staged_pages:
            staged = allocator.staged_pages
            return torch.cat(staged[::-1]) if staged else torch.empty(0, dtype=torch.int64)
        pages = allocator.release_pages
        return torch.empty(0, dtype=torch.int64) if pages is None else pages.clone()

    def new_req(self, rid: int, max_new_tokens: int, skip_insert: bool = False) -> Any:
        """A `Req`; with `skip_insert` a PD bootstrap warm-up, which `Req.__init__` bars from the tree
        (`skip_radix_cache_insert`)."""
        from sglang.srt.disaggregation.utils import FAKE_BOOTSTRAP_HOST

        from impl.upstream.scheduler_host import upstream_rid

        params = self.sampling_params(max_new_tokens=max_new_tokens)
        params.normalize(None)  # as the tokenizer manager leaves them (stop lists empty, not None); no tokenizer
        host = {"bootstrap_host": FAKE_BOOTSTRAP_HOST} if skip_insert else {}
        req = self.schedule_batch.Req(upstream_rid(rid), "", array("q"), params, **host)
        assert req.skip_radix_cache_insert == skip_insert, "Req did not take the skip-insert kind"
        return req

    def model_config(self) -> types.SimpleNamespace:
        """The model-config stand-in every batch and the scheduler host read (see `_model_config`)."""
        return _model_config()

    def new_batch(self, reqs: list[Any], pool: Any, allocator: Any, cache: Any) -> Any:
        """`ScheduleBatch.init_new` for `reqs`; the model config is a stand-in (see `_model_config`)."""
        return self.schedule_batch.ScheduleBatch.init_new(
            reqs, pool, allocator, cache, _model_config(), False, self.no_speculation
        )

    def split_batch(self, batch: Any, index: int) -> Any:
        """The batch of the request at `index` alone, as the scheduler's `filter_batch` leaves it (on a copy)."""
        alone = _copy_batch(batch)
        alone.filter_batch(keep_indices=[index])
        return alone

    def merge_batches(self, batches: list[Any]) -> Any:
        """One batch of every request of `batches`, as the scheduler's `merge_batch` builds its running batch
        (on copies: each request's own batch stays as it was)."""
        merged = _copy_batch(batches[0])
        for other in batches[1:]:
            merged.merge_batch(_copy_batch(other))
        return merged

    def save_request(self, req: Any, cache: Any) -> Callable[[], None]:
        """A closure that puts back what an extend's glue wrote before upstream allocated (the request's fields,
        and the lock its fresh match took), for an extend refused there."""
        # Containers are copied (the glue extends them in place); anything else is kept by reference: a copied
        # tree node would put a stranger back as the request's `last_node`, and its unlock would miss the tree.
        saved = {name: _kept(getattr(req, name)) for name in self.glue_fields}
        saved[LOCK_KEPT] = getattr(req, LOCK_KEPT, False)
        protected_len, locks = self.protected_len(req), getattr(req, GLUE_LOCKS, 0)

        def restore() -> None:
            if getattr(req, GLUE_LOCKS, 0) != locks:
                self.unlock(req, cache)
            for name, value in saved.items():
                setattr(req, name, value)
            self.set_protected_len(req, protected_len)

        return restore

    def mark_finished(self, req: Any) -> None:
        """What the result processor's finish check leaves on a request that ran out of length."""
        req.finished_reason = self.schedule_batch.FINISH_LENGTH(length=len(req.output_ids))

    # -- the prefix cache --------------------------------------------------------------------------------

    def new_cache(self, pool: Any, allocator: Any, config: PoolConfig) -> Any:
        """The prefix cache upstream's factory builds for a full-attention model: for `--disable-radix-cache`
        ('chunk'), or its default radix tree ('radix', on `config.tree_core` where the tree core can be named,
        checked, since a core that cannot load falls back to the Python one silently)."""
        from sglang.srt.mem_cache import registry
        from sglang.srt.mem_cache.cache_init_params import CacheInitParams

        radix = config.cache == "radix"
        core = {"tree_core_backend": config.tree_core} if radix and self.caps.tree_core_backend else {}
        params = CacheInitParams(
            disable=not radix,
            req_to_token_pool=pool,
            token_to_kv_pool_allocator=allocator,
            page_size=config.page_size,
            **core,
        )
        cache = registry.default_radix_cache_factory(_build_context(registry, self.server_args, params, radix))
        built = type(getattr(cache, "tree_core", None)).__name__
        if core and built != TREE_CORE_CLASSES[config.tree_core]:
            raise ValueError(f"tree core {config.tree_core!r} asked for, sglang built {built} (it fell back)")
        return cache

    def tree(self, cache: Any) -> NoTree:
        return tree_for(cache, self.caps)

    def lock(self, req: Any, cache: Any) -> None:
        """PrefillAdder's lock on the node a fresh match ended at (`add_one_req`)."""
        setattr(req, GLUE_LOCKS, getattr(req, GLUE_LOCKS, 0) + 1)
        if self.caps.req_lock:
            req.lock = cache.lock(req.last_node)
        elif self.caps.lock_receipt:
            req.lock_receipt = cache.inc_lock_ref(req.last_node).to_dec_params()
        else:
            cache.inc_lock_ref(req.last_node)

    def unlock(self, req: Any, cache: Any) -> None:
        """Undo `lock`, for an extend refused after its match (the scheduler would not have admitted it)."""
        if self.caps.req_lock:
            cache.unlock(req.lock)
            req.lock = None
        elif self.caps.lock_receipt:
            cache.dec_lock_ref(req.last_node, req.lock_receipt)
        else:
            cache.dec_lock_ref(req.last_node)

    def lock_handle(self, req: Any) -> Any:
        """What the request holds its tree lock by (`req.lock`, `req.lock_receipt` or `req.last_node`)."""
        if self.caps.req_lock:
            return req.lock
        return req.lock_receipt if self.caps.lock_receipt else req.last_node

    def tree_locked(self, req: Any, cache: Any) -> bool:
        """Whether the request holds a lock on a tree node below the root."""
        if self.caps.req_lock:
            return req.lock is not None and self.tree(cache).node_locked(cache, req.lock.node)
        # Without a handle, release unlocks `last_node` but leaves it on the request until the next match (or
        # `reset_for_retract`), and lock counts are per node, not per holder: a request holds its lock while it
        # holds its row. A lock the release forgot shows in the tree's protected count, which the lock-holder
        # invariant compares with the records that still hold one. The hand-written PP release is the one path
        # that frees the row and keeps the lock (`LOCK_KEPT`).
        holds = self.row(req) is not None or getattr(req, LOCK_KEPT, False)
        return holds and self.tree(cache).node_locked(cache, req.last_node)

    def peek(self, cache: Any, token_ids: list[int]) -> tuple[int, frozenset[int]]:
        """The length a fresh match of `token_ids` would find, and the slots of the matched path that sit on
        unlocked nodes, read without splitting a node or touching access times."""
        return self.tree(cache).peek(cache, token_ids)

    def tree_view(self, cache: Any) -> TreeView:
        """The cache's slots, recount and own consistency check (`EMPTY_TREE` without a tree)."""
        return self.tree(cache).view(cache)

    def watch_evictions(self, cache: Any, allocator: Any, on_demand: bool) -> EvictionLog:
        """Hooks on this cache instance that log every on-demand eviction (or, without `on_demand`, stop it);
        the explicit `evict` goes around them."""
        return self.tree(cache).watch_evictions(cache, allocator, on_demand)

    def evict(self, cache: Any, num_tokens: int) -> int:
        """The tree's `evict(EvictParams(num_tokens))`, as an explicit step; the tokens it freed."""
        return self.tree(cache).evict(cache, num_tokens)

    # -- the record ----------------------------------------------------------------------------------------

    def row(self, req: Any) -> int | None:
        """The record's `req_pool_idx`."""
        return req.kv.req_pool_idx if self.caps.record_in_kv else req.req_pool_idx

    def set_row(self, req: Any, row: int | None) -> None:
        """Write `req_pool_idx` directly, as a bypassed free would have left it."""
        if self.caps.record_in_kv:
            req.kv.req_pool_idx = row
        else:
            req.req_pool_idx = row

    def committed_len(self, req: Any) -> int:
        """The record's `kv_committed_len`."""
        return req.kv.kv_committed_len if self.caps.record_in_kv else req.kv_committed_len

    def set_committed_len(self, req: Any, length: int) -> None:
        """Write `kv_committed_len`, as the result processor does for a speculative verify's accepted tokens."""
        if self.caps.record_in_kv:
            req.kv.kv_committed_len = length
        else:
            req.kv_committed_len = length

    def protected_len(self, req: Any) -> int:
        """The record's `cache_protected_len`."""
        return req.kv.cache_protected_len if self.caps.record_in_kv else req.cache_protected_len

    def set_protected_len(self, req: Any, length: int) -> None:
        """Write `cache_protected_len` back (a refused extend's rematch may have set it)."""
        if self.caps.record_in_kv:
            req.kv.cache_protected_len = length
        else:
            req.cache_protected_len = length

    def allocated_len(self, req: Any) -> int:
        """The record's `kv_allocated_len` (0 for a record release dropped)."""
        return 0 if req.kv is None else req.kv.kv_allocated_len

    def hold_record(self, req: Any, length: int) -> None:
        """Write the record a request has after its first chunk of `length` tokens on its row."""
        if self.caps.record_always_present:
            req.kv.kv_allocated_len = length
        else:
            req.kv = self.schedule_batch.ReqKvInfo(kv_allocated_len=length, swa_evicted_seqlen=0)
        self.set_committed_len(req, length)

    def release_record(self, req: Any) -> None:
        """Mark the record released as release does: `mark_kv_released`, or drop `req.kv`."""
        if self.caps.mark_kv_released:
            req.kv.mark_kv_released()
        else:
            req.kv = None

    def make_stale(self, req: Any, row: int, committed_len: int) -> None:
        """A released record that still names `row`, as a release that skipped `ReqToTokenPool.free` leaves it."""
        self.set_row(req, row)
        self.set_committed_len(req, committed_len)
        self.release_record(req)

    def prefix_len(self, req: Any) -> int:
        return req.prefix_len if self.caps.prefix_len else req.prefix_indices.shape[0]

    def extend_end(self, req: Any) -> int:
        if self.caps.extend_end:
            return req.extend_end or 0
        return 0 if req.extend_range is None else req.extend_range.end

    def record_view(self, req: Any, cache: Any, status: str, prompt_len: int | None) -> RecordView:
        """The record, the request's prefix, extend range and tree lock as plain values."""
        return RecordView(
            row=self.row(req),
            protected_len=self.protected_len(req),
            committed_len=self.committed_len(req),
            allocated_len=self.allocated_len(req),
            inflight_middle_chunks=req.inflight_middle_chunks,
            status=status,
            prefix_len=self.prefix_len(req),
            tree_locked=self.tree_locked(req, cache),
            extend_end=self.extend_end(req),
            prompt_len=prompt_len,
        )

    # -- the lifecycle calls -------------------------------------------------------------------------------

    def open_extend(self, req: Any, cache: Any, rematch: bool, seq_len: int) -> None:
        """The scheduler's steps before `prepare_for_extend`: match the prefix afresh and lock it (a new or
        released request) or refresh the fill ids only (a continuation), then set the extend range to end at
        `seq_len`."""
        if rematch:
            req.init_next_round_input(cache)  # sets the prefix and cache_protected_len from the match
            setattr(req, LOCK_KEPT, False)  # a fresh match: whatever lock the request kept is its old node's
            self.lock(req, cache)
        else:
            req.init_next_round_input()  # a continuation keeps its prefix: no tree, as for the chunked request
        if self.caps.extend_end:
            req.extend_end = seq_len  # PrefillAdder's extend range [prefix_len, seq_len)
        else:
            req.set_extend_range(self.prefix_len(req), seq_len)

    def retract(self, req: Any, pool: Any, allocator: Any, cache: Any, remaining: int) -> None:
        """The scheduler's `release_req` for one retracted request: release without insert, evict for the
        `remaining` running requests, `reset_for_retract`."""
        extra = {"server_args": self.server_args} if self.caps.release_req_server_args else {}
        self.schedule_batch.release_req(
            req=req,
            remaing_req_count=remaining,
            req_to_token_pool=pool,
            token_to_kv_pool_allocator=allocator,
            tree_cache=cache,
            hisparse_coordinator=None,
            **extra,
        )

    def retract_decode(self, batch: Any) -> tuple[list[Any], list[Any]]:
        """`ScheduleBatch.retract_decode` on `batch`: the requests it retracted, in its order, and those it aborted."""
        extra = (self.server_args,) if self.caps.retract_decode_server_args else ()
        log = logging.getLogger(self.schedule_batch.__name__)
        if log.level != logging.ERROR:  # its abort of the last request is a warning the lockstep reports itself
            log.setLevel(logging.ERROR)
        retracted, _, to_abort = batch.retract_decode(*extra)
        return list(retracted), list(to_abort)

    def retraction_order(self, reqs: list[Any]) -> list[int]:
        """`ScheduleBatch._get_decode_retraction_order` on `reqs`: their indices, most preferred to keep first
        (0.5.18 takes `server_args` there as in `retract_decode`)."""
        extra = (self.server_args,) if self.caps.retract_decode_server_args else ()
        return list(self.schedule_batch.ScheduleBatch._get_decode_retraction_order(reqs, *extra))

    def stash(self, req: Any, cache: Any) -> None:
        """The stash after an extend that leaves the request unfinished (the next chunk reads it)."""
        if self.caps.checkpoint_kv_cache:
            self.common.checkpoint_kv_cache(req, cache)
        else:
            self.common.maybe_cache_unfinished_req(req, cache, chunked=True)

    def release(self, req: Any, cache: Any, insert: bool) -> None:
        """`release_kv_cache` with insertion into the tree on or off."""
        if self.caps.release_checkpoint:
            self.common.release_kv_cache(req, cache, checkpoint=insert)
        else:
            self.common.release_kv_cache(req, cache, is_insert=insert)

    def pp_release_manual(self, req: Any, cache: Any) -> None:
        """The hand-written PP-profiling release that `release_kv_cache` replaced."""
        # Scheduler.profile_and_init_predictor (0.5.18's scheduler_pp_mixin.py) releases its synthetic request
        # inline with exactly these steps; the mamba step is left out because this pool has no mamba state.
        # Later releases call release_kv_cache there; the same steps run on their record, for comparison.
        row = self.row(req)
        if row is None:
            return
        setattr(req, LOCK_KEPT, not self.caps.req_lock and self.tree_locked(req, cache))
        pool = cache.req_to_token_pool
        cache.token_to_kv_pool_allocator.free(pool.req_to_token[row, : self.extend_end(req)])
        pool.free(req)
        self.release_record(req)


def _build_context(registry: Any, server_args: Any, params: Any, radix: bool) -> Any:
    """`TreeCacheBuildContext` for a full-attention, single-rank scheduler without a worker or a model config,
    given by field name (releases add and drop fields)."""
    known = {
        "server_args": server_args,
        "params": params,
        "is_hybrid_swa": False,
        "is_hybrid_ssm": False,
        "enable_hierarchical_cache": False,
        "disable_radix_cache": not radix,
        "effective_chunked_prefill_size": CHUNKED_PREFILL_SIZE,
        "tp_worker": None,
        "model_config": None,
        "tp_size": 1,
        "tp_rank": 0,
        "tp_group": None,
    }
    fields = {f.name for f in dataclasses.fields(registry.TreeCacheBuildContext)}
    return registry.TreeCacheBuildContext(**{name: value for name, value in known.items() if name in fields})


def _copy_batch(batch: Any) -> Any:
    """A batch `filter_batch` / `merge_batch` can change without changing `batch`: both rebind the batch's
    fields (never mutate its tensors), and change the sampling info in place, which gets its own copy here."""
    copied = copy.copy(batch)
    copied.sampling_info = copy.copy(batch.sampling_info)
    return copied


def _model_config() -> types.SimpleNamespace:
    # ScheduleBatch reads two fields of the model config on these paths: a decoder-only model, and a vocab
    # size for the sampling info. Building a real ModelConfig would need a model on disk.
    return types.SimpleNamespace(is_encoder_decoder=False, vocab_size=32000)


@functools.cache
def load_dialect(device: str = "cpu") -> Dialect:
    """Import the installed sglang (once per process) and return the dialect that speaks it on `device`; a
    process runs one device (Triton's mode is fixed at import: `impl.triton_env.TritonModeError` otherwise)."""
    supported_version(device)
    return Dialect(capabilities(device), device)
