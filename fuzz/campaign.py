"""`python -m fuzz campaign`: a time-boxed fuzz campaign over every pool and swarm, on N worker processes.

A unit of work is one plain Hypothesis run: one seed, one pool, one swarm, `examples` test cases. Each worker
walks its own seed stream (`unit_seed`) and rotates through the configurations (`unit_configuration`); shards
of a CI matrix split the seed space so that they never repeat each other's units. Workers share one example
database, keyed per pool, swarm and faults, so that saved failures replay in the configuration that found them.
A failing step writes its unshrunk trace at once (a killed campaign keeps it); the shrunk trace replaces it
after Hypothesis's shrink and `delete_steps`. Rerunning on the same `--out` re-checks what is already there.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import queue as queue_module
import re
import shlex
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TextIO

import hypothesis
import torch
from hypothesis.database import DirectoryBasedExampleDatabase, ExampleDatabase
from hypothesis.internal.conjecture import engine as hypothesis_engine
from hypothesis.stateful import get_state_machine_test

from fuzz.flags import MAX_SECONDS, whole
from fuzz.lockstep import Lockstep, StepFailed
from fuzz.machine import SWARMS, Recorder, build_machine
from fuzz.profiles import POOLS, Profile
from fuzz.replay import load_trace, replay
from fuzz.run import delete_steps, git_commit
from impl.faults import FAULTS
from model.exits import EXIT_CLEAN, EXIT_FOUND, EXIT_INTERNAL, EXIT_INVALID, save_traceback
from model.trace import Failure, Trace, TraceError, dump, load, one_line

EXIT_FAILED = EXIT_INTERNAL  # the campaign itself failed: a worker crashed, or re-checking --out crashed kvlife
MAX_WORKERS = 256
MAX_SHARDS = 4096
MAX_EXAMPLES = 1_000_000
MAX_SEED_BASE = (1 << 63) - 1
DEFAULT_EXAMPLES = 100  # test cases per unit: about 10 s of lockstep on one core
STEPS_PER_CASE = 50
PROGRESS_EVERY_S = 10.0
BEAT_EVERY_S = 1.0
SHRINK_S = 20  # Hypothesis's shrink per failing unit stops here; `delete_steps` then trims what is left
GRACE_S = 300.0  # after the budget, units in flight get this long to finish and shrink before they are cut
REPORT_NAMES = ("report.json",)
_DURATION = re.compile(r"^\s*([0-9]{1,9}(?:\.[0-9]{1,9})?)\s*([smh]?)\s*$")
_UNIT_S = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str) -> float:
    """Seconds in `90s`, `10m`, `8h` (a bare number is seconds), at most a week; ValueError with a one-line
    reason otherwise."""
    match = _DURATION.match(text)
    value = float(match.group(1)) * _UNIT_S[match.group(2)] if match else 0.0
    if not 0 < value <= MAX_SECONDS:
        raise ValueError(
            f"a duration is a positive number with s, m or h (90s, 10m, 8h), at most {MAX_SECONDS:g} s, got {text!r}"
        )
    return value


def parse_shard(text: str) -> tuple[int, int]:
    """`I/N` with 1 <= I <= N <= `MAX_SHARDS`; ValueError with a one-line reason otherwise."""
    match = re.fullmatch(r"\s*([0-9]{1,9})\s*/\s*([0-9]{1,9})\s*", text)
    if not match or not 1 <= int(match.group(1)) <= int(match.group(2)) <= MAX_SHARDS:
        raise ValueError(f"a shard is I/N with 1 <= I <= N <= {MAX_SHARDS} (e.g. 2/4), got {text!r}")
    return int(match.group(1)), int(match.group(2))


def unit_seed(base: int, index: int, worker: int, workers: int, shard: int, shards: int) -> int:
    """The seed of unit `index` of `worker` in shard `shard` (1-based) of `shards`: distinct for every
    (index, worker, shard), so shards and workers never repeat each other's seeds."""
    return base + ((index * workers + worker) * shards + (shard - 1))


def configurations(pools: Iterable[str], swarms: Iterable[str]) -> list[tuple[str, str]]:
    """Every (pool, swarm) pair, the pools alternating so that consecutive units change pool."""
    return [(pool, swarm) for swarm in swarms for pool in pools]


