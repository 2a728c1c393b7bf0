"""Rerunning a walker counterexample from its seed: the config, the seed, the ops the run left out and the
failing step's index in the run (`meta.run_step`) are all the walk needs, so the rerun takes the same steps and
fails at the same one (on the commit that wrote the file: the walk is a function of the walker's code too).

The file went through `model.trace.load` (untrusted input); what the rerun reads from `meta` is checked here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fuzz.lockstep import OPS
from fuzz.replay import prepare
from fuzz.targets import target_problem
from fuzz.walker.hunt import SOURCE
from fuzz.walker.walk import Walker
from model.trace import Trace, show
from properties.vocabulary import KIND_EXCLUSIONS

MAX_RUN_STEP = 10_000_000  # a day of walking on one core: a file asking for more is refused, not run


class RerunError(ValueError):
    """The file is not a walker counterexample the rerun can use; the message says why on one line."""


@dataclass
class RerunResult:
    """Whether the rerun failed at the recorded step the recorded way, and what it printed."""

    reproduced: bool
    lines: list[str] = field(default_factory=list)


def rerun(trace: Trace) -> RerunResult:
    """Walk the file's seed again up to its failing step and compare (see the module docstring)."""
    config, seed, run_step, exclude = _checked(trace)
    walk = Walker(config, seed, exclude).run(steps=run_step + 1)
    lines = [f"rerunning seed {seed} for {run_step + 1} steps ({walk.swarm.describe()})"]
    recorded = trace.failure
    if walk.failure is None or recorded is None or walk.trace is None:
        lines.append(f"did not reproduce: {walk.steps} steps pass")
        return RerunResult(False, lines)
    failure = walk.failure
    same = (failure.kind, failure.id) == (recorded.kind, recorded.id) and walk.steps - 1 == run_step
    said = f"step {failure.step} of walk {walk.walks - 1} (run step {walk.steps - 1}): {failure.kind} {failure.id}"
    if not same:
        lines.append(f"did not reproduce: the rerun failed at {said}, the file at run step {run_step}")
        return RerunResult(False, lines)
    lines.append(f"reproduced: {said}: {failure.message}")
    if trace.meta.get("shrunk") is False:
        equal = walk.trace.steps == trace.steps
        lines.append(f"  the rerun's trace {'equals' if equal else 'differs from'} the file's")
        return RerunResult(equal, lines)
    lines.append(f"  the file holds the shrunk trace ({len(trace.steps)} steps); the walk had {len(walk.trace.steps)}")
    return RerunResult(True, lines)


def _checked(trace: Trace) -> tuple[dict[str, Any], int, int, frozenset[str]]:
    """The rerun's config, seed, failing run step and excluded ops, or `RerunError`."""
    meta = trace.meta
    if meta.get("source") != SOURCE:
        raise RerunError(f"meta.source is {show(meta.get('source'))}, not {SOURCE!r}: not a walker trace")
    run_step = meta.get("run_step")
    if trace.seed is None or not _whole(run_step, MAX_RUN_STEP):
        raise RerunError(f"a walker trace needs a seed and meta.run_step in [0, {MAX_RUN_STEP}]")
    excluded = meta.get("excluded_ops", [])
    known = OPS | set(KIND_EXCLUSIONS)
    if not isinstance(excluded, list) or not all(isinstance(op, str) and op in known for op in excluded):
        raise RerunError(f"meta.excluded_ops names no op or kind kvlife has: {show(excluded)}")
    config = prepare(trace, None).config
    problem = target_problem(config)
    if problem:
        raise RerunError(problem)
    assert isinstance(run_step, int)
    return config, trace.seed, run_step, frozenset(excluded)


def _whole(value: object, high: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= high
