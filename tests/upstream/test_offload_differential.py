"""The release-path differential's decode-offload pair on the upstream target: from sglang 0.5.21 the offload
release frees from `cache_protected_len` and gives the tree lock back, so on a request decoding over a protected
tree prefix it must leave the pool as `release_kv_cache(is_insert=False)` does. Each way of taking that fix back
out (free from 0 again, keep the lock), planted in upstream's `_release_finished_req` in-process, fails the
differential; before 0.5.21 (two known findings) the pair is not compared.

Runs only in a sglang venv (`make sglang-test`).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from typing import Any

import pytest

if importlib.util.find_spec("sglang") is None:
    pytest.skip(
        "needs upstream sglang, which the main venv deliberately lacks; run `make sglang-test`",
        allow_module_level=True,
    )

from fuzz.lockstep import Lockstep
from fuzz.profiles import POOLS
from fuzz.targets import retarget
from impl.target import OFFLOAD_FROM_PROTECTED
from impl.upstream.dialects import load_dialect, supported_version
from impl.upstream.pd import OFFLOAD_FROM_PROTECTED_SINCE
from impl.upstream.releases import version_key

VERSION = supported_version()
FIXED = version_key(VERSION) >= version_key(OFFLOAD_FROM_PROTECTED_SINCE)
PAIR = "pp_release vs offload_release"


def _decoding_over_a_prefix(pool: str) -> Lockstep:
    """Request 1 decoding over the prefix request 0's prompt left in the tree."""
    lock = Lockstep(retarget({**POOLS[pool], "faults": []}, "sglang"))
    for op, inputs in [
        ("admit", {"req": 0, "prompt": 9, "n": 9, "family": 0}),
        ("finish", {"req": 0}),
        ("admit", {"req": 1, "prompt": 9, "n": 9, "family": 0}),
        ("decode", {"req": 1}),
    ]:
        assert lock.step(op, inputs) is None, f"{op} {inputs}"
    assert lock.model.state.rec_P.get(1) > 0
    return lock


def _from_zero(monkeypatch: pytest.MonkeyPatch) -> None:
    """The offload release frees the row from 0 again: the tree's pages of the prefix are freed a second time."""
    from sglang.srt.disaggregation.decode_kvcache_offload_manager import DecodeKVCacheOffloadManager

    release = DecodeKVCacheOffloadManager._release_finished_req

    def from_zero(self: Any, req: Any, *args: Any) -> Any:
        req.kv.cache_protected_len = 0
        return release(self, req, *args)

    monkeypatch.setattr(DecodeKVCacheOffloadManager, "_release_finished_req", from_zero)


def _lock_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    """The offload release forgets to give the request's tree lock back."""
    from sglang.srt.disaggregation.decode_kvcache_offload_manager import DecodeKVCacheOffloadManager

    release = DecodeKVCacheOffloadManager._release_finished_req

    def lock_kept(self: Any, req: Any, *args: Any) -> Any:
        req.lock = req.last_node = None  # nothing for unlock (0.5.22 on) or unpin (0.5.21) to give back
        return release(self, req, *args)

    monkeypatch.setattr(DecodeKVCacheOffloadManager, "_release_finished_req", lock_kept)


def test_the_pools_claim_follows_the_release() -> None:
    lock = _decoding_over_a_prefix("radix-p1")
    assert lock.target.offload_frees == (OFFLOAD_FROM_PROTECTED if FIXED else None)


@pytest.mark.parametrize("pool", ["radix-p1", "radix-p4"])
def test_the_offload_release_matches_release_kv_cache_over_a_prefix(pool: str) -> None:
    lock = _decoding_over_a_prefix(pool)
    assert lock.differential(1) is None
    offload = [corner for corner in lock.corners if "offload_release" in corner]
    assert offload == (["differential: pp_release == offload_release"] if FIXED else [])


@pytest.mark.parametrize("plant", [_from_zero, _lock_kept])
def test_taking_the_fix_back_out_fails_the_differential(
    monkeypatch: pytest.MonkeyPatch, plant: Callable[[pytest.MonkeyPatch], None]
) -> None:
    load_dialect()
    lock = _decoding_over_a_prefix("radix-p1")
    plant(monkeypatch)
    failure = lock.differential(1)
    if not FIXED:
        assert failure is None  # not compared before the fix
        return
    assert failure is not None and (failure.kind, failure.id) == ("release-divergence", PAIR), failure