def unit_configuration(
    configs: list[tuple[str, str]], index: int, worker: int, workers: int, shard: int
) -> tuple[str, str]:
    """The configuration of unit `index` of `worker`: each worker walks every configuration in turn, from its
    own offset, so that workers (and shards) run different ones at the same time."""
    return configs[(index + worker + (shard - 1) * workers) % len(configs)]


@dataclass(frozen=True)
class Plan:
    """Everything that decides a campaign's units; printed first, so that a campaign can be rerun exactly."""

    budget_s: float
    workers: int
    shard: tuple[int, int]
    seed_base: int
    target: str
    faults: tuple[str, ...]
    db: Path
    out: Path
    examples: int
    configs: tuple[tuple[str, str], ...]
    commit: str

    def seed(self, index: int, worker: int) -> int:
        return unit_seed(self.seed_base, index, worker, self.workers, *self.shard)

    def configuration(self, index: int, worker: int) -> tuple[str, str]:
        return unit_configuration(list(self.configs), index, worker, self.workers, self.shard[0])

    def rerun_command(self) -> str:
        faults = "".join(f" --fault {f}" for f in self.faults)
        return (
            f"python -m fuzz campaign --budget {self.budget_s:g}s --workers {self.workers} "
            f"--shard {self.shard[0]}/{self.shard[1]} --seed {self.seed_base} --target {self.target} "
            f"--examples {self.examples} --db {self.db} --out {self.out}{faults}"
        )


@dataclass
class UnitResult:
    """One unit's outcome, as the worker reports it."""

    worker: int
    index: int
    seed: int
    pool: str
    swarm: str
    examples: int
    steps: int
    cases: int
    seconds: float
    counterexample: str | None = None
    failure: dict[str, Any] | None = None
    shrunk: bool = False


def counterexample_name(faults: Iterable[str], pool: str, swarm: str, seed: int) -> str:
    """A file name fixed before the failure is shrunk (the raw trace and the shrunk one share it)."""
    stem = f"{'+'.join(sorted(faults)) or 'nofault'}-{pool}-{swarm}-{seed}"
    return re.sub(r"[^A-Za-z0-9_.+-]+", "_", stem) + ".json"  # safe to paste into a shell


def run_unit(
    plan: Plan,
    index: int,
    worker: int,
    examples: int,
    on_start: Callable[[Recorder], None],
    on_found: Callable[[Path], None],
) -> UnitResult:
    """Run one unit; a failure is written raw the moment it happens, and rewritten once shrunk."""
    pool, swarm = plan.configuration(index, worker)
    seed = plan.seed(index, worker)
    config = {**POOLS[pool], "target": plan.target, "faults": sorted(plan.faults)}
    path = plan.out / counterexample_name(plan.faults, pool, swarm, seed)
    meta = {
        "source": "campaign",
        "pool": pool,
        "swarm": swarm,
        "commit": plan.commit,
        "hypothesis": hypothesis.__version__,
        "examples": examples,
        "steps_per_case": STEPS_PER_CASE,
    }

    def keep_raw(lock: Any, failure: Failure) -> None:
        if not path_written:
            dump(Trace(config, seed, lock.steps[: failure.step + 1], failure, {**meta, "shrunk": False}), path)
            path_written.append(path)
            on_found(path)

    path_written: list[Path] = []
    recorder = Recorder(config, swarm, on_failure=keep_raw)
    on_start(recorder)
    profile = Profile("campaign", examples, STEPS_PER_CASE, derandomize=False, keep_database=False)
    database = campaign_database(plan.db, pool, swarm, config["faults"])
    settings = hypothesis.settings(
        profile.hypothesis_settings(plan.db), database=database, verbosity=hypothesis.Verbosity.quiet
    )
    test = _seeded(get_state_machine_test(build_machine(recorder), settings=settings), seed)
    result = UnitResult(worker, index, seed, pool, swarm, examples, 0, 0, 0.0)
    start = time.perf_counter()
    try:
        test()
    except StepFailed as exc:
        assert recorder.last is not None
        steps, failure = delete_steps(config, recorder.last.steps[: exc.failure.step + 1], exc.failure)
        dump(Trace(config, seed, steps, failure, {**meta, "shrunk": True}), path)
        result.counterexample, result.failure, result.shrunk = str(path), asdict(failure), True
    result.steps, result.cases, result.seconds = recorder.total_steps, recorder.cases, time.perf_counter() - start
    return result


