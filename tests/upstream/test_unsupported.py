"""Where the upstream target cannot run it says why, in every venv: missing or unsupported sglang, faults asked
for, configs it cannot build (checked before sglang is imported). `upstream/setup.sh`'s refusals:
`test_releases.py`."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from fuzz.profiles import POOLS
from fuzz.targets import SGLANG_VENVS, retarget, target_problem
from impl.faults import FaultSet
from impl.target import PoolConfig
from impl.upstream import dialects, target
from impl.upstream.capabilities import ADAPTER_NEEDS, Capabilities
from impl.upstream.target import SglangPool

# An sglang that meets every need of the adapter with its first spelling, and nothing more.
ENOUGH = Capabilities(version="0.5.99", **{need.split("|")[0]: True for need in ADAPTER_NEEDS})


def _installed(monkeypatch: pytest.MonkeyPatch, caps: Capabilities) -> None:
    """Pretend the installed sglang has `caps` (the adapter reads nothing else to decide)."""
    monkeypatch.setattr(dialects, "probe", lambda device="cpu": caps)


def test_missing_sglang_names_the_setup_target(monkeypatch: pytest.MonkeyPatch) -> None:
    _installed(monkeypatch, Capabilities())
    with pytest.raises(dialects.UnsupportedUpstream, match=r"not installed.*make sglang-setup"):
        dialects.supported_version()


@pytest.mark.parametrize("need", ADAPTER_NEEDS)
def test_a_missing_capability_is_named_in_one_line(monkeypatch: pytest.MonkeyPatch, need: str) -> None:
    """Any version number: what is missing is a capability, named with what it is."""
    _installed(monkeypatch, dataclasses.replace(ENOUGH, **{name: False for name in need.split("|")}))
    with pytest.raises(dialects.UnsupportedUpstream) as caught:
        dialects.supported_version()
    message = str(caught.value)
    assert "\n" not in message and message.startswith("sglang 0.5.99 lacks a capability the upstream target needs")
    assert all(name in message for name in need.split("|"))
    assert target_problem({**POOLS["chunk-p1"], "target": "sglang"}) == (
        f"target 'sglang' needs upstream SGLang: {message} (python: {SGLANG_VENVS})"
    )


def test_a_version_number_alone_decides_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    for version in ("0.5.18", "0.5.23", "0.5.24.dev1+g999897973", "9.9"):
        _installed(monkeypatch, dataclasses.replace(ENOUGH, version=version))
        assert dialects.supported_version() == version


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


def test_the_naive_paged_path_is_refused_without_the_kernel_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    paged = PoolConfig(page_size=4, kernel_backend="torch")
    _installed(monkeypatch, dataclasses.replace(ENOUGH, paged_kernels_attr=False))
    assert target._unsupported(paged, FaultSet.of([])) == (
        "sglang 0.5.99's paged allocator always launches its Triton kernels; use kernel_backend 'triton'"
    )
    assert target._unsupported(PoolConfig(page_size=1, kernel_backend="torch"), FaultSet.of([])) is None
    assert target._unsupported(PoolConfig(page_size=4, kernel_backend="triton"), FaultSet.of([])) is None
    _installed(monkeypatch, dataclasses.replace(ENOUGH, paged_kernels_attr=True))
    assert target._unsupported(paged, FaultSet.of([])) is None


def test_ops_are_listed_without_loading_sglang() -> None:
    assert {"admit", "extend", "decode", "finish", "retract", "abort", "flush"} <= target.SglangPool.OPS
    assert {"spec_prepare", "spec_commit", "pd_prealloc", "offload_release"} <= target.SglangPool.OPS


@pytest.mark.parametrize(
    ("caps", "backend"),
    [
        (dataclasses.replace(ENOUGH, paged_kernels_attr=False), "triton"),
        (dataclasses.replace(ENOUGH, paged_kernels_attr=True), "torch"),
        (Capabilities(), "torch"),
    ],
    ids=["no-switch", "switch", "no-sglang"],
)
def test_a_paged_pool_on_sglang_takes_the_kernels_its_sglang_has(
    monkeypatch: pytest.MonkeyPatch, caps: Capabilities, backend: str
) -> None:
    """Without the kernel switch there is no naive torch path, so `--target sglang` on chunk-p4 runs the Triton
    kernels; without sglang the config stays as it was, so that the error names the missing sglang."""
    _installed(monkeypatch, caps)
    config = retarget(POOLS["chunk-p4"], "sglang")
    assert (config["target"], config.get("kernel_backend", "torch")) == ("sglang", backend)
    assert retarget(POOLS["chunk-p1"], "sglang").get("kernel_backend", "torch") == "torch"
    assert retarget(POOLS["chunk-p4"], "reference") == {**POOLS["chunk-p4"], "target": "reference"}


def test_the_kernel_reason_comes_last_so_the_reason_retarget_cannot_fix_is_told(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without the kernel switch a paged pool on a CUDA device has two problems; the one `retarget` cannot fix is
    the one told."""
    _installed(monkeypatch, dataclasses.replace(ENOUGH, paged_kernels_attr=False))
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
