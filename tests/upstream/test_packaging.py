"""`pip install .` puts one top-level package into site-packages, `kvlife`, holding every harness folder and the
data the harness reads at run time; the list of packages in pyproject.toml names every package folder. Runs in
any venv (no sglang needed)."""

from __future__ import annotations

import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("model", "impl", "properties", "fuzz")
# What the harness opens at run time, relative to its home (the repository root, or site-packages/kvlife).
DATA = ("model/manifest.json", "upstream/findings.json", "upstream/releases.txt")


def _setuptools() -> dict[str, object]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def test_every_package_folder_is_installed_under_kvlife() -> None:
    folders = {
        ".".join(init.parent.relative_to(ROOT).parts)
        for folder in FOLDERS
        for init in (ROOT / folder).rglob("__init__.py")
    }
    packages = set(_setuptools()["packages"])  # type: ignore[arg-type]
    assert {f"kvlife.{name}" for name in folders} | {"kvlife", "kvlife.upstream"} == packages


def test_the_wheel_has_one_top_level_name_and_the_runtime_data(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", tmp_path, ROOT],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    names = zipfile.ZipFile(next(tmp_path.glob("kvlife-*.whl"))).namelist()
    assert {name.split("/")[0] for name in names} == {"kvlife", "kvlife-0.1.0.dist-info"}
    assert {f"kvlife/{path}" for path in DATA} <= set(names)
    assert "kvlife/upstream/findings/stale-row-reuse.json" in names
    entry_points = next(name for name in names if name.endswith("entry_points.txt"))
    assert "kvlife = kvlife.cli:main" in zipfile.ZipFile(next(tmp_path.glob("*.whl"))).read(entry_points).decode()


def test_the_console_command_finds_the_harness_and_says_what_is_missing() -> None:
    """Run as the installed command runs (`kvlife.cli:main`): a bad flag reaches the harness's own parser (the
    import path worked) and is exit 2; no argument is the usage line and exit 2."""
    command = "import sys; from kvlife.cli import main; sys.exit(main(['verify-sglang', '--cases', 'x']))"
    done = subprocess.run(
        [sys.executable, "-c", command],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert done.returncode == 2, done.stderr[-2000:]
    assert "--cases" in done.stderr  # the harness's own parser read the flags: the import path worked
    usage = subprocess.run([sys.executable, "-m", "kvlife.cli"], capture_output=True, text=True, cwd=ROOT)
    assert usage.returncode == 2 and usage.stderr.startswith("usage: kvlife verify-sglang")
