"""`make verify-sglang SGLANG_SRC=DIR` on a checkout laid out from a published wheel
(`upstream/checkout_from_wheel.py`): setup builds its venv from the checkout (editable, no deps) and says which
tree core it got, and the verification runs as on a release; the checkout's version (`0.5.22.dev1+g…`) is no
release the manifest names, so the findings of the release it grew from are reported by name as known, and
nothing fails.

Slow (a download, a fresh venv, a bounded verification: several minutes). Runs in the venv of `CHECKOUT_RELEASE`
(`make sglang-test SGLANG=0.5.21`), where pip fetches that release's wheel.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

CHECKOUT_RELEASE = "0.5.21"  # the newest release on which findings reproduce, so the checkout shows them as known
if importlib.util.find_spec("sglang") is None or importlib.metadata.version("sglang") != CHECKOUT_RELEASE:
    pytest.skip(f"runs in the venv of sglang {CHECKOUT_RELEASE} (`make sglang-test`)", allow_module_level=True)

from tests.upstream.known import findings_on  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def _run(*args: str | Path, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(a) for a in args], cwd=cwd, capture_output=True, text=True)


def test_a_checkout_made_from_a_wheel_verifies_with_its_findings_known(tmp_path: Path) -> None:
    wheel = f"sglang=={CHECKOUT_RELEASE}"
    fetched = _run(sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", tmp_path, wheel)
    assert fetched.returncode == 0, fetched.stderr[-2000:]
    checkout = tmp_path / "sglang-checkout"
    laid = _run(sys.executable, ROOT / "upstream" / "checkout_from_wheel.py", next(tmp_path.glob("*.whl")), checkout)
    assert laid.returncode == 0, laid.stderr[-2000:]
    args = f"--cases 5 --random 4 --out {tmp_path / 'reports'}"
    done = _run("make", "verify-sglang", f"SGLANG_SRC={checkout}", f"SGLANG_VENV_DIR={tmp_path}", f"VERIFY_ARGS={args}")
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-4000:]
    assert "setup: tree cores: rust, python" in out  # what setup got, and what verification then drives
    assert "radix shapes on tree cores rust, python" in out
    for finding in findings_on(CHECKOUT_RELEASE):
        assert f"{finding}: reproduces, known (sglang 0.5.22.dev1+g" in out, out[-4000:]
    assert "MISMATCH" not in out
