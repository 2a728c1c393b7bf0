"""The capability record and its one-line verdict, without sglang: every field has its probe, every probe
answers absent rather than raising when nothing of sglang can be read, and `missing` names the first
requirement a hand-made record lacks. Runs in every venv (`test_capabilities.py` probes a real sglang)."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import subprocess
import sys
from typing import Any

import pytest

from impl.upstream import capabilities
from impl.upstream.capabilities import ADAPTER_NEEDS, PROBES, Capabilities, cell, describe, missing

# A record with the spellings 0.5.23 has, for the verdicts below (values, not a claim about any release).
NEW_SPELLINGS = Capabilities(
    version="9.9.9",
    record_in_kv=True,
    prefix_len=True,
    extend_end=True,
    release_checkpoint=True,
    checkpoint_kv_cache=True,
    release_req=True,
    tree_cache_factory=True,
    unified_radix_cache=True,
    cache_lock=True,
    evict_params=True,
    walk_for_kv_canary=True,
    server_args_cpu=True,
    publish_role=True,
    schedule_batch_init_new=True,
)


class NoUpstream(capabilities.Upstream):
    """An sglang of which nothing can be read: every module absent, no request, no allocator."""

    def module(self, name: str) -> None:
        return None

    req = None  # type: ignore[assignment]
    paged = None  # type: ignore[assignment]


def _probed_fields() -> list[str]:
    return [f.name for f in dataclasses.fields(Capabilities) if f.name != "version"]


def test_every_field_but_the_version_has_one_probe_in_the_same_order() -> None:
    assert list(PROBES) == _probed_fields()


def test_with_nothing_to_read_every_probe_answers_its_field_default() -> None:
    empty = NoUpstream()
    answers = {f.name: capabilities._answer(f, empty) for f in dataclasses.fields(Capabilities) if f.name in PROBES}
    defaults = {name: value for name, value in dataclasses.asdict(Capabilities()).items() if name != "version"}
    assert answers == defaults


def test_absent_is_falsy_but_for_the_rust_core_which_names_why_it_falls_back() -> None:
    absent = Capabilities()
    truthy = [name for name in _probed_fields() if getattr(absent, name)]
    assert truthy == ["rust_core_fallback"]


def test_without_sglang_the_verdict_says_so() -> None:
    assert missing(ADAPTER_NEEDS, Capabilities()) == "sglang is not installed in this environment"


def test_a_record_with_one_spelling_of_each_need_lacks_nothing() -> None:
    assert missing(ADAPTER_NEEDS, NEW_SPELLINGS) is None


def test_the_first_missing_need_is_named_with_both_spellings_on_one_line() -> None:
    caps = dataclasses.replace(NEW_SPELLINGS, release_checkpoint=False, cache_lock=False)
    verdict = missing(ADAPTER_NEEDS, caps)
    assert verdict is not None and "\n" not in verdict
    assert verdict.startswith("sglang 9.9.9 lacks a capability the upstream target needs: release_checkpoint (")
    assert "or release_is_insert (`release_kv_cache(req, tree_cache, is_insert)`.)" in verdict
    assert "cache_lock" not in verdict  # only the first


@pytest.mark.parametrize("need", ADAPTER_NEEDS)
def test_dropping_any_need_is_told(need: str) -> None:
    caps = dataclasses.replace(NEW_SPELLINGS, **{name: False for name in need.split("|")})
    verdict = missing(ADAPTER_NEEDS, caps)
    assert verdict is not None and need.split("|")[0] in verdict


def test_an_unknown_capability_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="no such capability: rowz"):
        missing(["rowz"], NEW_SPELLINGS)


@pytest.mark.parametrize(
    ("value", "text"),
    [(True, "yes"), (False, "no"), (("rust", "python"), "`rust`, `python`"), ((), "none"), ("", "—"), ("x", "`x`")],
)
def test_cells(value: Any, text: str) -> None:
    assert cell(value) == text


def test_descriptions_are_one_line() -> None:
    assert all("\n" not in describe(name) and describe(name) for name in PROBES)


@pytest.mark.skipif(importlib.util.find_spec("sglang") is not None, reason="sglang is installed here")
def test_the_command_prints_an_absent_record_where_sglang_is_absent() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "impl.upstream.capabilities", "--json"], capture_output=True, text=True, check=True
    )
    assert json.loads(done.stdout) == json.loads(json.dumps(dataclasses.asdict(Capabilities())))
