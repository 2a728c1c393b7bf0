"""`bench.walker_bench`'s accounting: clocks count outermost calls once and put methods back; the split of a
step's time and the bound on the ratio follow from the clocked seconds."""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import pytest

import bench.walker_bench as walker_bench
from bench.walker_bench import Rate, _split_line, method_clock


class _Pool:
    def outer(self) -> None:
        self.inner()

    def inner(self) -> None:
        pass


def test_a_method_clock_counts_a_call_inside_a_clocked_call_once_and_puts_the_methods_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ticks = itertools.count()  # a clock that moves one second each time it is read
    monkeypatch.setattr(walker_bench, "time", SimpleNamespace(perf_counter=lambda: float(next(ticks))))
    original = _Pool.__dict__["outer"], _Pool.__dict__["inner"]
    spent = [0.0]
    with method_clock(_Pool, ["outer", "inner"], spent):
        _Pool().outer()  # read at its start and end only: the inner call is inside it, not clocked again
        _Pool().inner()
    assert spent[0] == 2.0
    assert (_Pool.__dict__["outer"], _Pool.__dict__["inner"]) == original


def test_the_split_line_gives_each_engines_own_and_lockstep_time_and_the_bound() -> None:
    # 1000 steps each: machine 600 us/step (100 pool, 150 lockstep's own, 350 own), walker 300 (100, 150, 50).
    machine = Rate(steps=1000, wall_s=0.6, cpu_s=0.6, pool_s=0.1, lockstep_s=0.25, differential_s=0.03)
    walker = Rate(steps=1000, wall_s=0.3, cpu_s=0.3, pool_s=0.1, lockstep_s=0.25, differential_s=0.06)
    assert round(machine.engine_us) == 350 and round(machine.lockstep_us) == 150
    assert round(walker.engine_us) == 50 and round(walker.lockstep_us) == 150
    line = _split_line("chunk-p1", machine, walker)
    assert "machine's own  350 us, lockstep's  150 us,   5% of its time in the differential" in line
    assert "walker's own   50 us, lockstep's  150 us,  20% in the differential" in line
    assert line.endswith("would be 3.00x")  # (350 + 100) / (50 + 100)
