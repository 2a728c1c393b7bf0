"""How each supported sglang version spells the pool's calls and the KV record; the target speaks through one.

Between 0.5.18 and 0.5.23 the record moved. 0.5.18 keeps `req_pool_idx`, `kv_committed_len` and
`cache_protected_len` on `Req`, and `req.kv` is an optional `ReqKvInfo(kv_allocated_len, swa_evicted_seqlen)`
that release sets to None. 0.5.23 keeps all of them in `req.kv`, a `ReqKvInfo` that is never None and that
release marks (`mark_kv_released`). The chunk cache moved too: 0.5.18's `ChunkCache` became, in 0.5.23, a
`UnifiedRadixCache` built with `disable=True` (what sglang builds for `--disable-radix-cache`).
"""

from __future__ import annotations

import abc
import copy
import dataclasses
import functools
import importlib.metadata
import types
from array import array
from collections.abc import Callable
from typing import Any

import torch

from impl.target import PoolConfig, RecordView
from impl.upstream.compat import prepare_sglang_import

SUPPORTED_VERSIONS = ("0.5.18", "0.5.23")
# Whether `PagedTokenToKVPoolAllocator` can run its naive torch path: 0.5.23 has the `use_triton_kernels`
# switch; 0.5.18 always launches `alloc_extend_kernel` / `alloc_decode_kernel`.
PAGED_NAIVE_PATH = {"0.5.18": False, "0.5.23": True}
# The tree cores `UnifiedRadixCache` can be built on (`CacheInitParams.tree_core_backend`), servers' first; 0.5.18's
# radix tree is one Python class.
TREE_CORES = {"0.5.18": (), "0.5.23": ("rust", "python")}
SETUP_HINT = "build a venv with `make sglang-setup` (upstream/setup.sh VERSION) and run under its python"


class UnsupportedUpstream(RuntimeError):
    """sglang is not installed here, or is a version the adapter does not speak."""


@functools.cache
def installed_version_or_none() -> str | None:
    """The installed sglang version, or None when sglang is absent; reads package metadata once per process
    (parsing it costs about as much as building a pool)."""
    try:
        return importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        return None


def tree_cores() -> tuple[str, ...]:
    """The tree cores of the installed version (none where there is no sglang or its tree has no cores)."""
    return TREE_CORES.get(installed_version_or_none() or "", ())


def installed_version() -> str:
    """The installed sglang version, checked against the versions the adapter speaks."""
    version = installed_version_or_none()  # read once per process
    if version is None:
        raise UnsupportedUpstream(f"sglang is not installed in this environment; {SETUP_HINT}")
    if version not in SUPPORTED_VERSIONS:
        raise UnsupportedUpstream(
            f"sglang {version} is not supported by the upstream target; supported: {', '.join(SUPPORTED_VERSIONS)}"
        )
    return version


# The process-wide config sglang's pool code reads (get_spec, get_serving, attention_backends): no speculative
# decoding, no radix tree, and the CPU attention backend, whose row writes use torch rather than a Triton kernel.
SERVER_ARGS = {"model_path": "dummy", "device": "cpu", "disable_radix_cache": True, "attention_backend": "torch_native"}


# Counted up on a `Req` each time the glue locks its matched node, so that a refused extend knows whether it took a
# lock to give back: a handle compared by identity cannot tell where a rematch ends on the node already held.
GLUE_LOCKS = "_kvlife_glue_locks"


def _kept(value: Any) -> Any:
    """What a refused extend puts back: a copy of a list, dict or set, else the object itself."""
    return copy.copy(value) if isinstance(value, list | dict | set) else value


