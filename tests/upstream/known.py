"""The triaged findings a test may expect of the installed sglang, read from `upstream/findings.json`."""

from __future__ import annotations

from pathlib import Path

from fuzz.upstream_findings import fuzz_excluded, load_findings
from impl.upstream.releases import closest_release

FINDINGS = Path(__file__).resolve().parents[2] / "upstream" / "findings.json"


def findings_on(version: str) -> frozenset[str]:
    """The ids of the findings that reproduce on `version`'s release (the closest release at or before a version
    no release names: a source checkout is expected to behave as the release it grew from)."""
    release = closest_release(version).version
    return frozenset(f.id for f in load_findings(FINDINGS) if release in f.versions)


def excluded_on(version: str) -> frozenset[str]:
    """The ops (and request kinds) fuzzing drops on `version`'s release: the triggers of its known findings."""
    return fuzz_excluded(load_findings(FINDINGS), closest_release(version).version)


def offload_release_crashes_on(version: str, cache: str) -> bool:
    """Whether the offload release crashes on this release's radix tree: the known finding
    `offload-release-unified-crash` (it reads `protected_size_`, which `UnifiedRadixCache` lacks)."""
    return cache == "radix" and "offload-release-unified-crash" in findings_on(version)
