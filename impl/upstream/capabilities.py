"""What the installed sglang offers the upstream adapter, found by inspection, never by version number.

Each API difference between releases that the adapter depends on is one probe below: it reads the installed
sglang (attributes, signatures, dataclass fields, modules present, the attributes of a freshly built `Req` and
paged allocator) and answers a plain value. `probe()` runs them all once per process into a frozen
`Capabilities`; `missing(required)` names, in one line, the first requirement the installed sglang lacks.
A probe that cannot read what it looks for answers its field's default (absent); none raises. Behaviour (the
reuse guard, whether `clear()` keeps row generations, free-list order) cannot be probed: that is the harness's
job. `python -m impl.upstream.capabilities [--json]` prints them.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import importlib.metadata
import importlib.util
import inspect
import json
import sys
from array import array
from collections.abc import Callable, Iterable
from types import ModuleType
from typing import Any

SCHEDULE_BATCH = "sglang.srt.managers.schedule_batch"
COMMON = "sglang.srt.mem_cache.common"
MEMORY_POOL = "sglang.srt.mem_cache.memory_pool"
ALLOCATOR = "sglang.srt.mem_cache.allocator"
CACHE_INIT_PARAMS = "sglang.srt.mem_cache.cache_init_params"
CHUNK_CACHE = "sglang.srt.mem_cache.chunk_cache"
RADIX_CACHE = "sglang.srt.mem_cache.radix_cache"
UNIFIED_RADIX_CACHE = "sglang.srt.mem_cache.unified_radix_cache"
UNIFIED_TREE_CORE = "sglang.srt.mem_cache.unified_cache.unified_tree_core"
TREE_CORE_REGISTRY = "sglang.srt.mem_cache.unified_cache.tree_core_registry"
BASE_PREFIX_CACHE = "sglang.srt.mem_cache.base_prefix_cache"
RUNTIME_CONTEXT = "sglang.srt.runtime_context"
SERVER_ARGS = "sglang.srt.server_args"
SAMPLING_PARAMS = "sglang.srt.sampling.sampling_params"
PD_DECODE = "sglang.srt.disaggregation.decode"
REGISTRY = "sglang.srt.mem_cache.registry"
# The order in which the adapter builds `ScheduleBatch.init_new`'s positional arguments.
INIT_NEW_PARAMS = (
    "reqs",
    "req_to_token_pool",
    "token_to_kv_pool_allocator",
    "tree_cache",
    "model_config",
    "enable_overlap",
    "spec_algorithm",
)
# The server args the adapter publishes for a CPU scheduler (`dialects.SERVER_ARGS`).
CPU_SERVER_ARGS = ("model_path", "device", "disable_radix_cache", "attention_backend")


class Upstream:
    """The installed sglang as the probes read it: modules by name, None where absent or failing to import, and
    one fresh `Req` and paged allocator, None where they cannot be built."""

    def __init__(self) -> None:
        self._modules: dict[str, ModuleType | None] = {}

    def module(self, name: str) -> ModuleType | None:
        if name not in self._modules:
            try:
                self._modules[name] = importlib.import_module(name)
            except Exception:  # absent, or broken by a missing dependency: either way not there to use
                self._modules[name] = None
        return self._modules[name]

    def attr(self, module: str, *path: str) -> Any:
        """`module.path[0].path[1]...`, or None where any step is missing."""
        value: Any = self.module(module)
        for name in path:
            value = getattr(value, name, None)
        return value

    @functools.cached_property
    def req(self) -> Any:
        """A new `Req`, as the adapter builds one."""
        try:
            params = self.attr(SAMPLING_PARAMS, "SamplingParams")(max_new_tokens=1)
            return self.attr(SCHEDULE_BATCH, "Req")("0", "", array("q"), params)
        except Exception:  # a constructor the adapter could not call either
            return None

    @functools.cached_property
    def paged(self) -> Any:
        """A new 4-page `PagedTokenToKVPoolAllocator` on CPU, as the adapter builds one."""
        import torch

        try:
            return self.attr(ALLOCATOR, "PagedTokenToKVPoolAllocator")(16, 4, torch.float16, "cpu", None, False)
        except Exception:
            return None


PROBES: dict[str, Callable[[Upstream], Any]] = {}


def _probe(fn: Callable[[Upstream], Any]) -> Callable[[Upstream], Any]:
    PROBES[fn.__name__] = fn
    return fn


def _has(obj: Any, *names: str) -> bool:
    return obj is not None and all(hasattr(obj, name) for name in names)


def _params(fn: Any) -> tuple[str, ...]:
    return () if fn is None else tuple(inspect.signature(fn).parameters)


def _fields(cls: Any) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls)) if dataclasses.is_dataclass(cls) else ()


# -- the KV record --------------------------------------------------------------------------------------------


@_probe
def record_fields(up: Upstream) -> tuple[str, ...]:
    """The fields of `ReqKvInfo`, the request's KV record."""
    return _fields(up.attr(SCHEDULE_BATCH, "ReqKvInfo"))


