"""Where the upstream target cannot run it says why, in every venv: missing or unsupported sglang, faults asked
for, configs it cannot build (checked before sglang is imported). `upstream/setup.sh`'s refusals:
`test_releases.py`."""

from __future__ import annotations

import importlib.metadata
from collections.abc import Iterator

import pytest
import torch

from fuzz.profiles import POOLS
from fuzz.targets import retarget, target_problem
from impl.faults import FaultSet
from impl.target import PoolConfig
from impl.upstream import dialects, target
from impl.upstream.target import SglangPool


@pytest.fixture(autouse=True)
def _fresh_version_cache() -> Iterator[None]:
    """Forget the version read under a faked package lookup, so no other test sees it."""
    yield
    dialects.installed_version_or_none.cache_clear()


def _version_is(monkeypatch: pytest.MonkeyPatch, version: str | None) -> None:
    def fake(name: str) -> str:
        assert name == "sglang"
        if version is None:
            raise importlib.metadata.PackageNotFoundError(name)
        return version

    monkeypatch.setattr(dialects.importlib.metadata, "version", fake)
    dialects.installed_version_or_none.cache_clear()


def test_missing_sglang_names_the_setup_target(monkeypatch: pytest.MonkeyPatch) -> None:
    _version_is(monkeypatch, None)
    with pytest.raises(dialects.UnsupportedUpstream, match=r"not installed.*make sglang-setup"):
        dialects.installed_version()


def test_unsupported_version_is_named_with_the_supported_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    _version_is(monkeypatch, "0.5.19")
    with pytest.raises(dialects.UnsupportedUpstream, match=r"sglang 0\.5\.19 is not supported.*0\.5\.18, 0\.5\.23"):
        dialects.installed_version()


@pytest.mark.parametrize("version", dialects.SUPPORTED_VERSIONS)
def test_supported_versions_pass_the_check(monkeypatch: pytest.MonkeyPatch, version: str) -> None:
    _version_is(monkeypatch, version)
    assert dialects.installed_version() == version


def test_faults_are_refused_before_sglang_is_loaded() -> None:
    with pytest.raises(ValueError, match="faults are not supported on the upstream target"):
        SglangPool(PoolConfig(), FaultSet.of(["raw_row_free"]))


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (PoolConfig(page_size=4, kernel_backend="oracle"), r"no 'oracle' kernel backend; use one of \('torch', "),
        (PoolConfig(device="cuda"), "on 'cuda' where a CUDA device is present"),
    ],
)
def test_configs_it_cannot_build_are_refused_before_sglang_is_loaded(
    monkeypatch: pytest.MonkeyPatch, config: PoolConfig, message: str
) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # as on a machine without a GPU
    with pytest.raises(ValueError, match=message):
        SglangPool(config)


def test_the_naive_paged_path_is_refused_on_0_5_18_only(monkeypatch: pytest.MonkeyPatch) -> None:
    paged = PoolConfig(page_size=4, kernel_backend="torch")
    _version_is(monkeypatch, "0.5.18")
    assert target._unsupported(paged, FaultSet.of([])) == (
        "sglang 0.5.18's paged allocator always launches its Triton kernels; use kernel_backend 'triton'"
    )
    assert target._unsupported(PoolConfig(page_size=1, kernel_backend="torch"), FaultSet.of([])) is None
    assert target._unsupported(PoolConfig(page_size=4, kernel_backend="triton"), FaultSet.of([])) is None
    _version_is(monkeypatch, "0.5.23")
    assert target._unsupported(paged, FaultSet.of([])) is None


def test_ops_are_listed_without_loading_sglang() -> None:
    assert {"admit", "extend", "decode", "finish", "retract", "abort", "flush"} <= target.SglangPool.OPS
    assert {"spec_prepare", "spec_commit", "pd_prealloc", "offload_release"} <= target.SglangPool.OPS


@pytest.mark.parametrize(("version", "backend"), [("0.5.18", "triton"), ("0.5.23", "torch"), (None, "torch")])
def test_a_paged_pool_on_sglang_takes_the_kernels_its_version_has(
    monkeypatch: pytest.MonkeyPatch, version: str | None, backend: str
) -> None:
    """0.5.18 has no naive torch path, so `--target sglang` on chunk-p4 runs its Triton kernels; without sglang
    the config stays as it was, so that the error names the missing sglang."""
    _version_is(monkeypatch, version)
    config = retarget(POOLS["chunk-p4"], "sglang")
    assert (config["target"], config.get("kernel_backend", "torch")) == ("sglang", backend)
    assert retarget(POOLS["chunk-p1"], "sglang").get("kernel_backend", "torch") == "torch"
    assert retarget(POOLS["chunk-p4"], "reference") == {**POOLS["chunk-p4"], "target": "reference"}


def test_the_kernel_reason_comes_last_so_the_reason_retarget_cannot_fix_is_told(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On 0.5.18 a paged pool on a CUDA device has two problems; the one `retarget` cannot fix is the one told."""
    _version_is(monkeypatch, "0.5.18")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    on_cuda = retarget({**POOLS["chunk-p4"], "device": "cuda"}, "sglang")
    assert "where a CUDA device is present" in str(target_problem(on_cuda))
    assert "Triton kernels" in str(target_problem({**POOLS["chunk-p4"], "target": "sglang"}))


@pytest.mark.parametrize("shape", ["radix-p4", "pd-p1"])
def test_speculative_and_decode_pool_shapes_run_upstream_as_they_are(shape: str) -> None:
    moved = retarget(POOLS[shape], "sglang")
    assert {**moved, "kernel_backend": "torch"} == {**POOLS[shape], "target": "sglang", "kernel_backend": "torch"}
    decode_side = PoolConfig(speculative=True, row_pool="decode", pre_alloc_size=2)
    assert target._unsupported(decode_side, FaultSet.of([])) is None
