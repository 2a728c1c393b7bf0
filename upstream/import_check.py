"""Check a freshly built sglang venv: the versions installed, then every sglang module the upstream adapter
reaches imported after the adapter's torchvision stub. Run by `upstream/setup.sh` from the repository root;
exit 1 naming the first module that does not import (a missing or mismatched light dependency).

A module the release does not have is reported, not failed: which modules exist is the capability probe's
business (`impl/upstream/capabilities.py`), not the install's.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from importlib.metadata import version
from pathlib import Path

# Run as a script, its own folder comes first on sys.path; the adapter's compat module lives at the root.
ROOT = Path(__file__).resolve().parents[1]
MODULES = (
    "sglang.srt.managers.schedule_batch",
    "sglang.srt.mem_cache.common",
    "sglang.srt.mem_cache.memory_pool",
    "sglang.srt.mem_cache.allocator",
    "sglang.srt.mem_cache.cache_init_params",
    "sglang.srt.mem_cache.registry",
    "sglang.srt.mem_cache.chunk_cache",
    "sglang.srt.mem_cache.radix_cache",
    "sglang.srt.mem_cache.unified_radix_cache",
    "sglang.srt.runtime_context",
    "sglang.srt.sampling.sampling_params",
    "sglang.srt.server_args",
    "sglang.srt.speculative.spec_info",
    "sglang.srt.speculative.eagle_utils",
    "sglang.srt.disaggregation.decode",
    "sglang.srt.disaggregation.decode_kvcache_offload_manager",
)


def _exists(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:  # a parent package is absent
        return False


def main(expected: str) -> int:
    installed, torch = version("sglang"), version("torch")
    if installed != expected:
        print(f"import_check: sglang {installed} installed, {expected} asked for", file=sys.stderr)
        return 1
    if not torch.endswith("+cpu"):
        print(f"import_check: torch {torch} is not the CPU wheel", file=sys.stderr)
        return 1
    sys.path.insert(0, str(ROOT))
    importlib.import_module("impl.upstream.compat").prepare_sglang_import()
    absent = [name for name in MODULES if not _exists(name)]
    for name in MODULES:
        if name in absent:
            continue
        try:
            importlib.import_module(name)
        except Exception as error:  # any failure here is the install's: report it by module
            print(f"import_check: {name} does not import: {type(error).__name__}: {error}", file=sys.stderr)
            return 1
    caps = importlib.import_module("impl.upstream.capabilities").probe()
    print(f"setup: sglang {installed} imports; modules it does not have: {', '.join(absent) or 'none'}")
    fallback = f"; asked for the Rust core, upstream builds the Python one: {caps.rust_core_fallback}"
    cores = ", ".join(caps.tree_cores) or "none to name (the radix tree is the one upstream's factory builds)"
    print(f"setup: tree cores: {cores}{fallback if caps.tree_core_backend and caps.rust_core_fallback else ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
