"""What the parent learns from its workers while a campaign runs: steps, corners, units, findings, crashes."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fuzz.campaign.findings import DUPLICATE, Group, Signature, add_finding
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