@_probe
def record_in_kv(up: Upstream) -> bool:
    """`ReqKvInfo` holds the row (`req_pool_idx`) and the protected, committed and allocated lengths."""
    needed = {"req_pool_idx", "cache_protected_len", "kv_committed_len", "kv_allocated_len"}
    return needed <= set(record_fields(up))


@_probe
def record_on_req(up: Upstream) -> bool:
    """`Req` itself holds the row and the committed and protected lengths (`req.kv` only the allocated one)."""
    return _has(up.req, "req_pool_idx", "kv_committed_len", "cache_protected_len")


@_probe
def record_always_present(up: Upstream) -> bool:
    """A new `Req` has its `ReqKvInfo` already (else `req.kv` is None until allocation and after release)."""
    return isinstance(up.req.kv, up.attr(SCHEDULE_BATCH, "ReqKvInfo"))


@_probe
def mark_kv_released(up: Upstream) -> bool:
    """`ReqKvInfo.mark_kv_released`, which release calls instead of dropping the record."""
    return _has(up.attr(SCHEDULE_BATCH, "ReqKvInfo"), "mark_kv_released")


@_probe
def holds_kv(up: Upstream) -> bool:
    """`ReqKvInfo.holds_kv`, the record's presence check."""
    return _has(up.attr(SCHEDULE_BATCH, "ReqKvInfo"), "holds_kv")


@_probe
def owned_kv_len(up: Upstream) -> bool:
    """`Req.owned_kv_len`."""
    return _has(up.attr(SCHEDULE_BATCH, "Req"), "owned_kv_len")


@_probe
def effective_kv_committed_len(up: Upstream) -> bool:
    """`Req.effective_kv_committed_len`."""
    return _has(up.attr(SCHEDULE_BATCH, "Req"), "effective_kv_committed_len")


# -- the request's prefix, extend range and tree lock ---------------------------------------------------------


@_probe
def prefix_len(up: Upstream) -> bool:
    """A request's matched prefix is a length, `req.prefix_len`."""
    return isinstance(getattr(up.req, "prefix_len", None), int)


@_probe
def prefix_indices(up: Upstream) -> bool:
    """A request's matched prefix is a tensor of slots, `req.prefix_indices`."""
    return _has(up.req, "prefix_indices")


@_probe
def extend_end(up: Upstream) -> bool:
    """The extend range is `[prefix_len, req.extend_end)`."""
    return _has(up.req, "extend_end")


@_probe
def set_extend_range(up: Upstream) -> bool:
    """The extend range is set by `req.set_extend_range(start, end)` into `req.extend_range`."""
    return _has(up.req, "set_extend_range", "extend_range")


@_probe
def req_lock(up: Upstream) -> bool:
    """A request holds its tree lock by a handle, `req.lock` (else by `req.last_node`)."""
    return _has(up.req, "lock")


@_probe
def lock_receipt(up: Upstream) -> bool:
    """A request keeps the receipt of its lock on `req.last_node` (`req.lock_receipt`, `DecLockRefParams`)."""
    return _has(up.req, "lock_receipt")


# -- release, stash, retract ----------------------------------------------------------------------------------


@_probe
def release_kv_cache_params(up: Upstream) -> tuple[str, ...]:
    """The parameters of `release_kv_cache`."""
    return _params(up.attr(COMMON, "release_kv_cache"))


@_probe
def release_checkpoint(up: Upstream) -> bool:
    """`release_kv_cache(req, tree_cache, *, checkpoint)`."""
    return "checkpoint" in release_kv_cache_params(up)