def _seeded(test: Any, seed: int) -> Any:
    # What `hypothesis.seed` sets, without its other effect: it also turns the example database off (a seed replays
    # one run). A unit wants both: the database replays failures saved by earlier units, the seed draws the rest.
    test._hypothesis_internal_use_seed = seed
    return test


def campaign_database(db: Path, pool: str, swarm: str, faults: list[str]) -> KeyedDatabase:
    """The example database of one campaign configuration: the shared folder `db`, keyed by pool, swarm and
    faults (HypoFuzz targets save under the same keys, so a campaign replays what they found)."""
    return KeyedDatabase(DirectoryBasedExampleDatabase(str(db)), f"{pool}|{swarm}|{faults}")


class KeyedDatabase(ExampleDatabase):
    """An example database whose keys carry a prefix: every lockstep machine class has the same digest, so
    without it a failure saved by one pool or swarm would be replayed by all of them."""

    def __init__(self, inner: ExampleDatabase, prefix: str) -> None:
        super().__init__()
        self.inner, self.prefix = inner, prefix.encode() + b"|"

    def save(self, key: bytes, value: bytes) -> None:
        self.inner.save(self.prefix + key, value)

    def fetch(self, key: bytes) -> Iterable[bytes]:
        return self.inner.fetch(self.prefix + key)

    def delete(self, key: bytes, value: bytes) -> None:
        self.inner.delete(self.prefix + key, value)

    def move(self, src: bytes, dest: bytes, value: bytes) -> None:
        self.inner.move(self.prefix + src, self.prefix + dest, value)


def worker_main(plan: Plan, worker: int, queue: Any, deadline: float) -> None:
    """A worker process: units until the wall-clock `deadline` (at least one), with a heartbeat every second."""
    try:
        torch.set_num_threads(1)
        # Hypothesis has no setting for how long it shrinks (300 s); its engine reads this constant per shrink.
        hypothesis_engine.MAX_SHRINKING_SECONDS = SHRINK_S
        _work(plan, worker, queue, deadline)
    except BaseException:
        queue.put(("error", worker, traceback.format_exc()))
        raise


class _Heartbeat:
    """A worker's running totals, sent to the parent every second from a thread: a unit can last minutes."""

    def __init__(self, worker: int, queue: Any) -> None:
        self.worker, self.queue, self.start = worker, queue, time.time()
        self.recorder: Recorder | None = None
        self.done_steps = 0
        self.seen: set[str] = set()
        self.lock, self.stopped = threading.Lock(), threading.Event()
        threading.Thread(target=self._loop, daemon=True).start()

    def unit_started(self, recorder: Recorder) -> None:
        with self.lock:
            self.recorder = recorder

    def unit_finished(self) -> None:
        self.send()  # the unit's last corners
        with self.lock:  # its steps move from the recorder to the total in one go: never counted twice
            self.done_steps += self.recorder.total_steps if self.recorder else 0
            self.recorder = None

    def stop(self) -> None:
        self.stopped.set()
        self.send()

    def send(self) -> None:
        with self.lock:
            recorder = self.recorder
            steps = self.done_steps + (recorder.total_steps if recorder else 0)
            new = set(recorder.corners) - self.seen if recorder else set()
            self.seen |= new
        self.queue.put(("beat", self.worker, steps, time.time() - self.start, time.process_time(), sorted(new)))

    def _loop(self) -> None:
        while not self.stopped.wait(BEAT_EVERY_S):
            self.send()


