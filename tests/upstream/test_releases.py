"""The one list of supported releases (`upstream/releases.txt`) as the Makefile, `upstream/setup.sh` and Python
read it; the closest release of a source checkout; setup's refusals; a checkout laid out from a (small,
hand-made) wheel. Runs in every venv, sglang or not."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path
from types import ModuleType

import pytest

from impl.upstream import releases
from impl.upstream.releases import Release, closest_release, published_releases, version_key

ROOT = Path(__file__).resolve().parents[2]
SETUP = ROOT / "upstream" / "setup.sh"


def _script(name: str) -> ModuleType:
    """A module of `upstream/` (scripts, not a package), loaded by path."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "upstream" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _setup(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(SETUP), *args], capture_output=True, text=True, check=False)


def test_the_list_holds_every_release_from_0_5_18_to_0_5_23_oldest_first() -> None:
    versions = [r.version for r in published_releases()]
    assert versions == ["0.5.18", "0.5.19", "0.5.20", "0.5.21", "0.5.22", "0.5.23"]
    assert versions == sorted(versions, key=version_key)


def test_every_release_is_pinned_with_its_extras_and_einops() -> None:
    for release in published_releases():
        pins = (ROOT / "upstream" / f"constraints-{release.version}.txt").read_text().splitlines()
        names = {line.split("==")[0].lower() for line in pins if "==" in line}
        assert f"sglang=={release.version}" in pins
        assert "torch==2.13.0" in pins
        assert {"einops", *release.extra_deps} <= names, release


def test_comments_and_extras_are_read(tmp_path: Path) -> None:
    listing = tmp_path / "releases.txt"
    listing.write_text("# a comment\n0.1.0 dep-a dep-b  # why\n\n0.2.0\n")
    assert published_releases(listing) == (Release("0.1.0", ("dep-a", "dep-b")), Release("0.2.0"))


@pytest.mark.parametrize(
    ("version", "closest"),
    [
        ("0.5.24.dev3+g1234abc", "0.5.23"),  # a checkout of main after the last release
        ("0.5.23", "0.5.23"),
        ("0.5.23.post1", "0.5.23"),
        ("0.5.21.dev2", "0.5.20"),  # before 0.5.21 was tagged
        ("0.5.21rc1", "0.5.20"),
        ("0.6.0", "0.5.23"),
        ("0.4.0", "0.5.18"),  # older than every release: the oldest
    ],
)
def test_a_checkout_is_pinned_like_the_release_at_or_before_it(version: str, closest: str) -> None:
    assert closest_release(version).version == closest


def test_a_word_that_is_no_version_is_refused() -> None:
    with pytest.raises(ValueError, match="not a version"):
        version_key("latest")


_MAKE_VARIABLES = ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES", "SGLANG", "SGLANG_SRC", "SGLANG_VENV_DIR")


def test_make_reads_the_same_list() -> None:
    # Run under `make sglang-test SGLANG=V` (as CI's per-release jobs run it), the outer make's variables reach a
    # nested make through MAKEFLAGS and the environment: this make must see none of them.
    env = {k: v for k, v in os.environ.items() if k not in _MAKE_VARIABLES}
    dry = subprocess.run(["make", "-n", "sglang-setup"], cwd=ROOT, capture_output=True, text=True, check=True, env=env)
    assert " ".join(r.version for r in published_releases()) in dry.stdout
    one = subprocess.run(
        ["make", "-n", "sglang-setup", "SGLANG=0.5.20"], cwd=ROOT, capture_output=True, text=True, env=env
    )
    assert "for v in 0.5.20;" in one.stdout


def test_the_list_script_prints_what_python_reads() -> None:
    done = subprocess.run([sys.executable, releases.__file__, "list"], capture_output=True, text=True, check=True)
    assert done.stdout.split() == [r.version for r in published_releases()]


@pytest.mark.parametrize("version", ["", "0.5.17", "0.5.24", "latest"])
def test_setup_refuses_other_versions_in_one_line(version: str) -> None:
    done = _setup(version)
    listed = " ".join(r.version for r in published_releases())
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"setup.sh: sglang version must be one of {listed} (upstream/releases.txt), got '{version}'"
    ]


def test_setup_refuses_a_folder_that_is_no_checkout(tmp_path: Path) -> None:
    done = _setup("--src", str(tmp_path))
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"setup.sh: --src needs an sglang checkout (DIR/python/pyproject.toml), got '{tmp_path}'"
    ]