@_probe
def release_is_insert(up: Upstream) -> bool:
    """`release_kv_cache(req, tree_cache, is_insert)`."""
    return "is_insert" in release_kv_cache_params(up)


@_probe
def checkpoint_kv_cache(up: Upstream) -> bool:
    """`common.checkpoint_kv_cache`, the stash after an unfinished chunk."""
    return _has(up.module(COMMON), "checkpoint_kv_cache")


@_probe
def maybe_cache_unfinished_req(up: Upstream) -> bool:
    """`common.maybe_cache_unfinished_req`, the stash after an unfinished chunk."""
    return _has(up.module(COMMON), "maybe_cache_unfinished_req")


@_probe
def release_req_server_args(up: Upstream) -> bool:
    """`release_req` (retraction) takes `server_args`."""
    return "server_args" in _params(up.attr(SCHEDULE_BATCH, "release_req"))


@_probe
def retract_decode_server_args(up: Upstream) -> bool:
    """`ScheduleBatch.retract_decode` takes `server_args`."""
    return "server_args" in _params(up.attr(SCHEDULE_BATCH, "ScheduleBatch", "retract_decode"))


@_probe
def release_req(up: Upstream) -> bool:
    """`schedule_batch.release_req`, the scheduler's release of a retracted request."""
    return up.attr(SCHEDULE_BATCH, "release_req") is not None


# -- prefix caches --------------------------------------------------------------------------------------------


@_probe
def chunk_cache(up: Upstream) -> bool:
    """`mem_cache/chunk_cache.py`'s `ChunkCache` (else a disabled `UnifiedRadixCache` stands for it)."""
    return up.attr(CHUNK_CACHE, "ChunkCache") is not None


@_probe
def radix_cache(up: Upstream) -> bool:
    """`mem_cache/radix_cache.py`'s Python `RadixCache`."""
    return up.attr(RADIX_CACHE, "RadixCache") is not None


@_probe
def unified_radix_cache(up: Upstream) -> bool:
    """`UnifiedRadixCache`."""
    return up.attr(UNIFIED_RADIX_CACHE, "UnifiedRadixCache") is not None


@_probe
def cache_lock(up: Upstream) -> bool:
    """`UnifiedRadixCache.lock` / `unlock`, which hand out and take back a lock handle."""
    return _has(up.attr(UNIFIED_RADIX_CACHE, "UnifiedRadixCache"), "lock", "unlock")


@_probe
def inc_lock_ref(up: Upstream) -> bool:
    """`RadixCache.inc_lock_ref` / `dec_lock_ref` on a node."""
    return _has(up.attr(RADIX_CACHE, "RadixCache"), "inc_lock_ref", "dec_lock_ref")


@_probe
def sanity_check(up: Upstream) -> bool:
    """`UnifiedRadixCache.sanity_check`, the tree's own node-by-node recount."""
    return _has(up.attr(UNIFIED_RADIX_CACHE, "UnifiedRadixCache"), "sanity_check")


@_probe
def evict_for_alloc(up: Upstream) -> bool:
    """`UnifiedRadixCache.evict_for_alloc`, which allocation calls to make room."""
    return _has(up.attr(UNIFIED_RADIX_CACHE, "UnifiedRadixCache"), "evict_for_alloc")


@_probe
def evict_params(up: Upstream) -> bool:
    """`base_prefix_cache.EvictParams` / `EvictResult`, the tree's evict call."""
    return _has(up.module(BASE_PREFIX_CACHE), "EvictParams", "EvictResult")


@_probe
def match_full_device_prefix(up: Upstream) -> bool:
    """`UnifiedTreeCore.match_full_device_prefix`, a prefix match without side effects."""
    return _has(up.attr(UNIFIED_TREE_CORE, "UnifiedTreeCore"), "match_full_device_prefix")


@_probe
def walk_for_kv_canary(up: Upstream) -> bool:
    """`UnifiedTreeCore.walk_for_kv_canary`, the walk that lists a tree's (unlocked) slots."""
    return _has(up.attr(UNIFIED_TREE_CORE, "UnifiedTreeCore"), "walk_for_kv_canary")