def _work(plan: Plan, worker: int, queue: Any, deadline: float) -> None:
    parent = os.getppid()
    heartbeat = _Heartbeat(worker, queue)
    index, examples = 0, plan.examples
    while index == 0 or (time.time() < deadline and os.getppid() == parent):
        result = run_unit(
            plan, index, worker, examples, heartbeat.unit_started, lambda path: queue.put(("found", worker, str(path)))
        )
        heartbeat.unit_finished()
        queue.put(("unit", worker, asdict(result)))
        index += 1
        examples = last_unit_examples(deadline - time.time(), result.cases / max(result.seconds, 1e-9), plan.examples)
    heartbeat.stop()
    queue.put(("done", worker))


def last_unit_examples(remaining_s: float, cases_per_s: float, examples: int) -> int:
    """Test cases for the next unit: all of `examples`, or as many as fit before the budget runs out (at least one),
    so that the campaign ends near its budget rather than a whole unit after it."""
    return max(1, min(examples, int(remaining_s * cases_per_s)))


@dataclass
class Recheck:
    """A counterexample found by an earlier run on the same `--out`, replayed again."""

    file: str
    status: str
    failure: dict[str, Any] | None = None


REPRODUCES = "reproduces"
INTERNAL_ERROR = "internal error"


def recheck(out: Path) -> list[Recheck]:
    """Replay every counterexample already in `out` through the loader: does it still fail? A file that is not a
    valid trace is `invalid: why`; a crash of kvlife while replaying one is an `internal error`, never a finding."""
    found = []
    for path in sorted(out.glob("*.json")):
        if path.name in REPORT_NAMES:
            continue
        try:
            result = replay(load_trace(path, None))
        except TraceError as exc:
            found.append(Recheck(str(path), f"invalid: {exc}"))
            continue
        except Exception as exc:
            found.append(Recheck(str(path), _internal(exc)))
            continue
        status = REPRODUCES if result.failure is not None else "no longer reproduces"
        found.append(Recheck(str(path), status, asdict(result.failure) if result.failure else None))
    return found


def _internal(exc: Exception) -> str:
    where = save_traceback("".join(traceback.format_exception(exc)))
    what = one_line(f"{type(exc).__name__}: {exc}", 200)
    return f"{INTERNAL_ERROR} (kvlife itself failed, not the pool): {what}; traceback in {where}"


Signature = tuple[str, str, tuple[str, ...], str]  # failure kind, failure id, faults, target
NEW_GROUP, NEW_SHAPE, DUPLICATE, SEEN = "new group", "new shape", "duplicate", "seen"


@dataclass
class Shape:
    """One shrunk op sequence of a finding: the file kept for it and how many counterexamples took it."""

    ops: list[str]
    file: str
    count: int = 1


@dataclass
class Group:
    """Counterexamples of one finding (the same failure kind and id, under the same faults and target), with
    each distinct shrunk op sequence kept once. The shortest shape is the representative."""

    kind: str
    id: str
    faults: list[str]
    target: str
    shapes: list[Shape] = field(default_factory=list)

    @property
    def count(self) -> int:
        return sum(shape.count for shape in self.shapes)

    @property
    def shortest(self) -> Shape:
        return min(self.shapes, key=lambda shape: len(shape.ops))  # the first found among the shortest

    @property
    def representative(self) -> str:
        return self.shortest.file

    @property
    def ops(self) -> list[str]:
        return self.shortest.ops

    @property
    def false_alarm(self) -> bool:
        """Found on the reference pool with no fault switch on: the pool or the harness is wrong, loudly."""
        return not self.faults and self.target == "reference"

    def as_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "id": self.id,
            "faults": self.faults,
            "target": self.target,
            "count": self.count,
            "representative": self.representative,
            "ops": self.ops,
            "shapes": [asdict(shape) for shape in self.shapes],
            "false_alarm": self.false_alarm,
            "replay": f"python -m fuzz replay {shlex.quote(self.representative)}",
        }


def found_line(groups: list[dict[str, Any]]) -> str:
    """`1 finding (4 shapes)`: how many distinct findings, and shrunk op sequences among them."""
    shapes = sum(len(g["shapes"]) for g in groups)
    return f"{len(groups)} finding{'s' * (len(groups) != 1)} ({shapes} shape{'s' * (shapes != 1)})"


