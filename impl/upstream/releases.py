"""The published sglang releases kvlife builds venvs for, read from `upstream/releases.txt` (the one list).

Standard library only, so that `upstream/setup.sh` can run it with any python before a venv exists:
`python impl/upstream/releases.py list | extras VERSION | closest VERSION`.
"""

from __future__ import annotations

import dataclasses
import re
import sys
from pathlib import Path

RELEASES_FILE = Path(__file__).resolve().parents[2] / "upstream" / "releases.txt"
# PEP 440 as upstream's versions use it: a release, then an optional pre, post or dev part and a local label.
_VERSION = re.compile(r"^v?(?P<release>\d+(?:\.\d+)*)(?P<rest>[.\-_]?[A-Za-z].*?)?(?:\+[\w.]+)?$")
_PRE = re.compile(r"^[.\-_]?(dev|a|alpha|b|beta|c|rc|pre|preview)", re.IGNORECASE)


@dataclasses.dataclass(frozen=True)
class Release:
    """One line of the list: a version and the extra light dependencies that release imports."""

    version: str
    extra_deps: tuple[str, ...] = ()


def published_releases(path: Path = RELEASES_FILE) -> tuple[Release, ...]:
    """Every release of the list, in its order (oldest first)."""
    releases = []
    for line in path.read_text().splitlines():
        words = line.split("#", 1)[0].split()
        if words:
            releases.append(Release(words[0], tuple(words[1:])))
    return tuple(releases)


def version_key(version: str) -> tuple[tuple[int, ...], int]:
    """A sort key: the release numbers, then -1 for a dev or pre-release of them, 0 for the release, 1 after it."""
    match = _VERSION.match(version.strip())
    if match is None:
        raise ValueError(f"not a version: {version!r}")
    numbers = tuple(int(part) for part in match["release"].split("."))
    numbers = numbers + (0,) * (3 - len(numbers))
    rest = match["rest"] or ""
    rank = 0 if not rest else -1 if _PRE.match(rest) else 1
    return numbers, rank


def closest_release(version: str, releases: tuple[Release, ...] | None = None) -> Release:
    """The newest published release at or before `version` (a source checkout's `0.5.24.dev3+g…` gets 0.5.23,
    `0.5.21.dev2` gets 0.5.20); the oldest where `version` precedes them all."""
    known = sorted(releases or published_releases(), key=lambda r: version_key(r.version))
    key = version_key(version)
    earlier = [release for release in known if version_key(release.version) <= key]
    return earlier[-1] if earlier else known[0]


def _main(argv: list[str]) -> int:
    usage = "usage: releases.py list | extras VERSION | closest VERSION"
    if argv == ["list"]:
        print("\n".join(release.version for release in published_releases()))
        return 0
    if len(argv) == 2 and argv[0] == "extras":
        found = [r for r in published_releases() if r.version == argv[1]]
        if not found:
            print(f"releases.py: {argv[1]} is not in {RELEASES_FILE.name}", file=sys.stderr)
            return 2
        print(" ".join(found[0].extra_deps))
        return 0
    if len(argv) == 2 and argv[0] == "closest":
        try:
            print(closest_release(argv[1]).version)
        except ValueError as error:
            print(f"releases.py: {error}", file=sys.stderr)
            return 2
        return 0
    print(usage, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
