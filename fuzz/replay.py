"""`python -m fuzz replay`: run a counterexample file's steps on a fresh pool, in lockstep, without Hypothesis.

Exit status: 1 the trace fails on the pool (the recorded failure or, printed as such, another one);
0 every step passes; 2 the file is not a valid trace, names a pool this build cannot make, or has a step the
target does not implement; 70 kvlife itself failed (`fuzz.exits`). `--target` replays it on another target than
the one it recorded. Only the pool's own calls can fail a step as a finding (a `crash` failure); an exception
anywhere else is a bug of kvlife and propagates.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fuzz.lockstep import Lockstep
from fuzz.targets import POOL_KEYS, retarget
from impl.target import PoolConfig
from model.trace import Failure, Step, Trace, TraceError, load, show
from properties.abstraction import observe


@dataclass
class ReplayResult:
    """The first failure (or None), the steps run as the pool took them (with its choices), and the log."""

    failure: Failure | None
    steps_run: int
    lines: list[str]
    steps: list[Step]


def load_trace(path: Path, faults: list[str] | None, target: str | None = None) -> Trace:
    """Load and validate (`model.trace.load`, then `prepare`)."""
    return prepare(load(path), faults, target)


def prepare(trace: Trace, faults: list[str] | None, target: str | None = None) -> Trace:
    """The trace as replay runs it: refused (`TraceError`) if its config names a key the pool would not see;
    `faults` and `target` (when given) replace the ones recorded in the file."""
    problem = unpassed_key(trace.config)
    if problem:
        raise TraceError(problem)
    config = dict(trace.config)
    if faults is not None:
        config["faults"] = faults
    if target is not None:
        config = retarget(config, target)
    return Trace(config, trace.seed, trace.steps, trace.failure, trace.meta)


# What the lockstep passes to the pool, and the harness's own keys (`fault_rate` says how often the run drew fault
# plans; the plans themselves are in the steps); any other config key must hold PoolConfig's default, or the
# replay would silently run a different pool than the file describes.
_PASSED = frozenset(POOL_KEYS) | {"target", "faults", "fault_rate"}
_DEFAULTS = {f.name: f.default for f in dataclasses.fields(PoolConfig)}


def unpassed_key(config: dict[str, Any]) -> str | None:
    """Why the config cannot be replayed as written (a key the pool would not see), or None."""
    for key, value in config.items():
        if key not in _PASSED and value != _DEFAULTS.get(key, value):
            passed = ", ".join(sorted(_PASSED))
            return f"config.{key} = {show(value)} is not passed to the pool by this kvlife (it passes {passed})"
    return None


def replay(trace: Trace, verbose: bool = False) -> ReplayResult:
    """Replay step by step, stopping at the first failure."""
    problem = unpassed_key(trace.config)
    if problem:
        raise TraceError(problem)
    try:
        lock = Lockstep(trace.config)
    except ValueError as exc:
        raise TraceError(f"cannot build the pool the trace describes: {exc}") from None
    missing = sorted({step.op for step in trace.steps} - lock.ops)
    if missing:
        raise TraceError(f"the {trace.config['target']} target does not implement {', '.join(missing)}")
    lines = [f"replaying {len(trace.steps)} steps on {_describe(trace.config)}"]
    for index, step in enumerate(trace.steps):
        failure = lock.step(step.op, step.args)
        taken = lock.steps[-1].choice
        # A choice the trace leaves out (an eviction of 0 on a pool that does not evict on demand) is 0.
        chose_else = any(taken.get(key, 0) != value for key, value in step.choice.items())
        note = f"  (trace chose {step.choice})" if chose_else else ""
        call = f"{step.op}(" + ", ".join(f"{k}={v}" for k, v in step.args.items()) + ")"
        chosen = "" if not taken else " -> " + ", ".join(f"{k} {v}" for k, v in taken.items())
        lines.append(f"  {index:>3} {call}{chosen}  {'FAIL' if failure else 'ok'}{note}")
        if verbose:
            lines += _states(lock)
        if failure is not None:
            return ReplayResult(failure, index + 1, lines, lock.steps)
    return ReplayResult(None, len(trace.steps), lines, lock.steps)


def _states(lock: Lockstep) -> list[str]:
    """The model's and the pool's records and counters after a step, one record a line."""
    model, pool = lock.model.observe(), observe(lock.snap)
    lines = []
    for label, obs in (("model", model), ("pool ", pool)):
        lines.append(
            f"      {label} free rows {sorted(obs.free_rows)}, free slots {obs.free_slot_count}, "
            f"tree slots {obs.tree_slot_count}"
        )
        lines += [f"      {label} req {rid}: {rec}" for rid, rec in sorted(obs.records.items())]
    return lines


def verdict(trace: Trace, result: ReplayResult) -> tuple[int, str]:
    """Exit status and the one-line summary of a replay."""
    if result.failure is None:
        return 0, f"did not reproduce: all {result.steps_run} steps pass"
    f = result.failure
    line = f"reproduced: step {f.step}: {f.kind} {f.id}: {f.message}"
    recorded = trace.failure
    if recorded is not None and (recorded.kind, recorded.id) != (f.kind, f.id):
        line += (
            f"\n(the trace recorded step {recorded.step}: {recorded.kind} {recorded.id}; the pool fails earlier "
            "or differently)"
        )
    return 1, line


def _describe(config: dict[str, object]) -> str:
    faults = ", ".join(config.get("faults", [])) or "none"  # type: ignore[arg-type]
    return (
        f"{config['target']} pool on {config['device']}: {config['rows']} rows, {config['tokens']} slots, "
        f"width {config['width']}, page size {config['page_size']}, {config['cache']} cache; faults: {faults}"
    )
