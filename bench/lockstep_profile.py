"""Where a lockstep step's time goes: the same Hypothesis rules as `make bench`'s lockstep rate, with a wall
clock around each part of `fuzz.lockstep.Lockstep`, printed in microseconds per step.

The parts nest: `differential` (every release path on clones of the pool) and the plain step (the pool's
call, its snapshot, the model's judgement and step, the invariants and the abstraction) make up `lockstep`;
`hypothesis and rules` is everything else (drawing the rule and its arguments, preconditions, the engine).
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

from hypothesis.stateful import get_state_machine_test

import fuzz.lockstep as lockstep_module
from fuzz.lockstep import Lockstep
from fuzz.machine import Recorder, build_machine
from fuzz.profiles import POOLS, Profile
from impl.engine import ReferencePool
from model.concrete import Model

# (label, owner, attribute): each is timed where the lockstep calls it.
PARTS: list[tuple[str, Any, str]] = [
    ("lockstep", Lockstep, "step"),
    ("  differential", Lockstep, "differential"),
    ("  pool snapshot", ReferencePool, "snapshot"),
    ("  invariants on the pool", lockstep_module, "check_snapshot"),
    ("  model judgement and step", Model, "step"),
    ("  model: is the call legal", Model, "enabled"),
]
POOL_OPS = sorted(lockstep_module.OPS - lockstep_module.HARNESS_OPS)  # the pool methods a step calls


@contextmanager
def _timed(spent: dict[str, float]) -> Iterator[None]:
    """Wrap every part with a clock; restore the originals afterwards."""
    originals: list[tuple[Any, str, Any]] = []

    def wrap(label: str, owner: Any, name: str) -> None:
        original = getattr(owner, name)
        originals.append((owner, name, original))

        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                spent[label] += time.perf_counter() - start

        setattr(owner, name, timed)

    for label, owner, name in PARTS:
        wrap(label, owner, name)
    for op in POOL_OPS:
        wrap("  pool calls", ReferencePool, op)
    try:
        yield
    finally:
        for owner, name, original in reversed(originals):
            setattr(owner, name, original)


def breakdown(pool: str, profile: Profile, out: Callable[[str], None] = print) -> None:
    """Run `profile`'s rules on `pool` with every part timed, and print microseconds per step for each."""
    recorder = Recorder({**POOLS[pool], "faults": []})
    spent: dict[str, float] = defaultdict(float)
    with TemporaryDirectory() as db, _timed(spent):
        test = get_state_machine_test(build_machine(recorder), settings=profile.hypothesis_settings(Path(db)))
        start = time.perf_counter()
        test()
        total = time.perf_counter() - start
    steps = max(recorder.total_steps, 1)
    out(f"  {pool}: where a step's {total / steps * 1e6:.0f} us go ({recorder.total_steps} steps, clocks included)")
    rows = [(label, spent[label]) for label, _, _ in PARTS[:2]] + [("  pool calls", spent["  pool calls"])]
    rows += [(label, spent[label]) for label, _, _ in PARTS[2:]]
    rows.append(("hypothesis and rules", total - spent["lockstep"]))
    for label, seconds in rows:
        out(f"    {label:<30} {seconds / steps * 1e6:7.0f} us  {seconds / total:6.1%}")
