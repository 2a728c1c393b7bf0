"""The benchmark's own claims: the lemmas it drops name real invariants, and the step breakdown accounts for
every part of a step."""

from __future__ import annotations

import re

from bench.__main__ import ROW_LEMMAS
from bench.lockstep_profile import PARTS, breakdown
from fuzz.profiles import Profile
from model.theorems import SYMBOLIC

TINY = Profile("bench-test", max_examples=5, steps_per_case=10, derandomize=True, keep_database=False)


def test_the_dropped_row_lemmas_are_proved_invariants() -> None:
    assert {inv.id for inv in SYMBOLIC} >= ROW_LEMMAS
    assert "row-exclusive" in ROW_LEMMAS


def test_the_breakdown_times_every_part_and_the_parts_fit_in_the_step() -> None:
    lines: list[str] = []
    breakdown("chunk-p1", TINY, out=lines.append)
    head = re.search(r"where a step's (\d+) us go \((\d+) steps", lines[0])
    assert head is not None and int(head.group(2)) > 0
    shares = {line[:34].strip(): float(line.rsplit(None, 1)[-1].rstrip("%")) for line in lines[1:]}
    assert {label.strip() for label, _, _ in PARTS} | {"pool calls", "hypothesis and rules"} == set(shares)
    assert shares["lockstep"] > 0 and shares["pool calls"] > 0
    assert abs(shares["lockstep"] + shares["hypothesis and rules"] - 100.0) < 0.5