def test_declared_pins_keep_only_exact_pins_of_the_named_packages(monkeypatch: pytest.MonkeyPatch) -> None:
    declared_pins = _script("declared_pins")
    requires = [
        "transformers==5.12.1",
        "openai==2.6.1",
        "torch==2.13.0",
        "pydantic",
        "xgrammar==0.2.1; sys_platform == 'linux'",
        "sentencepiece==0.2.1; extra == 'test'",
        "partial-json-parser>=0.2",
    ]
    monkeypatch.setattr(declared_pins, "requires", lambda name: requires)
    names = ["transformers", "openai", "pydantic", "xgrammar", "sentencepiece", "partial_json_parser"]
    assert declared_pins.declared_pins(names) == ["transformers==5.12.1", "openai==2.6.1", "xgrammar==0.2.1"]


def _tiny_wheel(path: Path) -> Path:
    """A wheel shaped as sglang's: the package, a generated `_version.py`, a compiled extension, metadata."""
    wheel = path / "sglang-0.5.23-cp311-cp311-manylinux_2_34_x86_64.whl"
    metadata = (
        "Metadata-Version: 2.4\nName: sglang\nVersion: 0.5.23\nSummary: a serving framework\n"
        "Requires-Python: >=3.10\nRequires-Dist: torch==2.14.1\n"
        'Requires-Dist: st_attn==0.0.7; (platform_machine != "arm64") and extra == "diffusion"\n'
        'Requires-Dist: pytest; extra == "test"\n'
    )
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("sglang/__init__.py", "")
        zf.writestr("sglang/_version.py", "__version__ = '0.5.23'\n")
        zf.writestr("sglang/srt/mem_cache/rust_tree_core/mem_cache.cpython-311-x86_64-linux-gnu.so", b"\x7fELF")
        zf.writestr("sglang-0.5.23.dist-info/METADATA", metadata)
        zf.writestr("sglang-0.5.23.dist-info/entry_points.txt", "[console_scripts]\nsglang = sglang.cli.main:main\n")
    return wheel


def test_a_checkout_from_a_wheel_is_laid_out_as_upstream_one_commit_past_its_tag(tmp_path: Path) -> None:
    checkout = _script("checkout_from_wheel")
    directory = tmp_path / "sglang"
    assert checkout.lay_out(_tiny_wheel(tmp_path), directory) == "0.5.23"
    project = tomllib.loads((directory / "python" / "pyproject.toml").read_text())
    assert project["project"]["dynamic"] == ["version"] and "version" not in project["project"]
    assert project["tool"]["setuptools_scm"] == {"root": "..", "version_file": "sglang/_version.py"}
    assert project["project"]["dependencies"] == ["torch==2.14.1"]
    assert project["project"]["optional-dependencies"] == {
        "diffusion": ['st_attn==0.0.7; (platform_machine != "arm64")'],
        "test": ["pytest"],
    }
    assert project["project"]["scripts"] == {"sglang": "sglang.cli.main:main"}
    assert not (directory / "python" / "sglang" / "_version.py").exists()  # generated by the build, ignored
    assert list((directory / "python").rglob("*.so"))
    described = checkout._git(directory, "describe", "--tags", "--long")
    assert described == f"v0.5.23-1-g{checkout.head_sha(directory)[:7]}"
    assert checkout._git(directory, "status", "--porcelain") == ""


def test_the_same_wheel_gives_the_same_commit_and_can_leave_its_extensions_out(tmp_path: Path) -> None:
    checkout = _script("checkout_from_wheel")
    wheel = _tiny_wheel(tmp_path)
    checkout.lay_out(wheel, tmp_path / "a")
    checkout.lay_out(wheel, tmp_path / "b")
    assert checkout.head_sha(tmp_path / "a") == checkout.head_sha(tmp_path / "b")
    checkout.lay_out(wheel, tmp_path / "c", keep_extensions=False)
    assert not list((tmp_path / "c").rglob("*.so"))
    assert checkout.head_sha(tmp_path / "c") != checkout.head_sha(tmp_path / "a")


def test_a_checkout_is_not_laid_over_files(tmp_path: Path) -> None:
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "file").write_text("")
    done = subprocess.run(
        [sys.executable, str(ROOT / "upstream" / "checkout_from_wheel.py"), str(_tiny_wheel(tmp_path)), "taken"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert (done.returncode, done.stderr.strip()) == (2, "checkout_from_wheel: taken is not empty")
