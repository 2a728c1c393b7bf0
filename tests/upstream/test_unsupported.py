"""Where the upstream target cannot run it says why, in every venv: missing or unsupported sglang, faults asked
for, and `upstream/setup.sh` given a version it does not build."""

from __future__ import annotations

import importlib.metadata
import subprocess
from pathlib import Path

import pytest

from impl.engine import PoolConfig
from impl.faults import FaultSet
from impl.upstream import dialects
from impl.upstream.target import SglangPool

ROOT = Path(__file__).resolve().parents[2]


def _version_is(monkeypatch: pytest.MonkeyPatch, version: str | None) -> None:
    def fake(name: str) -> str:
        assert name == "sglang"
        if version is None:
            raise importlib.metadata.PackageNotFoundError(name)
        return version

    monkeypatch.setattr(dialects.importlib.metadata, "version", fake)


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


@pytest.mark.parametrize("version", ["", "0.5.19", "latest"])
def test_setup_refuses_other_versions_in_one_line(version: str) -> None:
    done = subprocess.run(
        ["bash", str(ROOT / "upstream" / "setup.sh"), version], capture_output=True, text=True, check=False
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [f"setup.sh: sglang version must be 0.5.23 or 0.5.18, got '{version}'"]