def signature(trace: Any) -> Signature:
    """What makes two counterexamples the same finding: failure kind and id, under the same faults and target.
    The legacy reuse guard, for one, is reached after any release path; each path is a shape of one finding."""
    failure = trace.failure
    faults = tuple(sorted(trace.config.get("faults", [])))
    return (
        failure.kind if failure else "",
        failure.id if failure else "",
        faults,
        trace.config.get("target", "reference"),
    )


def add_finding(groups: dict[Signature, Group], path: str, trace: Any) -> str:
    """Count `trace` (from `path`) in its group: NEW_GROUP, NEW_SHAPE (a new op sequence, kept), DUPLICATE
    (an op sequence already kept in another file: counted; the caller may drop the file) or SEEN (this file)."""
    sig = signature(trace)
    ops = [step.op for step in trace.steps]
    group = groups.get(sig)
    if group is None:
        groups[sig] = Group(sig[0], sig[1], list(sig[2]), sig[3], [Shape(ops, path)])
        return NEW_GROUP
    shape = next((shape for shape in group.shapes if shape.ops == ops), None)
    if shape is None:
        group.shapes.append(Shape(ops, path))
        return NEW_SHAPE
    if shape.file == path:
        return SEEN
    shape.count += 1
    return DUPLICATE


@dataclass
class Tally:
    """What the parent learns from its workers while the campaign runs."""

    start: float
    steps: dict[int, int] = field(default_factory=dict)
    busy_s: dict[int, float] = field(default_factory=dict)
    cpu_s: dict[int, float] = field(default_factory=dict)  # CPU time: a rate that does not depend on the load
    corners: dict[str, float] = field(default_factory=dict)  # corner -> elapsed seconds when first reached
    coverage: list[tuple[float, int]] = field(default_factory=list)
    found: set[str] = field(default_factory=set)
    units: list[dict[str, Any]] = field(default_factory=list)
    groups: dict[Signature, Group] = field(default_factory=dict)
    finished: set[int] = field(default_factory=set)
    errors: dict[int, str] = field(default_factory=dict)

    def take(self, message: tuple[Any, ...]) -> None:
        kind, worker = message[0], message[1]
        if kind == "beat":
            self._beat(worker, *message[2:])
        elif kind == "found":
            self.found.add(message[2])
        elif kind == "unit":
            self._unit(message[2])
        elif kind == "done":
            self.finished.add(worker)
        elif kind == "error":
            self.errors[worker] = message[2]

    def _beat(self, worker: int, steps: int, busy_s: float, cpu_s: float, new_corners: list[str]) -> None:
        self.steps[worker], self.busy_s[worker], self.cpu_s[worker] = steps, busy_s, cpu_s
        elapsed = time.time() - self.start
        fresh = [c for c in new_corners if c not in self.corners]
        for corner in fresh:
            self.corners[corner] = elapsed
        if fresh:
            self.coverage.append((round(elapsed, 2), len(self.corners)))

    def _unit(self, unit: dict[str, Any]) -> None:
        self.units.append(unit)
        path = unit["counterexample"]
        if path is None:
            return
        self.found.add(path)
        try:
            trace = load(Path(path))
        except TraceError:
            return
        if add_finding(self.groups, path, trace) == DUPLICATE:
            Path(path).unlink(missing_ok=True)  # a shape already on disk: counted, not kept

    def progress(self) -> str:
        elapsed = time.time() - self.start
        steps = sum(self.steps.values())
        return (
            f"[{elapsed:6.0f} s] {steps:,} steps, {steps / max(elapsed, 1e-9):,.0f} steps/s, "
            f"{len(self.found)} counterexamples, {len(self.corners)} lifecycle corners, "
            f"{len(self.units)} units done"
        )


