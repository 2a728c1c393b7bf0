"""A campaign's worker process: units until the deadline, each run by its engine's `UnitRunner`, and a heartbeat to
the parent every second.

Messages to the parent, on one queue: `("beat", w, steps, busy_s, cpu_s, new_corners, engine, new_transitions)`
(the transitions the running unit's engine reached that this worker had not yet sent for that engine),
`("found", w, path)`, `("unit", w, result)`, `("done", w)`, and `("error", w, traceback)` before a worker dies of an
exception.
"""

from __future__ import annotations

import os
import threading
import time
import traceback
from collections.abc import Mapping
from dataclasses import asdict
from functools import partial
from typing import Any

import torch

from fuzz.campaign.plan import HYPOTHESIS, WALKER, Plan, last_unit_examples
from fuzz.campaign.unit import Progress, UnitHooks, UnitRunner, bound_shrinking, run_unit
from fuzz.campaign.walker_unit import run_walker_unit
from fuzz.walker.coverage import Transition

BEAT_EVERY_S = 1.0
RUNNERS: dict[str, UnitRunner] = {HYPOTHESIS: run_unit, WALKER: run_walker_unit}


def worker_main(
    plan: Plan, worker: int, queue: Any, deadline: float, runners: Mapping[str, UnitRunner] = RUNNERS
) -> None:
    """A worker process: units until the wall-clock `deadline` (at least one), each run by its engine's runner,
    with a heartbeat every second."""
    try:
        torch.set_num_threads(1)
        bound_shrinking()
        _work(plan, worker, queue, deadline, runners)
    except BaseException:
        queue.put(("error", worker, traceback.format_exc()))
        raise


class Heartbeat:
    """A worker's running totals, sent to the parent every second from a thread: a unit can last minutes."""

    def __init__(self, worker: int, queue: Any) -> None:
        self.worker, self.queue, self.start = worker, queue, time.time()
        self.progress: Progress | None = None
        self.engine = ""
        self.done_steps = 0
        self.seen: set[str] = set()
        self.seen_transitions: dict[str, set[Transition]] = {}
        self.lock, self.stopped = threading.Lock(), threading.Event()
        threading.Thread(target=self._loop, daemon=True).start()

    def unit_started(self, engine: str, progress: Progress) -> None:
        with self.lock:
            self.engine, self.progress = engine, progress

    def unit_finished(self) -> None:
        self.send()  # the unit's last corners
        with self.lock:  # its steps move from the unit's count to the total in one go: never counted twice
            self.done_steps += self.progress.total_steps if self.progress else 0
            self.progress = None

    def stop(self) -> None:
        self.stopped.set()
        self.send()

    def send(self) -> None:
        with self.lock:
            progress, engine = self.progress, self.engine
            steps = self.done_steps + (progress.total_steps if progress else 0)
            new = set(progress.corners) - self.seen if progress else set()
            self.seen |= new
            # The unit adds transitions as it runs; copying its keys is one C call, so none is added halfway.
            seen = self.seen_transitions.setdefault(engine, set())
            fresh = set(progress.transitions) - seen if progress else set()
            seen |= fresh
        busy_s, cpu_s = time.time() - self.start, time.process_time()
        self.queue.put(("beat", self.worker, steps, busy_s, cpu_s, sorted(new), engine, sorted(fresh)))

    def _loop(self) -> None:
        while not self.stopped.wait(BEAT_EVERY_S):
            self.send()


def _work(plan: Plan, worker: int, queue: Any, deadline: float, runners: Mapping[str, UnitRunner]) -> None:
    parent = os.getppid()
    heartbeat = Heartbeat(worker, queue)
    rates: dict[str, float] = {}  # each engine's size per second (its units' examples), from its last unit
    index = 0
    # A worker whose parent died (it is re-parented) stops after its unit rather than fuzzing for nobody.
    while index == 0 or (time.time() < deadline and os.getppid() == parent):
        engine = plan.unit(index, worker, plan.examples).engine
        rate = rates.get(engine) or max(rates.values(), default=0.0)  # a unit of each engine lasts about as long
        examples = last_unit_examples(deadline - time.time(), rate, plan.examples) if index else plan.examples
        unit = plan.unit(index, worker, examples)
        hooks = UnitHooks(
            partial(heartbeat.unit_started, engine),
            lambda path: queue.put(("found", worker, str(path))),
        )
        result = runners[engine](plan, unit, hooks)
        heartbeat.unit_finished()
        queue.put(("unit", worker, asdict(result)))
        rates[engine] = result.examples / max(result.seconds, 1e-9)
        index += 1
    heartbeat.stop()
    queue.put(("done", worker))
