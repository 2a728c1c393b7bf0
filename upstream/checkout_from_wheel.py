"""Lay out a directory as upstream SGLang's repository from a published wheel's files: a source checkout one
commit past the release's tag, for `upstream/setup.sh --src` and `make verify-sglang SGLANG_SRC=...`.

    python upstream/checkout_from_wheel.py WHEEL DIR [--without-extensions]

DIR gets `python/pyproject.toml`, `python/sglang/...` (the wheel's package, without its generated
`_version.py`), a `.gitignore`, and a git history: the release's files committed and tagged `vX.Y.Z`, then one
commit more. Upstream's pyproject takes its version from git with setuptools-scm (`dynamic = ["version"]`,
`root = ".."`, `version_file = "sglang/_version.py"`), so `pip install --no-deps -e DIR/python` installs
`X.Y.(Z+1).dev1+g<sha>`, as a checkout of upstream's main does. Commits carry a fixed author and date: the same
wheel gives the same sha. The wheel's compiled extensions (the Rust tree core among them) are kept, as in a
checkout whose toolchain built them; `--without-extensions` leaves them out, as in a checkout without cargo,
where upstream falls back to the Python tree core. The wheel's declared dependencies become the project's.
"""

from __future__ import annotations

import argparse
import email.message
import email.parser
import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path, PurePosixPath

IDENTITY = {
    "GIT_AUTHOR_NAME": "kvlife",
    "GIT_AUTHOR_EMAIL": "kvlife@localhost",
    "GIT_AUTHOR_DATE": "2026-01-01T00:00:00+0000",
    "GIT_COMMITTER_NAME": "kvlife",
    "GIT_COMMITTER_EMAIL": "kvlife@localhost",
    "GIT_COMMITTER_DATE": "2026-01-01T00:00:00+0000",
}
# What upstream's repository ignores of the files a build writes: the generated version file, egg-info, caches.
GITIGNORE = "python/sglang/_version.py\n*.egg-info/\nbuild/\n__pycache__/\n*.pyc\n"
EXTENSION_SUFFIXES = (".so", ".pyd")
_EXTRA = re.compile(r"""\s*(?:and\s+)?extra\s*==\s*["']([^"']+)["']""")


def toml_list(values: list[str]) -> str:
    return "[" + ", ".join(json.dumps(value) for value in values) + "]"


def split_requirements(requires: list[str]) -> tuple[list[str], dict[str, list[str]]]:
    """The wheel's `Requires-Dist` lines as pyproject dependencies and optional dependencies by extra."""
    plain: list[str] = []
    extras: dict[str, list[str]] = {}
    for requirement in requires:
        match = _EXTRA.search(requirement)
        if match is None:
            plain.append(requirement)
            continue
        rest = (requirement[: match.start()] + requirement[match.end() :]).strip()
        rest = rest.rstrip("; ").replace("; and ", "; ")
        extras.setdefault(match[1], []).append(rest)
    return plain, extras


def console_scripts(entry_points: str) -> dict[str, str]:
    """The `[console_scripts]` section of a wheel's `entry_points.txt`."""
    scripts, section = {}, ""
    for line in entry_points.splitlines():
        line = line.strip()
        if line.startswith("["):
            section = line.strip("[]")
        elif "=" in line and section == "console_scripts":
            name, target = (part.strip() for part in line.split("=", 1))
            scripts[name] = target
    return scripts


