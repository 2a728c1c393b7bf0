"""One unit of the walker: walk one seed; a failure is written at once, unshrunk (a killed run keeps it), then
shrunk (`fuzz.walker.shrink`) and written again over it, as the campaign writes the machine's.

The file is `model.trace.dump`'s counterexample format with `meta.source` "walker": the trace's `seed` and
`meta.run_step` (the failing step's index in the whole run) are what `replay-seed` reruns.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fuzz.targets import installed_sglang
from fuzz.walker.shrink import SHRINK_S, Shrunk, shrink
from fuzz.walker.walk import Sample, Walker, WalkResult
from model.trace import Trace, dump

SOURCE = "walker"


@dataclass
class HuntResult:
    """A unit's walk, the counterexample written (None when nothing failed) and its shrink."""

    walk: WalkResult
    counterexample: Path | None = None
    shrunk: Shrunk | None = None


def counterexample_path(out: Path, config: dict[str, Any], seed: int) -> Path:
    """Where a unit's failure goes, fixed before it is shrunk (the raw and the shrunk trace share it)."""
    faults = "+".join(sorted(config.get("faults", []))) or "nofault"
    stem = f"{faults}-{config.get('cache', 'pool')}-p{config.get('page_size', 1)}-walker-{seed}"
    return out / (re.sub(r"[^A-Za-z0-9_.+-]+", "_", stem) + ".json")  # safe to paste into a shell


def hunt(
    config: dict[str, Any],
    seed: int,
    out: Path,
    *,
    steps: int | None = None,
    budget_s: float | None = None,
    exclude: frozenset[str] = frozenset(),
    shrink_s: float = SHRINK_S,
    meta: dict[str, Any] | None = None,
    on_found: Callable[[Path], None] | None = None,
    on_sample: Callable[[Sample], None] | None = None,
    walker: Walker | None = None,
    path: Path | None = None,
) -> HuntResult:
    """Walk `seed` on `config` for `steps` steps or `budget_s` seconds; write and shrink what fails. A caller may
    hand in the `walker` (built on the same config, seed and exclusions: a campaign's counts its progress) and the
    file's `path` (a campaign names its files its own way)."""
    walker = walker or Walker(config, seed, exclude)
    walk = walker.run(steps, budget_s, on_sample)
    if walk.failure is None or walk.trace is None:
        return HuntResult(walk)
    info = {**_meta(config, walk, exclude), **(meta or {})}
    path = path or counterexample_path(out, config, seed)
    dump(Trace(config, seed, walk.trace.steps, walk.failure, {**info, "shrunk": False}), path)
    if on_found is not None:
        on_found(path)
    shrunk = shrink(config, walk.trace.steps, walk.failure, shrink_s)
    dump(Trace(config, seed, shrunk.steps, shrunk.failure, {**info, "shrunk": True}), path)
    return HuntResult(walk, path, shrunk)


def _meta(config: dict[str, Any], walk: WalkResult, exclude: frozenset[str]) -> dict[str, Any]:
    """What a counterexample file says of the run that found it: enough to rerun it from the seed."""
    from fuzz.run import git_commit  # loads Hypothesis: only once a counterexample is written

    assert walk.trace is not None
    meta: dict[str, Any] = {
        "source": SOURCE,
        "seed": walk.seed,
        "run_step": walk.steps - 1,
        "walk": walk.walks - 1,
        "unshrunk_steps": len(walk.trace.steps),
        "swarm": walk.swarm.describe(),
        "commit": git_commit(),
    }
    if config.get("target") == "sglang":
        meta["sglang"] = installed_sglang()
    if exclude:
        meta["excluded_ops"] = sorted(exclude)
    return meta