class Dialect(abc.ABC):
    """The calls both versions share; subclasses add what differs (record fields, stash, release, cache)."""

    version = ""
    # Whether the paged allocator checks its free pages before it launches its kernel (else a short allocation
    # reads past the free list: a segfault under the interpreter, found by the component lockstep).
    paged_checks_before_kernel = True
    # The request fields the extend glue and `init_next_round_input` write before `prepare_for_extend` can refuse.
    glue_fields: tuple[str, ...] = ()

    def __init__(self, device: str = "cpu") -> None:
        self.device = device  # every pool, allocator and published config of this process lives there
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

    def free_group(self, allocator: Any) -> tuple[bool, torch.Tensor]:
        """Whether the allocator's free group is open, and the pages (slots at page size 1) freed into it, each as
        often as the group's end will release it: the slot tensors `free` deferred (deduplicated per page, as
        the paged free's `unique`) and the page ids or representatives the segment frees deferred."""
        if hasattr(allocator, "is_not_in_free_group"):  # 0.5.18: a flag beside an always-present list
            is_open = not allocator.is_not_in_free_group
        else:
            is_open = allocator.free_group is not None
        ps = allocator.page_size
        slots = list(allocator.free_group or []) if is_open else []
        pages = [torch.cat(slots)] if slots and ps == 1 else [torch.unique(torch.cat(slots) // ps)] if slots else []
        if hasattr(allocator, "free_page_ids_group"):
            pages += list(allocator.free_page_ids_group)  # 0.5.23: page ids
        else:
            pages += [reps // ps for reps in getattr(allocator, "free_page_reps_group", [])]  # 0.5.18: slot reps
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
        """The freed pages waiting for a merge under `need_sort` (`release_pages`), oldest first."""
        pages = allocator.release_pages
        return torch.empty(0, dtype=torch.int64) if pages is None else pages.clone()

    def flush(self, pool: Any, allocator: Any, cache: Any) -> None:
        """The pool steps of `Scheduler.flush_cache` on an idle scheduler, in its order."""
        cache.reset()
        pool.clear()
        allocator.clear()

    def mark_aborted(self, req: Any) -> None:
        """What `prepare_abort` leaves on an aborted request (its finish reason)."""
        req.finished_reason = self.schedule_batch.FINISH_ABORT("Aborted")

    def new_req(self, rid: int, max_new_tokens: int, skip_insert: bool = False) -> Any:
        """A `Req`; with `skip_insert` a PD bootstrap warm-up, which `Req.__init__` bars from the tree
        (`skip_radix_cache_insert`)."""
        from sglang.srt.disaggregation.utils import FAKE_BOOTSTRAP_HOST

        params = self.sampling_params(max_new_tokens=max_new_tokens)
        host = {"bootstrap_host": FAKE_BOOTSTRAP_HOST} if skip_insert else {}
        req = self.schedule_batch.Req(str(rid), "", array("q"), params, **host)
        assert req.skip_radix_cache_insert == skip_insert, "Req did not take the skip-insert kind"
        return req

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
        protected_len, locks = self.protected_len(req), getattr(req, GLUE_LOCKS, 0)

        def restore() -> None:
            if getattr(req, GLUE_LOCKS, 0) != locks:  # the glue locked again, if only the node it held
                self.unlock(req, cache)
            for name, value in saved.items():
                setattr(req, name, value)
            self.set_protected_len(req, protected_len)

        return restore

    def mark_finished(self, req: Any) -> None:
        """What the result processor's finish check leaves on a request that ran out of length."""
        req.finished_reason = self.schedule_batch.FINISH_LENGTH(length=len(req.output_ids))

    # -- the prefix cache --------------------------------------------------------------------------------

    @abc.abstractmethod
    def new_cache(self, pool: Any, allocator: Any, config: PoolConfig) -> Any:
        """The prefix cache sglang builds for `config.cache`: with the radix tree disabled ('chunk'), or its
        default radix tree ('radix', on `config.tree_core` where the version has tree cores)."""

    @abc.abstractmethod
    def lock(self, req: Any, cache: Any) -> None:
        """PrefillAdder's lock on the node a fresh match ended at (`add_one_req`)."""

    @abc.abstractmethod
    def unlock(self, req: Any, cache: Any) -> None:
        """Undo `lock`, for an extend refused after its match (the scheduler would not have admitted it)."""

    @abc.abstractmethod
    def lock_handle(self, req: Any) -> Any:
        """What the request holds its tree lock by (0.5.23 `req.lock`, 0.5.18 `req.last_node`)."""

    @abc.abstractmethod
    def tree_locked(self, req: Any, cache: Any) -> bool:
        """Whether the request holds a lock on a tree node below the root."""

    @abc.abstractmethod
    def peek(self, cache: Any, token_ids: list[int]) -> tuple[int, frozenset[int]]:
        """The length a fresh match of `token_ids` would find, and the slots of the matched path that sit on
        unlocked nodes, read without splitting a node or touching access times."""

    @abc.abstractmethod
    def tree_view(self, cache: Any) -> TreeView:
        """The cache's slots, recount and own consistency check (`EMPTY_TREE` for a disabled tree)."""

    @abc.abstractmethod
    def watch_evictions(self, cache: Any, allocator: Any, on_demand: bool) -> EvictionLog:
        """Hooks on this cache instance that log every on-demand eviction (or, without `on_demand`, stop it);
        the explicit `evict` goes around them."""

    @abc.abstractmethod
    def evict(self, cache: Any, num_tokens: int) -> int:
        """The tree's `evict(EvictParams(num_tokens))`, as an explicit step; the tokens it freed."""

    @abc.abstractmethod
    def select_kernels(self, paged: Any, kernels: bool) -> None:
        """Point the paged allocator at its Triton kernels or its naive path (refused where the version cannot)."""

    @abc.abstractmethod
    def retract(self, req: Any, pool: Any, allocator: Any, cache: Any, remaining: int) -> None:
        """The scheduler's `release_req` for one retracted request: release without insert, evict for the
        `remaining` running requests, `reset_for_retract`."""

    @abc.abstractmethod
    def row(self, req: Any) -> int | None:
        """The record's `req_pool_idx`."""

    @abc.abstractmethod
    def set_row(self, req: Any, row: int | None) -> None:
        """Write `req_pool_idx` directly, as a bypassed free would have left it."""

    @abc.abstractmethod
    def committed_len(self, req: Any) -> int:
        """The record's `kv_committed_len`."""

    @abc.abstractmethod
    def set_committed_len(self, req: Any, length: int) -> None:
        """Write `kv_committed_len`, as the result processor does for a speculative verify's accepted tokens."""

    @abc.abstractmethod
    def protected_len(self, req: Any) -> int:
        """The record's `cache_protected_len`."""

    @abc.abstractmethod
    def set_protected_len(self, req: Any, length: int) -> None:
        """Write `cache_protected_len` back (a refused extend's rematch may have set it)."""

    @abc.abstractmethod
    def record_view(self, req: Any, cache: Any, status: str, prompt_len: int | None) -> RecordView:
        """The record, the request's prefix, extend range and tree lock as plain values."""

    @abc.abstractmethod
    def open_extend(self, req: Any, cache: Any, rematch: bool, seq_len: int) -> None:
        """The scheduler's steps before `prepare_for_extend`: match the prefix afresh and lock it (a new or
        released request) or refresh the fill ids only (a continuation), then set the extend range to end at
        `seq_len`."""

    @abc.abstractmethod
    def stash(self, req: Any, cache: Any) -> None:
        """The stash after an extend that leaves the request unfinished (the next chunk reads it)."""

    @abc.abstractmethod
    def release(self, req: Any, cache: Any, insert: bool) -> None:
        """`release_kv_cache` with insertion into the tree on or off."""

    @abc.abstractmethod
    def pp_release_manual(self, req: Any, cache: Any) -> None:
        """The hand-written PP-profiling release that `release_kv_cache` replaced."""


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
    version = installed_version()
    from impl.upstream import v0518, v0523

    dialect: Dialect = v0523.Dialect0523(device) if version == "0.5.23" else v0518.Dialect0518(device)
    return dialect
