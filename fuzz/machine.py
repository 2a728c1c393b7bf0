"""The lockstep Hypothesis state machine: rules draw lifecycle steps, `Lockstep` runs and judges them.

Requests are referred to by id; a rule draws among the ids the model knows in the right status (live or
released), so shrinking keeps every step meaningful. Negative rules make calls the contract forbids on
released records and expect the pool to refuse them unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, precondition, rule

from fuzz.lockstep import Lockstep, StepFailed
from properties.snapshot import LIVE_STATUSES, STATUS_DONE, STATUS_PREFILL

PREFILL = frozenset({STATUS_PREFILL})
RELEASED = frozenset({STATUS_DONE})


@dataclass
class Recorder:
    """What the runner needs after Hypothesis returns: the last run's lockstep, and the step count."""

    config: dict[str, Any]
    last: Lockstep | None = None
    total_steps: int = 0
    cases: int = 0
    ops: dict[str, int] = field(default_factory=dict)


def build_machine(recorder: Recorder) -> type[RuleBasedStateMachine]:
    """A state machine class bound to `recorder` (Hypothesis instantiates it once per test case)."""
    width = recorder.config["width"]
    lengths = st.integers(min_value=1, max_value=width)

    class LifecycleMachine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.lock = Lockstep(recorder.config)
            self.next_rid = 0
            recorder.last = self.lock
            recorder.cases += 1

        def _do(self, op: str, args: dict[str, int]) -> None:
            recorder.total_steps += 1
            recorder.ops[op] = recorder.ops.get(op, 0) + 1
            failure = self.lock.step(op, args)
            if failure is not None:
                raise StepFailed(failure)

        def _ids(self, statuses: frozenset[int]) -> list[int]:
            s = self.lock.model.state
            return [r for r in self.lock.model.known_requests() if s.rec_status.get(r) in statuses]

        def has_live(self) -> bool:
            return bool(self._ids(LIVE_STATUSES))

        def has_prefill(self) -> bool:
            return bool(self._ids(PREFILL))

        def has_released(self) -> bool:
            return bool(self._ids(RELEASED))

        def _pick(self, data: st.DataObject, statuses: frozenset[int]) -> int:
            return data.draw(st.sampled_from(self._ids(statuses)), label="req")

        @rule(n=lengths)
        def admit(self, n: int) -> None:
            self.next_rid += 1
            self._do("admit", {"req": self.next_rid - 1, "n": n})

        @precondition(has_prefill)
        @rule(data=st.data(), n=lengths)
        def extend(self, data: st.DataObject, n: int) -> None:
            self._do("extend", {"req": self._pick(data, PREFILL), "n": n})

        @precondition(has_released)
        @rule(data=st.data(), n=lengths)
        def readmit(self, data: st.DataObject, n: int) -> None:
            self._do("extend", {"req": self._pick(data, RELEASED), "n": n})

        @precondition(has_live)
        @rule(data=st.data())
        def decode(self, data: st.DataObject) -> None:
            self._do("decode", {"req": self._pick(data, LIVE_STATUSES)})

        @precondition(has_live)
        @rule(data=st.data(), path=st.sampled_from(["finish", "pp_release", "pp_release_manual"]))
        def release(self, data: st.DataObject, path: str) -> None:
            self._do(path, {"req": self._pick(data, LIVE_STATUSES)})

        @precondition(has_released)
        @rule(data=st.data(), n=lengths)
        def reuse_released(self, data: st.DataObject, n: int) -> None:
            rid = self._pick(data, RELEASED)
            self._do("reuse_released", {"req": rid, "row": self.lock.last_row[rid], "n": n})

        @precondition(has_released)
        @rule(data=st.data(), op=st.sampled_from(["release_again", "free_row"]))
        def release_released(self, data: st.DataObject, op: str) -> None:
            self._do(op, {"req": self._pick(data, RELEASED)})

    return LifecycleMachine
