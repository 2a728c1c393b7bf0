"""The field inventory (`impl/upstream/fields.py`) against the instances the upstream target builds: on every pool
shape a scripted lifecycle runs, and after every step each driven object holds exactly the inventory's fields for
this version, and each field the inventory argues keeps its initial value still has it.

Runs only in a sglang venv the target speaks (`make sglang-test`); the main venv deliberately lacks sglang, and the
releases between 0.5.18 and 0.5.23 have no dialect, so no target to build.
"""

from __future__ import annotations

import enum
import importlib.util
from array import array
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import pytest
import torch

if importlib.util.find_spec("sglang") is None:
    pytest.skip(
        "needs upstream sglang, which the main venv deliberately lacks; run `make sglang-test`",
        allow_module_level=True,
    )

from impl.upstream.dialects import capabilities
from impl.upstream.fields import VERSIONS

# The inventory is taken release by release (behaviour, not probed): a release it does not list is not in it yet.
if capabilities().version not in VERSIONS:
    pytest.skip(
        f"the field inventory lists the fields of {', '.join(VERSIONS)}, not of {capabilities().version}",
        allow_module_level=True,
    )

from impl.fault_points import FaultyMethod
from impl.target import PoolConfig, Refused
from impl.upstream.dialects import (
    GLUE_ATTR_PREFIX,
    Dialect,
    load_dialect,
    paged_naive_path,
    supported_version,
    tree_cores,
)
from impl.upstream.fields import CLASSES, fields_of
from impl.upstream.scheduler_host import upstream_rid
from impl.upstream.target import SglangPool

VERSION = supported_version()
PAGED_BACKEND = "torch" if paged_naive_path() else "triton"  # without the kernel switch there is no naive path


def shapes() -> list[PoolConfig]:
    """Chunk and radix at page sizes 1 and 4, on each tree core, without on-demand eviction; and one radix shape
    with it (the servers' core, page size 4), so that both eviction hooks are built."""
    cores = tree_cores() or ("rust",)  # 0.5.18's tree has no cores; the config's default is then unread
    configs = []
    for page_size in (1, 4):
        base = PoolConfig(
            rows=4, tokens=64, width=32, page_size=page_size, kernel_backend=PAGED_BACKEND if page_size > 1 else "torch"
        )
        configs.append(replace(base, cache="chunk"))
        configs += [replace(base, cache="radix", tree_core=core, evict_on_demand=False) for core in cores]
    return [*configs, replace(configs[-len(cores)], evict_on_demand=True)]


def field_names(obj: object) -> set[str]:
    """The instance fields of `obj`: its `__dict__`, else every `__slots__` of its classes; never the attributes
    the adapter itself sets on upstream's objects (`GLUE_ATTR_PREFIX`: its bookkeeping, not upstream's fields;
    a fault point's wrapper of a method, `impl.fault_points.FaultyMethod`, which stands where the method is)."""
    if hasattr(obj, "__dict__"):
        names = {name for name, value in vars(obj).items() if not isinstance(value, FaultyMethod)}
    else:
        names = {name for cls in type(obj).__mro__ for name in getattr(cls, "__slots__", ())}
    return {name for name in names if not name.startswith(GLUE_ATTR_PREFIX)}


def fingerprint(value: Any, depth: int = 0) -> Any:
    """A comparable plain form of a field's value: scalars as they are, tensors and containers by content, any
    other object by its type (an object field argued unset is argued so by what it is, not by its insides)."""
    if value is None or isinstance(value, (bool, int, float, str, bytes, enum.Enum)):
        return value
    if isinstance(value, torch.Tensor):
        return ("tensor", str(value.dtype), tuple(value.shape), value.tolist())
    if isinstance(value, array):
        return ("array", value.typecode, value.tolist())
    if depth < 3 and isinstance(value, (list, tuple)):
        return (type(value).__name__, [fingerprint(item, depth + 1) for item in value])
    if depth < 3 and isinstance(value, (set, frozenset)):
        return (type(value).__name__, sorted(repr(fingerprint(item, depth + 1)) for item in value))
    if depth < 3 and isinstance(value, dict):
        return ("dict", [(fingerprint(k, depth + 1), fingerprint(v, depth + 1)) for k, v in value.items()])
    return ("object", type(value).__name__)