def header(plan: Plan) -> list[str]:
    """The lines printed first: enough to rerun the campaign exactly."""
    shard, shards = plan.shard
    configs = ", ".join(f"{pool}/{swarm}" for pool, swarm in plan.configs)
    return [
        f"fuzz campaign: commit {plan.commit}, seed base {plan.seed_base}, shard {shard}/{shards}, "
        f"{plan.workers} workers, budget {plan.budget_s:g} s, target {plan.target}, "
        f"faults {', '.join(plan.faults) or 'none'}",
        f"  unit: one Hypothesis run of {plan.examples} test cases of up to {STEPS_PER_CASE} steps (shrink at most "
        f"{SHRINK_S} s; the last units before the budget run fewer); "
        f"seed of unit k of worker w: {plan.seed_base} + ((k * {plan.workers} + w) * {shards} + {shard - 1})",
        f"  configuration space ({len(plan.configs)} pool/swarm pairs, worker w runs pair (k + w + "
        f"{(shard - 1) * plan.workers}) mod {len(plan.configs)}): {configs}",
        f"  example database {plan.db} (keyed by pool, swarm and faults); counterexamples and report in {plan.out}",
        f"  rerun: {plan.rerun_command()}",
    ]


@dataclass
class CampaignResult:
    """The exit code and the report's data (also in `report.json`)."""

    exit_code: int
    report: dict[str, Any]


Worker = Callable[[Plan, int, Any, float], None]


def run_campaign(
    plan: Plan, out: TextIO | None = None, err: TextIO | None = None, worker: Worker = worker_main
) -> CampaignResult:
    """Run the campaign, write its report in `plan.out`; exit code 0 nothing found, 1 found, 70 the campaign
    failed (a worker crashed, or re-checking `--out` crashed kvlife). `out` and `err` default to the streams at the
    time of the call (so that a redirection applies)."""
    from fuzz.campaign_report import write_report  # matplotlib loads in the parent only, never in workers

    def say(line: str) -> None:
        print(line, file=out or sys.stdout, flush=True)

    torch.set_num_threads(1)  # the parent only supervises; its workers each use one core
    for line in header(plan):
        say(line)
    plan.out.mkdir(parents=True, exist_ok=True)
    tally = Tally(time.time())
    rechecked = _resume(plan, tally, say)
    crashed = _supervise(plan, tally, say, worker)
    report = _report_data(plan, tally, rechecked, crashed)
    write_report(plan.out, report)
    for group in report["groups"]:
        if group["false_alarm"]:
            print(
                one_line(
                    f"FALSE ALARM: {group['kind']} {group['id']} with no fault on the reference pool: "
                    f"{group['representative']}"
                ),
                file=err or sys.stderr,
                flush=True,
            )
    say(_summary(report, plan.out))
    return CampaignResult(report["exit_code"], report)


def _resume(plan: Plan, tally: Tally, say: Callable[[str], None]) -> list[Recheck]:
    rechecked = recheck(plan.out)
    if not rechecked:
        return rechecked
    say(f"resume: re-checking {len(rechecked)} counterexamples already in {plan.out}")
    for item in rechecked:
        if item.status == REPRODUCES:
            try:
                add_finding(tally.groups, item.file, _trim_unshrunk(Path(item.file)))
            except Exception as exc:
                item.status, item.failure = _internal(exc), None
        say(f"  {one_line(item.file)}: {item.status}")
    return rechecked


def _trim_unshrunk(path: Path) -> Trace:
    """A trace left unshrunk by a killed campaign loses the steps it can do without (in place); others as they are."""
    trace = load(path)
    if trace.meta.get("shrunk") is not False or trace.failure is None:
        return trace
    steps, failure = delete_steps(trace.config, trace.steps[: trace.failure.step + 1], trace.failure)
    trimmed = Trace(trace.config, trace.seed, steps, failure, {**trace.meta, "shrunk": "steps deleted on resume"})
    dump(trimmed, path)
    return trimmed


