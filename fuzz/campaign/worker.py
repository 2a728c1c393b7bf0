"""A campaign's worker process: units of one engine until the deadline, and a heartbeat to the parent every second.

Messages to the parent, on one queue: `("beat", w, steps, busy_s, cpu_s, new_corners)`, `("found", w, path)`,
`("unit", w, result)`, `("done", w)`, and `("error", w, traceback)` before a worker dies of an exception.
"""

from __future__ import annotations

import os
import threading
import time
import traceback
from dataclasses import asdict
from typing import Any

import torch

from fuzz.campaign.plan import Plan, last_unit_examples
from fuzz.campaign.unit import Progress, UnitHooks, UnitRunner, bound_shrinking, run_unit

BEAT_EVERY_S = 1.0


def worker_main(plan: Plan, worker: int, queue: Any, deadline: float, runner: UnitRunner = run_unit) -> None:
    """A worker process: units until the wall-clock `deadline` (at least one), with a heartbeat every second."""
    try:
        torch.set_num_threads(1)
        bound_shrinking()
        _work(plan, worker, queue, deadline, runner)
    except BaseException:
        queue.put(("error", worker, traceback.format_exc()))
        raise


class Heartbeat:
    """A worker's running totals, sent to the parent every second from a thread: a unit can last minutes."""

    def __init__(self, worker: int, queue: Any) -> None:
        self.worker, self.queue, self.start = worker, queue, time.time()
        self.progress: Progress | None = None
        self.done_steps = 0
        self.seen: set[str] = set()
        self.lock, self.stopped = threading.Lock(), threading.Event()
        threading.Thread(target=self._loop, daemon=True).start()

    def unit_started(self, progress: Progress) -> None:
        with self.lock:
            self.progress = progress

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
            progress = self.progress
            steps = self.done_steps + (progress.total_steps if progress else 0)
            new = set(progress.corners) - self.seen if progress else set()
            self.seen |= new
        self.queue.put(("beat", self.worker, steps, time.time() - self.start, time.process_time(), sorted(new)))

    def _loop(self) -> None:
        while not self.stopped.wait(BEAT_EVERY_S):
            self.send()


def _work(plan: Plan, worker: int, queue: Any, deadline: float, runner: UnitRunner) -> None:
    parent = os.getppid()
    heartbeat = Heartbeat(worker, queue)
    hooks = UnitHooks(heartbeat.unit_started, lambda path: queue.put(("found", worker, str(path))))
    index, examples = 0, plan.examples
    # A worker whose parent died (it is re-parented) stops after its unit rather than fuzzing for nobody.
    while index == 0 or (time.time() < deadline and os.getppid() == parent):
        result = runner(plan, plan.unit(index, worker, examples), hooks)
        heartbeat.unit_finished()
        queue.put(("unit", worker, asdict(result)))
        index += 1
        examples = last_unit_examples(deadline - time.time(), result.cases / max(result.seconds, 1e-9), plan.examples)
    heartbeat.stop()
    queue.put(("done", worker))
