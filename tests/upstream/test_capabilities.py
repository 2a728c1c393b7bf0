"""The capability probes on the installed sglang: they agree with the capability x release table of
`docs/upstream-api.md`, give one spelling of each API difference, meet the adapter's needs, follow the code
rather than the version number, and the tree cores they list are the ones upstream builds.

Runs only in a sglang venv (`make sglang-test`); the main venv deliberately lacks sglang.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import importlib.util
from pathlib import Path

import pytest

if importlib.util.find_spec("sglang") is None:
    pytest.skip(
        "needs upstream sglang, which the main venv deliberately lacks; run `make sglang-test`",
        allow_module_level=True,
    )

from impl.upstream import capabilities
from impl.upstream.capabilities import ADAPTER_NEEDS, PROBES, Upstream, cell, missing, probe

DOC = Path(__file__).resolve().parents[2] / "docs" / "upstream-api.md"
# Pairs of which a release has exactly one spelling.
EITHER = [
    ("record_in_kv", "record_on_req"),
    ("prefix_len", "prefix_indices"),
    ("extend_end", "set_extend_range"),
    ("release_checkpoint", "release_is_insert"),
    ("checkpoint_kv_cache", "maybe_cache_unfinished_req"),
]


def _cells(row: str) -> list[str]:
    return [part.strip().replace("\0", "|") for part in row.replace("\\|", "\0").split("|")[1:-1]]


def _table_column(version: str) -> dict[str, str] | None:
    """The table's cells for `version`, by capability, or None where it has no column."""
    rows = [_cells(line) for line in DOC.read_text().splitlines() if line.startswith("| ")]
    header = next((row for row in rows if row[0] == "capability"), [])
    if version not in header:
        return None
    at = header.index(version)
    return {row[0].strip("`"): row[at] for row in rows if len(row) == len(header) and row[0].strip("`") in PROBES}


def test_the_table_in_the_docs_is_what_the_probes_answer_here() -> None:
    caps = probe()
    assert caps.version is not None
    column = _table_column(caps.version)
    if column is None:
        pytest.skip(f"docs/upstream-api.md has no column for sglang {caps.version}: run upstream/capability_table.py")
    assert column == {name: cell(getattr(caps, name)) for name in PROBES}


def test_the_record_names_the_installed_version() -> None:
    assert probe().version == importlib.metadata.version("sglang")


@pytest.mark.parametrize(("one", "other"), EITHER)
def test_each_difference_has_exactly_one_spelling(one: str, other: str) -> None:
    caps = probe()
    assert getattr(caps, one) != getattr(caps, other), (one, other)


def test_the_adapter_finds_what_it_needs() -> None:
    assert missing(ADAPTER_NEEDS) is None


def test_the_pd_decode_pool_imports_now_that_einops_is_pinned() -> None:
    assert probe().decode_req_to_token_pool


def test_the_answer_follows_the_code_not_the_version_number(monkeypatch: pytest.MonkeyPatch) -> None:
    """Another version number changes nothing but the name; a stash function taken away is absent at once."""
    before = dataclasses.asdict(probe())
    monkeypatch.setattr(capabilities.importlib.metadata, "version", lambda name: "0.0.1")
    renamed = dataclasses.asdict(probe.__wrapped__())
    assert renamed == {**before, "version": "0.0.1"}
    common = Upstream().module(capabilities.COMMON)
    stash = "checkpoint_kv_cache" if probe().checkpoint_kv_cache else "maybe_cache_unfinished_req"
    monkeypatch.delattr(common, stash)
    assert PROBES[stash](Upstream()) is False


def test_a_changed_signature_is_read_as_it_is(monkeypatch: pytest.MonkeyPatch) -> None:
    common = Upstream().module(capabilities.COMMON)

    def release_kv_cache(req: object, tree_cache: object, *, keep: bool) -> None:
        """A release whose flag has a third name."""

    monkeypatch.setattr(common, "release_kv_cache", release_kv_cache)
    up = Upstream()
    assert PROBES["release_kv_cache_params"](up) == ("req", "tree_cache", "keep")
    assert not PROBES["release_checkpoint"](up) and not PROBES["release_is_insert"](up)
    verdict = missing(ADAPTER_NEEDS, probe.__wrapped__())
    assert verdict is not None and "release_checkpoint" in verdict


def test_every_tree_core_listed_is_the_one_upstream_builds() -> None:
    """Each named core builds a tree on that core; where the Rust one falls back, asking for it gives Python's."""
    caps = probe()
    if not caps.tree_core_backend:
        assert caps.tree_cores == ()
        return
    built = {name: type(_tree(name).tree_core).__name__ for name in ("rust", "python")}
    expected_rust = "UnifiedTreeCore" if caps.rust_core_fallback else "RustUnifiedTreeCore"
    assert built == {"rust": expected_rust, "python": "UnifiedTreeCore"}
    assert ("rust" in caps.tree_cores) == (not caps.rust_core_fallback)


def _tree(core: str) -> object:
    import torch

    up = Upstream()
    pool = up.attr(capabilities.MEMORY_POOL, "ReqToTokenPool")(4, 16, device="cpu", enable_memory_saver=False)
    allocator = up.attr(capabilities.ALLOCATOR, "TokenToKVPoolAllocator")(32, torch.float16, "cpu", None, False)
    full = up.attr(capabilities.TREE_CORE_REGISTRY, "ComponentType").FULL
    params = up.attr(capabilities.CACHE_INIT_PARAMS, "CacheInitParams")(
        disable=False,
        req_to_token_pool=pool,
        token_to_kv_pool_allocator=allocator,
        page_size=1,
        tree_components=(full,),
        tree_core_backend=core,
    )
    return up.attr(capabilities.UNIFIED_RADIX_CACHE, "UnifiedRadixCache")(params)