def _supervise(plan: Plan, tally: Tally, say: Callable[[str], None], worker: Worker) -> dict[int, str]:
    """Start the workers, print progress until every one has finished; the workers that crashed, and why."""
    # Forked workers start at once with the parent's imports; the other start methods import torch and the harness
    # again in each worker, seconds of a short campaign. One torch thread in the parent (set in `run_campaign`)
    # keeps it free of thread pools that a fork would copy half-alive.
    fork = sys.platform == "linux"
    context = multiprocessing.get_context("fork") if fork else multiprocessing.get_context("spawn")
    queue = context.Queue()
    deadline = tally.start + plan.budget_s
    procs = {
        w: context.Process(target=worker, args=(plan, w, queue, deadline), daemon=True) for w in range(plan.workers)
    }
    for proc in procs.values():
        proc.start()
    crashed: dict[int, str] = {}
    next_progress = time.time() + PROGRESS_EVERY_S
    while len(tally.finished | crashed.keys()) < len(procs):
        _drain(queue, tally, timeout=0.5)
        for w, proc in procs.items():
            if w not in tally.finished and w not in crashed and not proc.is_alive():
                _drain(queue, tally, timeout=0.0)
                if w not in tally.finished:
                    crashed[w] = _why(tally.errors.get(w), proc.exitcode)
                    say(f"worker {w} crashed: {crashed[w]}")
        if time.time() >= next_progress:
            say(tally.progress())
            next_progress += PROGRESS_EVERY_S
        if time.time() > deadline + GRACE_S:
            crashed.update(_cut(procs, tally, crashed))
    say(tally.progress())
    return crashed


def _drain(queue: Any, tally: Tally, timeout: float) -> None:
    try:
        tally.take(queue.get(timeout=timeout) if timeout else queue.get_nowait())
        while True:
            tally.take(queue.get_nowait())
    except queue_module.Empty:
        return


def _why(error: str | None, exitcode: int | None) -> str:
    if error:
        return f"{one_line(error.strip().splitlines()[-1], 200)}; traceback in {save_traceback(error)}"
    return f"exit code {exitcode}"


def _cut(procs: dict[int, Any], tally: Tally, crashed: dict[int, str]) -> dict[int, str]:
    cut = {}
    for w, proc in procs.items():
        if w not in tally.finished and w not in crashed:
            proc.kill()
            cut[w] = f"still running {GRACE_S:g} s after the budget; killed"
    return cut


def _report_data(plan: Plan, tally: Tally, rechecked: list[Recheck], crashed: dict[int, str]) -> dict[str, Any]:
    elapsed = time.time() - tally.start
    steps = sum(tally.steps.values())
    groups = sorted(tally.groups.values(), key=lambda g: (not g.false_alarm, g.kind, g.id, len(g.ops)))
    broken = crashed or any(r.status.startswith(INTERNAL_ERROR) for r in rechecked)
    exit_code = EXIT_FAILED if broken else EXIT_FOUND if groups else EXIT_CLEAN
    return {
        "commit": plan.commit,
        "seed_base": plan.seed_base,
        "shard": f"{plan.shard[0]}/{plan.shard[1]}",
        "workers": plan.workers,
        "budget_s": plan.budget_s,
        "target": plan.target,
        "faults": list(plan.faults),
        "examples_per_unit": plan.examples,
        "steps_per_case": STEPS_PER_CASE,
        "db": str(plan.db),
        "configurations": [list(c) for c in plan.configs],
        "rerun": plan.rerun_command(),
        "elapsed_s": round(elapsed, 2),
        "steps": steps,
        "steps_per_s": round(steps / max(elapsed, 1e-9), 1),
        "per_worker": [_worker_stats(w, tally) for w in range(plan.workers)],
        "corners": dict(sorted(tally.corners.items(), key=lambda kv: kv[1])),
        "coverage": [list(point) for point in tally.coverage],
        "units": sorted(tally.units, key=lambda u: (u["worker"], u["index"])),
        "rechecked": [asdict(r) for r in rechecked],
        "groups": [g.as_json() for g in groups],
        "crashed": {str(w): why for w, why in crashed.items()},
        "exit_code": exit_code,
    }


def _worker_stats(worker: int, tally: Tally) -> dict[str, Any]:
    steps, busy, cpu = tally.steps.get(worker, 0), tally.busy_s.get(worker, 0.0), tally.cpu_s.get(worker, 0.0)
    units = sum(1 for u in tally.units if u["worker"] == worker)
    return {
        "worker": worker,
        "steps": steps,
        "seconds": round(busy, 2),
        "cpu_s": round(cpu, 2),
        "steps_per_s": round(steps / busy, 1) if busy > 0 else 0.0,
        "steps_per_cpu_s": round(steps / cpu, 1) if cpu > 0 else 0.0,
        "units": units,
    }


