"""The walker against the Hypothesis machine, side by side in one run on the same pools: lockstep steps per second
and per core-hour, each as a fraction of the pool-call ceiling, and the time to first failure on every fault of
the exam. Run from the repository root: `python -m bench.walker_bench [--quick] [--target sglang]`.

The ceiling is what a step would cost if nothing but the pool's own calls took time: the lifecycle calls
(`fuzz.lockstep.OPS`) on the target and on the differential's clones, outermost only (an admission calls the
batch inside it), clocked in the same run as the engine they belong to. An engine's fraction of the ceiling is
the share of its time spent in those calls; its harness overhead is everything else, per step, split in a third
line into the engine's own work (drawing steps, building pools) and the lockstep's (`Lockstep.step` less the
pool's calls: observation, invariants, judgement, the differential's copies), with the ratio the two engines
would have were the lockstep's own work free: the most that making the shared lockstep cheaper can give. Both engines
run the same amount of work on each pool, in alternating slices, so that what else the machine runs weighs on
both alike; the CPU seconds of this process are printed beside the wall clock.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

from hypothesis.stateful import get_state_machine_test

import fuzz.lockstep as lockstep_module
from fuzz.flags import one_torch_thread
from fuzz.machine import Recorder, build_machine
from fuzz.mutants import score_fault
from fuzz.profiles import POOLS, Profile
from fuzz.targets import TARGETS, retarget
from fuzz.walker import mutants as walker_mutants
from fuzz.walker.walk import Walker
from impl.faults import FAULTS

BENCH_POOLS = ("chunk-p1", "chunk-p4", "radix-p4")
SLICES = 3  # each engine's work on a pool, cut in this many slices that alternate with the other engine's
MACHINE_CASES, STEPS_PER_CASE = 100, 30  # one machine slice: derandomized, as `make bench`'s lockstep rate
WALK_STEPS = 1_500  # one walker seed's run; a slice walks seeds until it has taken the machine slice's steps
EXAM_BUDGET_S = 60.0
TARGET_RATIO = 3.0  # the walker's steps per second over the machine's, at least
SECONDS_PER_HOUR = 3600.0
POOL_OPS = sorted(lockstep_module.OPS - lockstep_module.HARNESS_OPS)


@dataclass
class Rate:
    """One engine's work on one pool: steps, wall and CPU seconds, and the seconds inside the pool's calls."""

    steps: int = 0
    wall_s: float = 0.0
    cpu_s: float = 0.0
    pool_s: float = 0.0
    lockstep_s: float = 0.0  # inside `Lockstep.step`: the pool's calls and the lockstep's own work
    differential_s: float = 0.0  # inside `Lockstep.differential` (part of `lockstep_s`): copies, paths, compares

    @property
    def per_s(self) -> float:
        return _ratio(self.steps, self.wall_s)

    @property
    def per_cpu_s(self) -> float:
        return _ratio(self.steps, self.cpu_s)

    @property
    def ceiling_per_s(self) -> float:
        return _ratio(self.steps, self.pool_s)

    @property
    def harness_us(self) -> float:
        return self._us_per_step(self.wall_s - self.pool_s)

    @property
    def pool_us(self) -> float:
        return self._us_per_step(self.pool_s)

    @property
    def lockstep_us(self) -> float:
        """The lockstep's own work per step (observation, invariants, judgement, differential copies), which
        both engines run: `Lockstep.step` less the pool's calls in it."""
        return self._us_per_step(self.lockstep_s - self.pool_s)

    @property
    def differential_share(self) -> float:
        return _ratio(self.differential_s, self.wall_s)

    @property
    def engine_us(self) -> float:
        """The engine's own work per step: drawing steps, building pools, recording (all outside the lockstep)."""
        return self._us_per_step(self.wall_s - self.lockstep_s)

    def _us_per_step(self, seconds: float) -> float:
        return seconds / max(self.steps, 1) * 1e6


def _ratio(part: float, whole: float) -> float:
    """`part / whole`, 0 where nothing was measured."""
    return part / whole if whole else 0.0


