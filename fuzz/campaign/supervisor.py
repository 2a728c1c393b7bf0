"""A whole campaign, start to report: print the plan, re-check `--out`, start the workers and watch them until each
has finished or crashed (progress every 10 s), then write the report and print a line per worker (its throughput
and stalls) and the verdict."""

from __future__ import annotations

import multiprocessing
import queue as queue_module
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TextIO

import torch

from fuzz.campaign.plan import Plan, header
from fuzz.campaign.report import write_report
from fuzz.campaign.report_data import report_data, summary, worker_lines
from fuzz.campaign.resume import resume
from fuzz.campaign.tally import Tally
from fuzz.campaign.worker import worker_main
from model.exits import save_traceback
from model.trace import one_line

PROGRESS_EVERY_S = 10.0
GRACE_S = 300.0  # after the budget, units in flight get this long to finish and shrink before they are cut

Worker = Callable[[Plan, int, Any, float], None]


@dataclass
class CampaignResult:
    """The exit code and the report's data (also in `report.json`)."""

    exit_code: int
    report: dict[str, Any]


def run_campaign(
    plan: Plan, out: TextIO | None = None, err: TextIO | None = None, worker: Worker = worker_main
) -> CampaignResult:
    """Run the campaign, write its report in `plan.out`; exit code 0 nothing found, 1 found, 70 the campaign
    failed (a worker crashed, or re-checking `--out` crashed kvlife). `out` and `err` default to the streams at the
    time of the call (so that a redirection applies)."""

    def say(line: str) -> None:
        print(line, file=out or sys.stdout, flush=True)

    torch.set_num_threads(1)  # the parent only supervises; its workers each use one core
    for line in header(plan):
        say(line)
    plan.out.mkdir(parents=True, exist_ok=True)
    tally = Tally(time.time(), engines=plan.engines)
    rechecked = resume(plan.out, tally.groups, say)
    crashed = supervise(plan, tally, say, worker)
    tally.close(plan.workers)
    report = report_data(plan, tally, rechecked, crashed)
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
    for line in worker_lines(report):
        say(line)
    say(summary(report, plan.out))
    return CampaignResult(report["exit_code"], report)


def supervise(plan: Plan, tally: Tally, say: Callable[[str], None], worker: Worker) -> dict[int, str]:
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
