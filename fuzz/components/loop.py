"""The component lockstep loop: apply each event to the real unit and to its model, then compare them.

A run stops at the first step that finds something (a `Failure`); otherwise it returns None. The loop is the
same for every unit; what an event means and what is observed belongs to the unit's kind (`RowRun`,
`AllocRun`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from fuzz.components.alloc_loop import AllocRun
from fuzz.components.contract import AllocContract, RowContract
from fuzz.components.events import Event
from fuzz.components.row_loop import RowRun


@dataclass(frozen=True)
class Failure:
    """The first thing a run found: at which event, of which kind, and what."""

    step: int
    kind: str
    message: str


def run_events(
    unit: Any, contract: RowContract | AllocContract, events: Sequence[Event], coverage: Counter[str]
) -> Failure | None:
    """Step `unit` and a fresh model through `events`, observing after each; the first failure, or None."""
    if isinstance(contract, RowContract):
        return _run(RowRun(unit, contract, coverage), events, coverage)
    return _run(AllocRun(unit, contract, coverage), events, coverage)


def _run(run: RowRun | AllocRun, events: Sequence[Event], coverage: Counter[str]) -> Failure | None:
    for step, event in enumerate(events):
        try:
            problem = run.apply(event) or run.observe()
        except Exception as error:  # a unit that raises anything but an assert has crashed
            problem = ("crash", f"{event}: {type(error).__name__}: {error}")
        if problem is not None:
            return Failure(step, *problem)
        coverage["steps"] += 1
    return None