@_probe
def radix_key_walk(up: Upstream) -> bool:
    """`RadixKey.page_aligned`, `child_key` and `match`, for a read-only walk of a `RadixCache`."""
    return _has(up.attr(RADIX_CACHE, "RadixKey"), "page_aligned", "child_key", "match")


@_probe
def collect_full_device_indices(up: Upstream) -> bool:
    """`UnifiedTreeCore.collect_full_device_indices` and `root_node_handle`, a path's slots from a node id."""
    return _has(up.attr(UNIFIED_TREE_CORE, "UnifiedTreeCore"), "collect_full_device_indices", "root_node_handle")


@_probe
def tree_cache_factory(up: Upstream) -> bool:
    """`registry.default_radix_cache_factory(TreeCacheBuildContext)`, which chooses the prefix cache a server builds."""
    return _has(up.module(REGISTRY), "default_radix_cache_factory", "TreeCacheBuildContext")


@_probe
def tree_core_backend(up: Upstream) -> bool:
    """`CacheInitParams.tree_core_backend`, which names the tree core a `UnifiedRadixCache` is built on."""
    return "tree_core_backend" in _fields(up.attr(CACHE_INIT_PARAMS, "CacheInitParams"))


@_probe
def rust_core_fallback(up: Upstream) -> str:
    """Why upstream builds the Python tree core when asked for the Rust one ('' where it builds the Rust one)."""
    registry = up.module(TREE_CORE_REGISTRY)
    if registry is None or "rust" not in registry.registered_tree_core_backends():
        return "no Rust tree core is registered"
    component = registry.ComponentType.FULL
    params = up.attr(CACHE_INIT_PARAMS, "CacheInitParams")(False, None, None, 1, tree_components=(component,))
    explain = getattr(registry, "_rust_fallback_reason", None)  # private, so read where it is there
    if explain is not None:
        return explain(params) or ""
    resolved = registry.resolve_tree_core_backend("rust", params)
    return "" if resolved == "rust" else f"upstream resolves 'rust' to {resolved!r}"


@_probe
def tree_cores(up: Upstream) -> tuple[str, ...]:
    """The tree cores `tree_core_backend` can name that build here, the Rust one (servers' default) first."""
    registry = up.module(TREE_CORE_REGISTRY)
    if not tree_core_backend(up) or registry is None:
        return ()
    names = [name for name in registry.registered_tree_core_backends() if name != "rust" or not rust_core_fallback(up)]
    return tuple(sorted(names, key=lambda name: (name != "rust", name)))


# -- row pools and allocators ---------------------------------------------------------------------------------


@_probe
def alloc_rows(up: Upstream) -> bool:
    """`ReqToTokenPool.alloc_rows` / `free_rows`, rows without requests."""
    return _has(up.attr(MEMORY_POOL, "ReqToTokenPool"), "alloc_rows", "free_rows")


@_probe
def register_on_alloc_rows(up: Upstream) -> bool:
    """`ReqToTokenPool.register_on_alloc_rows`, a hook told of every row handed out."""
    return _has(up.attr(MEMORY_POOL, "ReqToTokenPool"), "register_on_alloc_rows")


@_probe
def reset_aux_cache_allocator(up: Upstream) -> bool:
    """`ReqToTokenPool.reset_aux_cache_allocator`, which a cache flush calls."""
    return _has(up.attr(MEMORY_POOL, "ReqToTokenPool"), "reset_aux_cache_allocator")


@_probe
def paged_kernels_param(up: Upstream) -> bool:
    """`PagedTokenToKVPoolAllocator(..., use_triton_kernels=...)`."""
    return "use_triton_kernels" in _params(up.attr(ALLOCATOR, "PagedTokenToKVPoolAllocator"))


@_probe
def paged_kernels_attr(up: Upstream) -> bool:
    """A paged allocator's `use_triton_kernels` switch between its Triton kernels and its naive torch path."""
    return isinstance(getattr(up.paged, "use_triton_kernels", None), bool)


@_probe
def paged_checks_before_kernel(up: Upstream) -> bool:
    """The paged allocator's `alloc_extend` and `alloc_decode` return None when short of pages before they launch
    their Triton kernel (read in their source: calling one short would read past the free list)."""
    paged = up.attr(ALLOCATOR, "PagedTokenToKVPoolAllocator")
    return all(_checks_before_kernel(getattr(paged, name, None)) for name in ("alloc_extend", "alloc_decode"))


