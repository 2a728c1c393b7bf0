"""The release-path differential's decode-offload pair: the offload release beside
`release_kv_cache(is_insert=False)` (`pp_release`), held to it as far as the target's `offload_frees` says.

The reference reads 0.5.19's offload release (from 0, the lock kept): the pair must match without a protected
prefix (theorem `sentinel-boundary:release-equivalence`) and is only reported with one. A target that says it frees
from `cache_protected_len` (sglang 0.5.21 on) must match with a prefix too, so a release that frees the tree's pages
again, as the reference's does, fails; one that says None is not compared.
"""

from __future__ import annotations

from typing import Any

import pytest

from fuzz.lockstep import Lockstep
from fuzz.profiles import POOLS
from impl.target import OFFLOAD_FROM_PROTECTED
from model.trace import Failure

PAIR = "pp_release vs offload_release"


def _decoding(pool: str, protected: bool) -> Lockstep:
    """A lockstep on `pool` whose request 1 is decoding with a protected tree prefix (`protected`: request 0's
    prompt, and on a tree its own whole pages, stashed into it) or none (a prompt shorter than a page, of its own
    family)."""
    lock = Lockstep({**POOLS[pool], "faults": []})
    prompt = 9 if protected else POOLS[pool].get("page_size", 1) - 1 or 9
    steps: list[tuple[str, dict[str, Any]]] = [
        ("admit", {"req": 0, "prompt": 9, "n": 9, "family": 0}),
        ("finish", {"req": 0}),
        ("admit", {"req": 1, "prompt": prompt, "n": prompt, "family": 0 if protected else 1}),
        ("decode", {"req": 1}),
    ]
    for op, inputs in steps:
        assert lock.step(op, inputs) is None, f"{op} {inputs}"
    assert (lock.model.state.rec_P.get(1) > 0) == protected
    return lock


def _offload_corners(lock: Lockstep) -> list[str]:
    return [corner for corner in lock.corners if "offload_release" in corner]


@pytest.mark.parametrize("pool", ["chunk-p1", "chunk-p4", "radix-p4", "pd-p4"])
def test_without_a_protected_prefix_the_offload_release_matches(pool: str) -> None:
    lock = _decoding(pool, protected=False)
    assert lock.differential(1) is None
    assert _offload_corners(lock) == ["differential: pp_release == offload_release"]


@pytest.mark.parametrize("pool", ["radix-p1", "radix-p4"])
def test_the_references_offload_release_with_a_protected_prefix_is_only_reported(pool: str) -> None:
    lock = _decoding(pool, protected=True)
    assert lock.differential(1) is None
    assert _offload_corners(lock) == [f"differential: {PAIR} differ without `no protected prefix`"]


@pytest.mark.parametrize("pool", ["radix-p1", "radix-p4"])
def test_a_target_that_frees_from_the_protected_length_must_match_with_a_prefix(pool: str) -> None:
    """The reference's release frees the P tree-held slots again and keeps the lock: held to the fixed contract it
    fails, naming what differs."""
    lock = _decoding(pool, protected=True)
    lock.target.offload_frees = OFFLOAD_FROM_PROTECTED  # type: ignore[misc]
    failure = lock.differential(1)
    assert isinstance(failure, Failure)
    assert (failure.kind, failure.id) == ("release-divergence", PAIR)
    assert "free pages" in failure.message and "record" in failure.message, failure.message


def test_a_target_that_says_none_is_not_compared() -> None:
    lock = _decoding("radix-p4", protected=True)
    lock.target.offload_frees = None  # type: ignore[misc]
    assert lock.differential(1) is None
    assert _offload_corners(lock) == []
    assert any("pp_release" in corner for corner in lock.corners)  # the other pairs still ran


def test_a_decoding_request_is_the_only_one_compared() -> None:
    lock = Lockstep({**POOLS["radix-p4"], "faults": []})
    assert lock.step("admit", {"req": 0, "prompt": 9, "n": 5, "family": 0}) is None  # between chunks, not decoding
    assert lock.differential(0) is None
    assert _offload_corners(lock) == []
