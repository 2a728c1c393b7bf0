"""A checkout laid out from the newest release's wheel (`upstream/checkout_from_wheel.py`) installs editable into
a fresh venv with upstream's own recipe, `pip install --no-deps -e DIR/python`, and takes its version from git as
a checkout of upstream's main does: one past the release, `.dev1`, and the commit it stands on.

Slow (a download, a fresh venv and an isolated build: about a minute). Runs in the newest release's venv
(`make sglang-test`), where that release's wheel is the installed one.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from impl.upstream.releases import published_releases

NEWEST = published_releases()[-1].version
if importlib.util.find_spec("sglang") is None or importlib.metadata.version("sglang") != NEWEST:
    pytest.skip(
        f"runs in the venv of the newest release, sglang {NEWEST} (`make sglang-test`)", allow_module_level=True
    )

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def _run(*args: str | Path, cwd: Path | None = None) -> str:
    done = subprocess.run([str(a) for a in args], cwd=cwd, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip()


def _next_dev(release: str) -> str:
    """What setuptools-scm's default scheme calls one commit past tag `release`: the last number bumped, dev1."""
    *head, last = release.split(".")
    return ".".join([*head, str(int(last) + 1)]) + ".dev1"


def test_a_checkout_from_the_wheel_installs_editable_with_a_version_from_git(tmp_path: Path) -> None:
    _run(sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", tmp_path, f"sglang=={NEWEST}")
    wheel = next(tmp_path.glob("sglang-*.whl"))
    checkout = tmp_path / "sglang"
    _run(sys.executable, ROOT / "upstream" / "checkout_from_wheel.py", wheel, checkout)
    head = _run("git", "rev-parse", "HEAD", cwd=checkout)

    fresh = tmp_path / "venv"
    venv.create(fresh, with_pip=True)
    python = fresh / "bin" / "python"
    _run(python, "-m", "pip", "install", "-q", "--no-deps", "-e", checkout / "python")

    installed = _run(python, "-c", "import importlib.metadata as m; print(m.version('sglang'))")
    match = re.fullmatch(re.escape(_next_dev(NEWEST)) + r"\+g([0-9a-f]{7,40})", installed)
    assert match is not None, installed
    assert head.startswith(match[1])
    origin = _run(python, "-c", "import importlib.util as u; print(u.find_spec('sglang').origin)")
    assert Path(origin) == checkout / "python" / "sglang" / "__init__.py"
    assert f"__version__ = version = '{installed}'" in (checkout / "python" / "sglang" / "_version.py").read_text()
    assert _run("git", "status", "--porcelain", cwd=checkout) == ""  # what the build wrote is ignored, as upstream's