def pyproject(metadata: email.message.Message, entry_points: str) -> str:
    """A `python/pyproject.toml` shaped as upstream's: setuptools, setuptools-scm from the repository root."""
    plain, extras = split_requirements(metadata.get_all("Requires-Dist") or [])
    lines = [
        "[build-system]",
        'requires = ["setuptools>=77", "setuptools-scm>=8", "wheel"]',
        'build-backend = "setuptools.build_meta"',
        "",
        "[project]",
        'name = "sglang"',
        'dynamic = ["version"]',
        f"description = {json.dumps(metadata.get('Summary', ''))}",
        f"requires-python = {json.dumps(metadata.get('Requires-Python', '>=3.10'))}",
        f"dependencies = {toml_list(plain)}",
        "",
        "[project.optional-dependencies]",
        *(f"{json.dumps(extra)} = {toml_list(reqs)}" for extra, reqs in extras.items()),
        "",
        "[project.scripts]",
        *(f"{json.dumps(name)} = {json.dumps(target)}" for name, target in console_scripts(entry_points).items()),
        "",
        "[tool.setuptools.packages.find]",
        'include = ["sglang", "sglang.*"]',
        "",
        "[tool.setuptools.package-data]",
        '"*" = ["*"]',
        "",
        "[tool.setuptools_scm]",
        'root = ".."',
        'version_file = "sglang/_version.py"',
    ]
    return "\n".join(lines) + "\n"


def _package_files(wheel: zipfile.ZipFile, keep_extensions: bool) -> list[zipfile.ZipInfo]:
    """The wheel's `sglang/` files that a checkout tracks: not the generated version file, nor (unless kept)
    the compiled extensions."""
    files = []
    for info in wheel.infolist():
        path = PurePosixPath(info.filename)
        if info.is_dir() or path.parts[0] != "sglang" or path.as_posix() == "sglang/_version.py":
            continue
        if path.suffix in EXTENSION_SUFFIXES and not keep_extensions:
            continue
        files.append(info)
    return files


def _git(directory: Path, *args: str) -> str:
    env = {**os.environ, **IDENTITY, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    done = subprocess.run(
        ["git", "-c", "init.defaultBranch=main", "-c", "core.autocrlf=false", *args],
        cwd=directory,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


def lay_out(wheel_path: Path, directory: Path, keep_extensions: bool = True) -> str:
    """Write the checkout into `directory` (absent or empty) and return the release version it is one commit
    past."""
    if directory.exists() and any(directory.iterdir()):
        raise ValueError(f"{directory} is not empty")
    with zipfile.ZipFile(wheel_path) as wheel:
        info_dir = next(n.split("/")[0] for n in wheel.namelist() if n.split("/")[0].endswith(".dist-info"))
        metadata = email.parser.Parser().parsestr(wheel.read(f"{info_dir}/METADATA").decode())
        entry_points = (
            wheel.read(f"{info_dir}/entry_points.txt").decode()
            if (f"{info_dir}/entry_points.txt" in wheel.namelist())
            else ""
        )
        python = directory / "python"
        for info in _package_files(wheel, keep_extensions):
            target = python / info.filename
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(wheel.read(info))
    (python / "pyproject.toml").write_text(pyproject(metadata, entry_points))
    (directory / ".gitignore").write_text(GITIGNORE)
    version = metadata["Version"]
    _git(directory, "init", "-q")
    _git(directory, "add", "-A")
    _git(directory, "commit", "-q", "-m", f"sglang {version}, as published")
    _git(directory, "tag", f"v{version}")
    _git(directory, "commit", "-q", "--allow-empty", "-m", "one commit past the release")
    return version


def head_sha(directory: Path) -> str:
    """The checkout's HEAD commit (full sha)."""
    return _git(directory, "rev-parse", "HEAD")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("wheel", type=Path)
    parser.add_argument("directory", type=Path)
    parser.add_argument("--without-extensions", action="store_true", help="leave the compiled extensions out")
    args = parser.parse_args(argv)
    try:
        version = lay_out(args.wheel, args.directory, keep_extensions=not args.without_extensions)
    except (OSError, ValueError, KeyError, zipfile.BadZipFile, subprocess.CalledProcessError) as error:
        print(f"checkout_from_wheel: {error}", file=sys.stderr)
        return 2
    print(f"checkout_from_wheel: {args.directory} is sglang v{version} + 1 commit ({head_sha(args.directory)[:12]})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