def _tree_nodes(cache: Any) -> list[Any]:
    """The nodes below the root of a Python tree (0.5.18's `RadixCache`, 0.5.23's Python core); the Rust core's
    nodes live in Rust."""
    core = getattr(cache, "tree_core", None)
    if core is not None and type(core).__name__ != "UnifiedTreeCore":
        return []
    root = core.root_node if core is not None else getattr(cache, "root_node", None)
    nodes, stack = [], list(root.children.values()) if root is not None else []
    while stack:
        node = stack.pop()
        nodes.append(node)
        stack.extend(node.children.values())
    return nodes


def driven_objects(pool: SglangPool) -> Iterator[Any]:
    """Every object of the driven classes the target holds now."""
    yield pool.req_to_token_pool
    yield pool.allocator
    yield pool.cache
    core = getattr(pool.cache, "tree_core", None)
    if core is not None:
        yield core
    for node in _tree_nodes(pool.cache):
        yield node
        yield from getattr(node, "component_data", ())
    for entry in pool.reqs.values():
        yield entry.req
        if entry.req.kv is not None:
            yield entry.req.kv
        if entry.batch is not None:
            yield entry.batch


def _fresh_node(dialect: Dialect, pool: SglangPool) -> Any:
    """A tree node as its class's constructor leaves it (0.5.18 `TreeNode`, 0.5.23's Python `UnifiedTreeNode`)."""
    if dialect.version == "0.5.18":
        from sglang.srt.mem_cache.radix_cache import TreeNode

        return TreeNode()
    from sglang.srt.mem_cache.unified_cache.unified_tree_core import UnifiedTreeNode

    return UnifiedTreeNode(pool.cache.tree_components)


def initial_objects(config: PoolConfig, rid: int) -> list[Any]:
    """One object of each driven class as built, before any lifecycle step: a fresh target's pool, allocator, cache
    and tree core, request `rid` as `new_req` builds it, its record, a batch `init_new` builds, a tree node."""
    dialect = load_dialect()
    pool = SglangPool(config)
    req = dialect.new_req(rid, max_new_tokens=config.width)
    if req.kv is None:  # 0.5.18: the record is built at allocation (allocation.py's ReqKvInfo)
        from sglang.srt.managers.schedule_batch import ReqKvInfo

        kv = ReqKvInfo(kv_allocated_len=0, swa_evicted_seqlen=0)
    else:
        kv = req.kv
    batch = dialect.new_batch([req], pool.req_to_token_pool, pool.allocator, pool.cache)
    objects = [pool.req_to_token_pool, pool.allocator, pool.cache, req, kv, batch]
    core = getattr(pool.cache, "tree_core", None)
    objects += [core] if core is not None else []
    if config.cache == "radix" and (core is None or type(core).__name__ == "UnifiedTreeCore"):
        node = _fresh_node(dialect, pool)
        objects += [node, *getattr(node, "component_data", ())[:1]]
    return objects


@dataclass
class Watch:
    """What the instances showed across the runs: each class's fields, and each kept field that left its value."""

    fields: dict[str, set[str]] = field(default_factory=dict)
    moved: dict[tuple[str, str], Any] = field(default_factory=dict)
    initial: dict[str, dict[str, Any]] = field(default_factory=dict)
    req_initial: dict[str, dict[str, Any]] = field(default_factory=dict)

    def start(self, config: PoolConfig, rids: range) -> None:
        """The initial values of the kept fields on this shape (a request's per request id)."""
        self.initial = {type(obj).__name__: _kept_values(obj) for obj in initial_objects(config, 0)}
        self.req_initial = {upstream_rid(rid): _kept_values(_fresh_req(config, rid)) for rid in rids}

    def look(self, pool: SglangPool) -> None:
        for obj in driven_objects(pool):
            name = type(obj).__name__
            self.fields.setdefault(name, set()).update(field_names(obj))
            initial = self.req_initial[obj.rid] if name == "Req" else self.initial.get(name, {})
            for key, value in _kept_values(obj).items():
                if key in initial and value != initial[key]:
                    self.moved.setdefault((name, key), (initial[key], value))


def _fresh_req(config: PoolConfig, rid: int) -> Any:
    return load_dialect().new_req(rid, max_new_tokens=config.width)


def _kept_values(obj: object) -> dict[str, Any]:
    """The fingerprints of `obj`'s fields the inventory marks kept."""
    entries = fields_of(type(obj).__name__, VERSION) if type(obj).__name__ in CLASSES else {}
    return {
        name: fingerprint(getattr(obj, name)) for name in field_names(obj) if name in entries and entries[name].kept
    }


Step = Callable[[SglangPool], object]


def prefill(rid: int) -> Step:
    """Extend request `rid` by chunks of 4 until its whole prompt is committed (a chunked prefill, whatever the
    tree matched)."""

    def run(pool: SglangPool) -> None:
        record = pool.snapshot().records[rid]
        while record.prompt_len is None or record.committed_len < record.prompt_len:
            pool.extend(rid, 4)
            record = pool.snapshot().records[rid]

    return run


