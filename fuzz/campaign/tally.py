"""What the parent learns from its workers while a campaign runs: steps (and each worker's over time), corners,
abstract transitions per engine, units, findings, crashes."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fuzz.campaign.findings import DUPLICATE, Group, Signature, add_finding
from fuzz.campaign.plan import ENGINES
from fuzz.campaign.series import Series, Throughput
from fuzz.walker.coverage import Transition
from model.trace import TraceError, load


@dataclass
class Tally:
    """The workers' messages (`fuzz.campaign.worker`), added up."""

    start: float
    steps: dict[int, int] = field(default_factory=dict)
    busy_s: dict[int, float] = field(default_factory=dict)
    cpu_s: dict[int, float] = field(default_factory=dict)  # CPU time: a rate that does not depend on the load
    corners: dict[str, float] = field(default_factory=dict)  # corner -> elapsed seconds when first reached
    coverage: list[tuple[float, int]] = field(default_factory=list)
    engines: tuple[str, ...] = ENGINES
    transitions: dict[str, set[Transition]] = field(default_factory=dict)  # engine -> distinct transitions reached
    union: set[Transition] = field(default_factory=set)
    transitions_over_time: Series = field(default_factory=Series)  # (seconds, one count per engine, the union)
    throughput: dict[int, Throughput] = field(default_factory=dict)
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

    def _beat(
        self,
        worker: int,
        steps: int,
        busy_s: float,
        cpu_s: float,
        new_corners: list[str],
        engine: str,
        new_transitions: list[Transition],
    ) -> None:
        self.steps[worker], self.busy_s[worker], self.cpu_s[worker] = steps, busy_s, cpu_s
        elapsed = time.time() - self.start
        self.throughput.setdefault(worker, Throughput()).beat(elapsed, steps)
        fresh = [c for c in new_corners if c not in self.corners]
        for corner in fresh:
            self.corners[corner] = elapsed
        if fresh:
            self.coverage.append((round(elapsed, 2), len(self.corners)))
        if new_transitions:
            self.reached(elapsed, engine, new_transitions)

    def reached(self, elapsed: float, engine: str, transitions: list[Transition]) -> None:
        """Count transitions `engine` reached (a worker's new ones; another worker may have sent them already)."""
        mine = self.transitions.setdefault(engine, set())
        before = (len(mine), len(self.union))
        mine.update(transitions)
        self.union.update(transitions)
        if (len(mine), len(self.union)) != before:
            counts = [len(self.transitions.get(e, ())) for e in self.engines]
            self.transitions_over_time.add(elapsed, *counts, len(self.union))

    def close(self, workers: int) -> None:
        """At the end: a worker that has not finished and shows no new step since some time stalled until now."""
        elapsed = time.time() - self.start
        for worker in range(workers):
            self.throughput.setdefault(worker, Throughput()).close(elapsed, worker in self.finished)

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
            f"{len(self.union):,} transitions, "
            f"{len(self.units)} units done"
        )
