"""The targets the harness can drive, and how a trace config selects and builds one.

A config names its target (`reference`, the default, or `sglang`) and the pool (`POOL_KEYS`). The reference
pool is always here; the upstream one needs a sglang venv and is imported on first use. Every target
implements `impl.target.Target`; `target_ops` says which lockstep ops it takes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from impl.engine import ReferencePool
from impl.faults import FaultSet
from impl.target import PoolConfig, Target
from model.state import Sizes

# A step that changes nothing: every release path runs on clones of the pool and the results are compared.
DIFFERENTIAL = "differential"
POOL_KEYS = (
    "rows",
    "tokens",
    "width",
    "page_size",
    "cache",
    "device",
    "speculative",
    "kernel_backend",
    "need_sort",
    "evict_on_demand",
    "tree_core",
    "row_pool",
    "pre_alloc_size",
)
SGLANG_VENVS = ".venv-sglang-VERSION/bin/python, VERSION of upstream/releases.txt"


def _sglang_class() -> type[Target]:
    from impl.upstream.target import SglangPool  # imports torch only; sglang itself loads when a pool is built

    return SglangPool


# Each target's class, loaded on first use: the upstream one lives only in the sglang venvs.
TARGETS: dict[str, Callable[[], type[Target]]] = {"reference": lambda: ReferencePool, "sglang": _sglang_class}


def pool_config(config: dict[str, Any]) -> PoolConfig:
    """The pool config a trace config describes (raises ValueError for sizes the pool does not support). In the
    harness a pool evicts on demand only where the config says so: by default eviction is its own step."""
    keys = {k: config[k] for k in POOL_KEYS if k in config}
    return PoolConfig(**{"evict_on_demand": False, **keys})


def model_sizes(config: dict[str, Any]) -> Sizes:
    return Sizes(
        config["rows"] + config.get("pre_alloc_size", 0),  # the model does not tell pre-allocation rows apart
        config["tokens"],
        config["width"],
        config.get("page_size", 1),
        config.get("cache") == "radix",
        bool(config.get("speculative", False)),
        bool(config.get("evict_on_demand", False)),
    )


# The ops a prefill server runs and the PD decode side never does.
PREFILL_SERVER_ONLY = frozenset({"pp_profile", "prefill_round", "queue"})


def target_ops(config: dict[str, Any]) -> frozenset[str]:
    """The lockstep ops the config's target implements (`differential` included: it runs only those), less those
    its pool shape never runs: PP profiling and the prefill round (and the queue it serves) are a prefill
    server's, never the PD decode side's, which admits through its pre-allocation queue."""
    ops = TARGETS[config.get("target", "reference")]().OPS | {DIFFERENTIAL}
    return ops - PREFILL_SERVER_ONLY if config.get("row_pool") == "decode" else ops



def target_problem(config: dict[str, Any]) -> str | None:
    """Why the config's target cannot be built here (one line), or None; sglang's capabilities are probed (once
    per process), its pools are not built."""
    name = config.get("target", "reference")
    if name not in TARGETS:
        return f"target {name!r} is not one of {', '.join(sorted(TARGETS))}"
    if name == "reference":
        return None
    from impl.upstream.dialects import unsupported_reason
    from impl.upstream.target import _unsupported

    problem = _unsupported(pool_config(config), FaultSet.of(config.get("faults", [])))
    if problem:
        return problem
    reason = unsupported_reason()
    return None if reason is None else f"target 'sglang' needs upstream SGLang: {reason} (python: {SGLANG_VENVS})"


def retarget(config: dict[str, Any], target: str) -> dict[str, Any]:
    """The config on `target`. A paged pool on the upstream target runs upstream's naive torch path where the
    installed sglang has one, and its Triton kernels (interpreted on CPU) where it has none: the pool
    shapes name the torch backend, which only the reference honours at every version."""
    moved = {**config, "target": target}
    if target != "sglang" or config.get("kernel_backend", "torch") != "torch":
        return moved
    if target_problem(moved) is None:
        return moved
    kernels = {**moved, "kernel_backend": "triton"}
    return kernels if target_problem(kernels) is None else moved  # the torch config's problem is the one to tell


def installed_sglang() -> str | None:
    """The installed sglang version where the adapter can speak it, or None (the main venv; `sglang_problem` says
    why)."""
    from impl.upstream.dialects import capabilities, unsupported_reason

    return None if unsupported_reason() else capabilities().version


def sglang_problem() -> str | None:
    """Why the upstream target cannot run here (sglang absent, or lacking a capability the adapter needs), or None."""
    from impl.upstream.dialects import unsupported_reason

    return unsupported_reason()


def make_target(config: dict[str, Any]) -> Target:
    """The pool the config names: the reference pool, or upstream SGLang's (raises ValueError, one line, where
    it cannot be built here)."""
    name = config.get("target", "reference")
    if name not in TARGETS:
        raise ValueError(f"target {name!r} is not one of {', '.join(sorted(TARGETS))}")
    cls = TARGETS[name]()
    if name == "reference":
        return cls(pool_config(config), FaultSet.of(config.get("faults", [])))
    # The upstream constructor checks the config itself (`_unsupported`).
    from impl.upstream.dialects import UnsupportedUpstream

    try:
        return cls(pool_config(config), FaultSet.of(config.get("faults", [])))
    except UnsupportedUpstream as exc:
        raise ValueError(f"target 'sglang' needs upstream SGLang: {exc} (python: {SGLANG_VENVS})") from None