# Every lifecycle op the brief names, on requests of different families (so that only family 0 shares a prefix):
# admit, chunked extend, decode, finish, a prefix match, retract and re-admission, abort mid-prefill, abort while
# decoding, abort while waiting, a two-request decode batch, eviction, an idle flush and a request after it.
LIFECYCLE: list[tuple[str, Step]] = [
    ("admit 0", lambda p: p.admit(0, 8, prompt_len=8)),
    ("decode 0", lambda p: p.decode(0)),
    ("finish 0", lambda p: p.finish(0)),
    ("admit 1 on 0's prefix", lambda p: p.admit(1, 4, prompt_len=16)),
    ("prefill 1", prefill(1)),
    ("decode 1", lambda p: p.decode(1)),
    ("retract 1", lambda p: p.retract(1)),
    ("re-admit 1", prefill(1)),
    ("decode 1 again", lambda p: p.decode(1)),
    ("finish 1", lambda p: p.finish(1)),
    ("admit 2", lambda p: p.admit(2, 4, prompt_len=12, family=1)),
    ("abort 2 mid-prefill", lambda p: p.abort(2)),
    ("admit 3", lambda p: p.admit(3, 6, prompt_len=6, family=2)),
    ("decode 3", lambda p: p.decode(3)),
    ("abort 3 decoding", lambda p: p.abort(3)),
    ("admit 4", lambda p: p.admit(4, 4, prompt_len=4, family=3)),
    ("retract 4", lambda p: p.retract(4)),
    ("abort 4 waiting", lambda p: p.abort(4)),
    ("admit 5", lambda p: p.admit(5, 4, prompt_len=4, family=4)),
    ("admit 6", lambda p: p.admit(6, 4, prompt_len=4, family=5)),
    ("decode 5 and 6", lambda p: p.batch([("decode", {"req": 5}), ("decode", {"req": 6})])),
    ("finish 5", lambda p: p.finish(5)),
    ("finish 6", lambda p: p.finish(6)),
    ("evict", lambda p: p.evict(16)),
    ("flush", lambda p: p.flush()),
    ("admit 7 after the flush", lambda p: p.admit(7, 8, prompt_len=8)),
    ("decode 7", lambda p: p.decode(7)),
    ("finish 7", lambda p: p.finish(7)),
]
RIDS = range(8)


@pytest.fixture(scope="module")
def watch() -> Watch:
    """Every shape's lifecycle, watched after every step; a refused step fails here, naming the shape and step."""
    seen = Watch()
    for config in shapes():
        seen.start(config, RIDS)
        pool = SglangPool(config)
        seen.look(pool)
        for name, step in LIFECYCLE:
            try:
                step(pool)
            except Refused as exc:
                pytest.fail(f"{config.cache} page {config.page_size} {config.tree_core}: step {name!r} refused: {exc}")
            seen.look(pool)
    return seen


def test_every_instance_field_is_in_the_inventory(watch: Watch) -> None:
    """No driven object holds a field (or is of a class) the inventory does not list for this version."""
    unlisted = {
        name: sorted(names - set(fields_of(name, VERSION))) if name in CLASSES else ["<class not in inventory>"]
        for name, names in watch.fields.items()
    }
    assert {name: missing for name, missing in unlisted.items() if missing} == {}


def test_every_inventory_entry_is_a_field_of_this_version(watch: Watch) -> None:
    """Each entry the inventory lists for this version is a field some instance held (and each class was built)."""
    stale = {
        name: sorted(set(fields_of(name, VERSION)) - watch.fields.get(name, set()))
        for name in CLASSES
        if fields_of(name, VERSION)
    }
    assert {name: names for name, names in stale.items() if names} == {}


def test_kept_fields_keep_their_initial_values(watch: Watch) -> None:
    """Every field argued never set (and every configured value marked kept) had its initial value after every
    step of every shape; a field that moved is listed with (initial, seen)."""
    assert watch.moved == {}


def test_the_watch_sees_a_planted_write() -> None:
    """A kept field written behind the target's back is caught: the check can fail."""
    config = shapes()[0]
    seen = Watch()
    seen.start(config, RIDS)
    pool = SglangPool(config)
    pool.admit(0, 4, prompt_len=4)
    pool.reqs[0].req.lora_id = "planted"
    seen.look(pool)
    assert seen.moved == {("Req", "lora_id"): (None, "planted")}
