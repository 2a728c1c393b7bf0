"""Counterexamples grouped into findings: one per failure kind and id (under the same faults and target), each
distinct shrunk op sequence (a shape) kept once and counted, the shortest the finding's representative."""

from __future__ import annotations

import shlex
from dataclasses import asdict, dataclass, field
from typing import Any

from model.trace import Trace

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


def signature(trace: Trace) -> Signature:
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


def add_finding(groups: dict[Signature, Group], path: str, trace: Trace) -> str:
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
