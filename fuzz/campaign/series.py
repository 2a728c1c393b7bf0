"""Time series a campaign keeps while it runs, bounded whatever its length: a worker's cumulative steps (steps/s per
interval, and the stalls: intervals with no new step) and the distinct transitions reached, per engine."""

from __future__ import annotations

from dataclasses import dataclass, field

MAX_POINTS = 120  # per series: report.json stays small for a week's campaign on 256 workers
# A stall is longer than every step-free phase a healthy worker has: a walker unit's shrink (at most 20 s: its
# replays are not campaign steps) and the step deletion after Hypothesis's shrink.
STALL_S = 45.0
MAX_STALLS = 20  # kept per worker; the rest are counted


@dataclass
class Series:
    """Points `(seconds, value, ...)` of cumulative counts, at most `limit` + 1: when full, every other point goes and
    the spacing doubles, so a long campaign keeps as many points as a short one; the last point is the latest."""

    limit: int = MAX_POINTS
    spacing_s: float = 1.0
    points: list[tuple[float, ...]] = field(default_factory=list)

    def add(self, seconds: float, *values: float) -> None:
        point = (round(seconds, 2), *values)
        points = self.points
        if len(points) >= 2 and points[-1][0] - points[-2][0] < self.spacing_s:
            points[-1] = point  # the last point was too close to the one before: the latest replaces it
        else:
            points.append(point)
        if len(points) > self.limit:
            self.points = [*points[:-1:2], points[-1]]
            self.spacing_s *= 2


@dataclass
class Throughput:
    """One worker's cumulative steps as its heartbeats told them: a bounded series, and each interval longer than
    `stall_s` in which no beat showed a new step (from the last beat that did to the next that did)."""

    stall_s: float = STALL_S
    series: Series = field(default_factory=Series)
    steps: int = 0
    moved_s: float = 0.0  # when the steps last grew (the campaign's start until they first do)
    last_s: float = 0.0  # the last beat
    stalls: list[tuple[float, float]] = field(default_factory=list)
    stall_count: int = 0

    def beat(self, seconds: float, steps: int) -> None:
        """A heartbeat `seconds` into the campaign, with the worker's cumulative `steps`."""
        self.series.add(seconds, steps)
        self.last_s = seconds
        if steps > self.steps:
            self._stalled(self.moved_s, seconds)
            self.steps, self.moved_s = steps, seconds

    def close(self, end_s: float, finished: bool) -> None:
        """At the campaign's end: a worker still without a new step since `moved_s` stalled until its last beat
        (it finished) or until `end_s` (it did not)."""
        self._stalled(self.moved_s, self.last_s if finished else end_s)
        self.moved_s = max(self.moved_s, self.last_s if finished else end_s)

    def rates(self) -> list[tuple[float, int, float]]:
        """`(seconds, steps, steps/s over the interval ending there)` for each point of the series."""
        found, before = [], (0.0, 0.0)
        for seconds, steps in self.series.points:
            span = seconds - before[0]
            found.append((seconds, int(steps), round((steps - before[1]) / span, 1) if span > 0 else 0.0))
            before = (seconds, steps)
        return found

    def _stalled(self, start_s: float, end_s: float) -> None:
        if end_s - start_s <= self.stall_s:
            return
        self.stall_count += 1
        if len(self.stalls) < MAX_STALLS:
            self.stalls.append((round(start_s, 2), round(end_s, 2)))