def _checks_before_kernel(method: Any) -> bool:
    source = inspect.getsource(method)
    launch, refusal = source.find("_kernel["), source.find("return None")
    return refusal != -1 and (launch == -1 or refusal < launch)


@_probe
def staged_pages(up: Upstream) -> bool:
    """A paged allocator stages freed pages in `staged_pages` (else in the `release_pages` tensor)."""
    return isinstance(getattr(up.paged, "staged_pages", None), list)


@_probe
def is_not_in_free_group(up: Upstream) -> bool:
    """An allocator flags an open free group by `is_not_in_free_group` (else by `free_group` not None)."""
    return isinstance(getattr(up.paged, "is_not_in_free_group", None), bool)


@_probe
def page_free_group(up: Upstream) -> str:
    """Where a paged allocator's open free group keeps its page frees ('' where it has neither list)."""
    return next((name for name in ("free_page_ids_group", "free_page_reps_group") if _has(up.paged, name)), "")


@_probe
def evict_to_free_tokens(up: Upstream) -> bool:
    """A paged allocator's `evict_to_free_tokens`, through which allocation evicts (else `cache.evict` itself)."""
    return _has(up.attr(ALLOCATOR, "PagedTokenToKVPoolAllocator"), "evict_to_free_tokens")


@_probe
def decode_req_to_token_pool(up: Upstream) -> bool:
    """`disaggregation.decode.DecodeReqToTokenPool` imports (its module needs `einops`)."""
    return up.attr(PD_DECODE, "DecodeReqToTokenPool") is not None


# -- the process-wide context and the batch -------------------------------------------------------------------


@_probe
def publish_params(up: Upstream) -> tuple[str, ...]:
    """The parameters of `runtime_context.publish`."""
    return _params(up.attr(RUNTIME_CONTEXT, "publish"))


@_probe
def publish_role(up: Upstream) -> bool:
    """`runtime_context.publish(server_args, role=...)`."""
    return publish_params(up)[:1] == ("server_args",) and "role" in publish_params(up)


@_probe
def server_args_cpu(up: Upstream) -> bool:
    """`ServerArgs` takes the fields of a CPU scheduler: model_path, device, disable_radix_cache, attention_backend."""
    return set(CPU_SERVER_ARGS) <= set(_params(up.attr(SERVER_ARGS, "ServerArgs")))


@_probe
def schedule_batch_init_new(up: Upstream) -> bool:
    """`ScheduleBatch.init_new(reqs, req_to_token_pool, token_to_kv_pool_allocator, tree_cache, model_config,
    enable_overlap, spec_algorithm, ...)`."""
    return _params(up.attr(SCHEDULE_BATCH, "ScheduleBatch", "init_new"))[: len(INIT_NEW_PARAMS)] == INIT_NEW_PARAMS


@dataclasses.dataclass(frozen=True)
class Capabilities:
    """Every probe's answer for one installed sglang (`version` names it in messages only; nothing keys on it).
    Each field's default is its absent value; `PROBES` has one probe per field but `version`."""

    version: str | None = None
    record_fields: tuple[str, ...] = ()
    record_in_kv: bool = False
    record_on_req: bool = False
    record_always_present: bool = False
    mark_kv_released: bool = False
    holds_kv: bool = False
    owned_kv_len: bool = False
    effective_kv_committed_len: bool = False
    prefix_len: bool = False
    prefix_indices: bool = False
    extend_end: bool = False
    set_extend_range: bool = False
    req_lock: bool = False
    lock_receipt: bool = False
    release_kv_cache_params: tuple[str, ...] = ()
    release_checkpoint: bool = False
    release_is_insert: bool = False
    checkpoint_kv_cache: bool = False
    maybe_cache_unfinished_req: bool = False
    release_req_server_args: bool = False
    retract_decode_server_args: bool = False
    release_req: bool = False
    chunk_cache: bool = False
    radix_cache: bool = False
    unified_radix_cache: bool = False
    cache_lock: bool = False
    inc_lock_ref: bool = False
    sanity_check: bool = False
    evict_for_alloc: bool = False
    evict_params: bool = False
    match_full_device_prefix: bool = False
    walk_for_kv_canary: bool = False
    radix_key_walk: bool = False
    collect_full_device_indices: bool = False
    tree_cache_factory: bool = False
    tree_core_backend: bool = False
    rust_core_fallback: str = "no Rust tree core is registered"
    tree_cores: tuple[str, ...] = ()
    alloc_rows: bool = False
    register_on_alloc_rows: bool = False
    reset_aux_cache_allocator: bool = False
    paged_kernels_param: bool = False
    paged_kernels_attr: bool = False
    paged_checks_before_kernel: bool = False
    staged_pages: bool = False
    is_not_in_free_group: bool = False
    page_free_group: str = ""
    evict_to_free_tokens: bool = False
    decode_req_to_token_pool: bool = False
    publish_params: tuple[str, ...] = ()
    publish_role: bool = False
    server_args_cpu: bool = False
    schedule_batch_init_new: bool = False