def _summary(report: dict[str, Any], out: Path) -> str:
    found = sum(g["count"] for g in report["groups"])
    verdict = {
        EXIT_CLEAN: "nothing found",
        EXIT_FOUND: f"{found} counterexamples: {found_line(report['groups'])}",
        EXIT_FAILED: f"the campaign failed (an internal error): {len(report['crashed'])} workers crashed, "
        f"{sum(r['status'].startswith(INTERNAL_ERROR) for r in report['rechecked'])} re-checks crashed",
    }[report["exit_code"]]
    return (
        f"fuzz campaign: {verdict}; {report['steps']:,} steps in {report['elapsed_s']:.0f} s "
        f"({report['steps_per_s']:,.0f} steps/s); report in {out / 'report.md'}"
    )


def add_flags(c: argparse.ArgumentParser) -> None:
    """The `campaign` subcommand's flags (bad values exit 2 through argparse with a one-line reason)."""
    c.add_argument(
        "--budget",
        type=_arg(parse_duration),
        required=True,
        metavar="DURATION",
        help="how long to fuzz: 90s, 10m, 8h (units in flight finish after it)",
    )
    c.add_argument(
        "--workers",
        type=whole(1, MAX_WORKERS),
        default=min(os.cpu_count() or 1, MAX_WORKERS),
        metavar="N",
        help=f"worker processes, at most {MAX_WORKERS} (default: all cores)",
    )
    c.add_argument(
        "--shard",
        type=_arg(parse_shard),
        default=(1, 1),
        metavar="I/N",
        help="run only shard I of N of the seed space (CI matrix jobs)",
    )
    c.add_argument("--target", choices=("reference", "sglang"), default="reference", help="the pool to fuzz")
    c.add_argument("--db", type=Path, default=Path(".hypothesis/campaign"), help="shared example database")
    c.add_argument("--out", type=Path, default=Path("reports/campaign"), help="counterexamples and the report")
    c.add_argument(
        "--seed", type=whole(0, MAX_SEED_BASE), metavar="BASE", help="seed base (default: drawn and printed)"
    )
    c.add_argument(
        "--fault",
        action="append",
        default=[],
        choices=sorted(FAULTS),
        metavar="NAME",
        help="turn on a fault switch (repeatable)",
    )
    c.add_argument(
        "--examples",
        type=whole(1, MAX_EXAMPLES),
        default=DEFAULT_EXAMPLES,
        metavar="N",
        help=f"test cases per unit (default {DEFAULT_EXAMPLES}: about 10 s on one core)",
    )


def cli(args: Any) -> int:
    """Run `python -m fuzz campaign` from parsed arguments; its exit code."""
    faults = tuple(sorted(set(args.fault)))
    torch.set_num_threads(1)  # before the pools below are built: see `_supervise`
    pools, problems = buildable_pools(args.target, faults)
    if not pools:
        print(
            f"fuzz campaign: no pool of target {args.target} can be built here: {next(iter(problems.values()))}",
            file=sys.stderr,
        )
        return EXIT_INVALID
    for pool, problem in problems.items():
        print(f"fuzz campaign: {pool} left out: {problem}", file=sys.stderr)
    seed_base = args.seed if args.seed is not None else int.from_bytes(os.urandom(4), "little")
    plan = Plan(
        args.budget,
        args.workers,
        args.shard,
        seed_base,
        args.target,
        faults,
        args.db,
        args.out,
        args.examples,
        tuple(configurations(pools, SWARMS)),
        git_commit(),
    )
    return run_campaign(plan).exit_code


def buildable_pools(target: str, faults: tuple[str, ...]) -> tuple[list[str], dict[str, str]]:
    """The pools of `POOLS` this target can be built with here, and why each other one cannot (one line)."""
    pools, problems = [], {}
    for pool in sorted(POOLS):
        try:
            Lockstep({**POOLS[pool], "target": target, "faults": list(faults)})
        except ValueError as exc:
            problems[pool] = str(exc)
            continue
        pools.append(pool)
    return pools, problems


def _arg(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    def convert(text: str) -> Any:
        try:
            return parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return convert
