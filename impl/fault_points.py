"""Fault points: a planned failure of one call inside a step, where the real code can fail there.

After FoundationDB's BUGGIFY, but planned rather than random: a step's plan names one point of
`properties.vocabulary.FAULT_POINTS` and which of the step's calls to it fails (`FaultPlan`), so the plan is part
of the step, written into its counterexample file and replayed from it. A point is a public method of a pool
object, wrapped on that object only (the class, and upstream's installed source, are never touched), that fails
as the method itself fails when it runs short:

* `row_alloc`: the row pool's `alloc` answers None (no free row);
* `kv_alloc`: the allocator's `alloc`, `alloc_extend` or `alloc_decode` answers None (no free slots);
* `aux_alloc`: the row pool's `alloc_aux_to_lengths` raises (its aux cache ran short; sglang 0.5.19 on).

Every call to a point is counted whether or not a plan is armed (`reached`), so a run can say which points its
steps reached and which it failed (`fired`). Outside an armed step every wrapper calls straight through.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from properties.vocabulary import FAULT_POINTS

# Each point and the methods that are it; a method an object lacks is no point of that object.
ROW_POINTS = {"row_alloc": ("alloc",), "aux_alloc": ("alloc_aux_to_lengths",)}
KV_POINTS = {"kv_alloc": ("alloc", "alloc_extend", "alloc_decode")}
RAISING = frozenset({"aux_alloc"})  # the points that fail by raising; the others answer None


class InjectedFailure(RuntimeError):
    """What a raising point raises (a RuntimeError, as upstream's aux allocators raise when they run short)."""


@dataclass(frozen=True)
class FaultPlan:
    """Fail call number `call` (counting from 0: the first) to `point` within one step."""

    point: str
    call: int = 0

    def __post_init__(self) -> None:
        if self.point not in FAULT_POINTS:
            raise ValueError(f"unknown fault point {self.point!r} (known: {', '.join(FAULT_POINTS)})")
        if self.call < 0:
            raise ValueError(f"a fault plan's call counts from 0, got {self.call}")


@dataclass
class Shot:
    """What an armed step did with its plan: `fired` once the planned call failed."""

    plan: FaultPlan
    seen: int = 0
    fired: bool = False


@dataclass
class FaultPoints:
    """The points installed on one pool's objects, the plan armed for the current step, and the counts."""

    installed: set[str] = field(default_factory=set)
    reached: Counter[str] = field(default_factory=Counter)
    fired: Counter[str] = field(default_factory=Counter)
    shot: Shot | None = None

    @contextlib.contextmanager
    def armed(self, plan: FaultPlan | None) -> Iterator[Shot | None]:
        """Arm `plan` (None: nothing) for the body; yields the shot, which says whether it fired."""
        if plan is None:
            yield None
            return
        self.shot = Shot(plan)
        try:
            yield self.shot
        finally:
            self.shot = None

    def fails(self, point: str) -> bool:
        """Count a call to `point`; True where the armed plan fails this one."""
        self.reached[point] += 1
        shot = self.shot
        if shot is None or shot.fired or shot.plan.point != point:
            return False
        shot.seen += 1
        if shot.seen <= shot.plan.call:
            return False
        shot.fired = True
        self.fired[point] += 1
        return True


class FaultyMethod:
    """A pool object's method behind a point: the method's own answer, or the point's failure. It holds the bound
    method, so a deep copy of the pool copies it onto the copied object."""

    def __init__(self, points: FaultPoints, point: str, method: Any) -> None:
        self.points, self.point, self.method = points, point, method

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.points.fails(self.point):
            if self.point in RAISING:
                raise InjectedFailure(f"fault point {self.point}: the aux cache ran short")
            return None
        return self.method(*args, **kwargs)


def install(points: FaultPoints, row_pool: Any, allocator: Any) -> FaultPoints:
    """Put `points` between the pool's users and the row pool's and the allocator's methods (on these objects)."""
    for obj, table in ((row_pool, ROW_POINTS), (allocator, KV_POINTS)):
        for point, names in table.items():
            for name in names:
                method = getattr(obj, name, None)
                if callable(method) and not isinstance(method, FaultyMethod):
                    setattr(obj, name, FaultyMethod(points, point, method))
                    points.installed.add(point)
    return points


def plan_of(args: dict[str, int]) -> FaultPlan | None:
    """The plan a step's arguments carry: `fault` (1 + the point's index; 0 or absent: none), `fault_call` (which
    call fails, from 0; absent: the first). Both shrink towards no plan and the first call."""
    code = args.get("fault", 0)
    if not code:
        return None
    return FaultPlan(FAULT_POINTS[code - 1], args.get("fault_call", 0))