# What the adapter needs today, whichever spelling a release has: a name must hold, and of names joined by '|'
# one must. `rust_core_fallback` is a reason, not a need: a release without the Rust core runs on the Python one.
ADAPTER_NEEDS = (
    "server_args_cpu",
    "publish_role",
    "schedule_batch_init_new",
    "record_in_kv|record_on_req",
    "prefix_len|prefix_indices",
    "extend_end|set_extend_range",
    "release_checkpoint|release_is_insert",
    "checkpoint_kv_cache|maybe_cache_unfinished_req",
    "release_req",
    "tree_cache_factory",
    "chunk_cache|unified_radix_cache",
    "radix_cache|unified_radix_cache",
    "cache_lock|inc_lock_ref",
    "evict_params",
    "walk_for_kv_canary|radix_key_walk",
)


def _answer(field: dataclasses.Field[Any], up: Upstream) -> Any:
    try:
        return PROBES[field.name](up)
    except Exception:  # whatever the probe could not read is absent; a probe never raises
        return field.default


def installed_version() -> str | None:
    """The installed sglang's version from package metadata (no import), or None where there is none."""
    try:
        return importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        return None


@functools.cache
def probe(device: str = "cpu") -> Capabilities:
    """Every capability of the installed sglang, probed once per process (all absent where there is no sglang).
    Importing sglang fixes Triton's mode, so the probe prepares the import for `device` (cpu: the interpreter)."""
    version = installed_version()
    if version is None or importlib.util.find_spec("sglang") is None:
        return Capabilities()
    from impl.upstream.compat import prepare_sglang_import

    prepare_sglang_import(device)  # the torchvision stand-in first, or sglang's modules do not import
    up = Upstream()
    answers = {f.name: _answer(f, up) for f in dataclasses.fields(Capabilities) if f.name != "version"}
    return Capabilities(version=version, **answers)


def describe(name: str) -> str:
    """The capability's one-line description (its probe's docstring, joined onto one line)."""
    doc = inspect.getdoc(PROBES[name]) or name
    return " ".join(doc.split())


def cell(value: Any) -> str:
    """A capability's value as a cell of the capability x release table (`docs/upstream-api.md`)."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list | tuple):
        return ", ".join(f"`{item}`" for item in value) or "none"
    return f"`{value}`" if value else "—"


def missing(required: Iterable[str], capabilities: Capabilities | None = None) -> str | None:
    """One line naming the first requirement the installed sglang (or `capabilities`) lacks, or None; a
    requirement is a capability's name, or names joined by '|' of which one must hold."""
    caps = probe() if capabilities is None else capabilities
    if caps.version is None:
        return "sglang is not installed in this environment"
    for requirement in required:
        names = requirement.split("|")
        unknown = [name for name in names if name not in PROBES]
        if unknown:
            raise ValueError(f"no such capability: {', '.join(unknown)}")
        if not any(getattr(caps, name) for name in names):
            wanted = " or ".join(f"{name} ({describe(name)})" for name in names)
            return f"sglang {caps.version} lacks a capability the upstream target needs: {wanted}"
    return None


def _main(argv: list[str]) -> int:
    caps = dataclasses.asdict(probe())
    if argv == ["--json"]:
        print(json.dumps(caps))
        return 0
    if argv:
        print("usage: python -m impl.upstream.capabilities [--json]", file=sys.stderr)
        return 2
    for name, value in caps.items():
        print(f"{name}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