@contextmanager
def method_clock(owner: type, names: list[str], spent: list[float]) -> Iterator[None]:
    """Clock every call of the methods `names` of `owner` into `spent[0]`, outermost only."""
    depth = [0]
    originals = {name: getattr(owner, name) for name in names if hasattr(owner, name)}

    def clocked(original: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            if depth[0]:
                return original(*args, **kwargs)
            depth[0] += 1
            start = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                spent[0] += time.perf_counter() - start
                depth[0] -= 1

        return call

    for name, original in originals.items():
        setattr(owner, name, clocked(original))
    try:
        yield
    finally:
        for name, original in originals.items():
            setattr(owner, name, original)


@contextmanager
def _clocked(rate: Rate, target_class: type) -> Iterator[None]:
    """Add the wall, CPU, pool and lockstep seconds of the block to `rate`."""
    spent, stepped, compared = [0.0], [0.0], [0.0]
    lockstep = lockstep_module.Lockstep
    with (
        method_clock(target_class, POOL_OPS, spent),  # on the target and so on its clones
        method_clock(lockstep, ["step"], stepped),
        method_clock(lockstep, ["differential"], compared),
    ):
        wall, cpu = time.perf_counter(), time.process_time()
        yield
        rate.wall_s += time.perf_counter() - wall
        rate.cpu_s += time.process_time() - cpu
    rate.pool_s += spent[0]
    rate.lockstep_s += stepped[0]
    rate.differential_s += compared[0]


def machine_slice(config: dict[str, Any], index: int) -> int:
    """One slice of the Hypothesis machine (derandomized, its own seed per slice); the steps it took."""
    recorder = Recorder(config)
    profile = Profile(f"bench-{index}", MACHINE_CASES, STEPS_PER_CASE, derandomize=True, keep_database=False)
    with TemporaryDirectory() as db:
        get_state_machine_test(build_machine(recorder), settings=profile.hypothesis_settings(Path(db)))()
    return recorder.total_steps


def walker_slice(config: dict[str, Any], first_seed: int, steps: int) -> tuple[int, int]:
    """Walker seeds from `first_seed` until `steps` steps are taken; the steps taken and the next seed."""
    taken, seed = 0, first_seed
    while taken < steps:
        taken += Walker(config, seed).run(steps=WALK_STEPS).steps
        seed += 1
    return taken, seed


def throughput(pool: str, target: str, slices: int) -> tuple[Rate, Rate]:
    """The machine's and the walker's rates on `pool`, in alternating slices of the same number of steps."""
    config = retarget({**POOLS[pool], "faults": []}, target)
    target_class = TARGETS[target]()
    machine, walker, seed = Rate(), Rate(), 0
    for index in range(slices):
        with _clocked(machine, target_class):
            taken = machine_slice(config, index)
        machine.steps += taken
        with _clocked(walker, target_class):
            walked, seed = walker_slice(config, seed, taken)
        walker.steps += walked
    return machine, walker


def _rate_line(pool: str, engine: str, rate: Rate) -> str:
    per_core_hour = rate.per_s * SECONDS_PER_HOUR  # one process on one core
    per_cpu_hour = rate.per_cpu_s * SECONDS_PER_HOUR
    fraction = _ratio(rate.pool_s, rate.wall_s)
    return (
        f"  {pool:<9} {engine:<8} {rate.per_s:7.0f} steps/s  {per_core_hour / 1e6:5.2f} M/core-h "
        f"({per_cpu_hour / 1e6:5.2f} M per CPU-h)  pool {rate.pool_us:5.0f} us/step, ceiling "
        f"{rate.ceiling_per_s:6.0f} steps/s: {fraction:4.0%} of it; harness {rate.harness_us:5.0f} us/step"
    )


def report_throughput(target: str, slices: int, say: Callable[[str], None] = print) -> None:
    say(
        f"walker vs machine on the {target} target: the same steps per pool in {slices} alternating slices "
        f"(machine: {MACHINE_CASES} cases of {STEPS_PER_CASE} steps a slice; walker: seeds of {WALK_STEPS} steps)"
    )
    for pool in BENCH_POOLS:
        machine, walker = throughput(pool, target, slices)
        say(_rate_line(pool, "machine", machine))
        say(_rate_line(pool, "walker", walker))
        ratio = _ratio(walker.per_s, machine.per_s)
        cpu_ratio = _ratio(walker.per_cpu_s, machine.per_cpu_s)
        met = "met" if ratio >= TARGET_RATIO else "not met"
        overhead = "at most" if walker.harness_us <= walker.pool_us else "more than"
        say(
            f"  {pool:<9} walker/machine {ratio:4.2f}x (target {TARGET_RATIO:g}x: {met}; "
            f"{cpu_ratio:4.2f}x in CPU time); the walker's harness overhead is {overhead} its pool's call time"
        )
        say(_split_line(pool, machine, walker))


def _split_line(pool: str, machine: Rate, walker: Rate) -> str:
    """Where the harness time goes, per step: each engine's own work and the lockstep's (shared code, though not
    the same amount: the engines draw different ops), the share of each engine's time in the release-path
    differential (its copies and the paths' pool calls), and the ratio there would be if the lockstep's own work
    cost nothing (the most that cutting it could give)."""
    bound = (machine.pool_us + machine.engine_us) / max(walker.pool_us + walker.engine_us, 1e-9)
    return (
        f"  {pool:<9} per step: machine's own {machine.engine_us:4.0f} us, lockstep's {machine.lockstep_us:4.0f} us, "
        f"{machine.differential_share:4.0%} of its time in the differential; walker's own {walker.engine_us:4.0f} us, "
        f"lockstep's {walker.lockstep_us:4.0f} us, {walker.differential_share:4.0%} in the differential; "
        f"with a free lockstep walker/machine would be {bound:4.2f}x"
    )


def report_exam(budget_s: float, faults: list[str], say: Callable[[str], None] = print) -> None:
    """Time to first failure on every fault of the exam, both engines (the machine: `fuzz mutants`' ci runs)."""
    say(f"exam: time to first failure (fuzzing time, imports excluded), budget {budget_s:g} s per fault")
    say(f"  {'fault':<31} {'machine':>18} {'walker':>28}")
    with TemporaryDirectory() as tmp:
        for name in faults:
            score = score_fault(name, budget_s, Path(tmp) / "machine")
            # A failure seen but not shrunk within the budget still has its time to first failure.
            seen = score.seconds is not None
            machine = f"{_s(score.seconds)} {_n(score.final.steps)} steps" if seen else score.final.result
            found = _walker_exam(name, budget_s, Path(tmp) / "walker")
            say(f"  {name:<31} {machine:>18} {found:>28}")


def _walker_exam(name: str, budget_s: float, out: Path) -> str:
    left, spent = budget_s, 0.0
    for pool in walker_mutants.pools_for(name):
        found = walker_mutants.search(name, pool, left, out)
        attempt = found.attempt
        if attempt.result == walker_mutants.DETECTED:
            first = spent + (attempt.first_failure_s or 0.0)
            return f"{_s(first)} ({found.lockstep_steps} lockstep) {_n(attempt.steps)} steps"
        spent += attempt.wall_s
        left -= attempt.wall_s
        if left <= 0:
            break
    return "missed"


def _s(seconds: float | None) -> str:
    return "–" if seconds is None else f"{seconds:6.2f} s"


def _n(steps: int | None) -> str:
    return "–" if steps is None else str(steps)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.walker_bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="one slice per pool, and no exam")
    parser.add_argument("--target", choices=sorted(TARGETS), default="reference", help="the pool the engines step")
    parser.add_argument("--exam-budget", type=float, default=EXAM_BUDGET_S, metavar="SECONDS", help="per fault")
    args = parser.parse_args(argv)
    one_torch_thread()
    report_throughput(args.target, 1 if args.quick else SLICES)
    if not args.quick and args.target == "reference":
        report_exam(args.exam_budget, list(FAULTS))


if __name__ == "__main__":
    main()
