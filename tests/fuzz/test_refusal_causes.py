"""A refusal's verdict and coverage corners are read from its cause (`impl.target.Cause`), never from its words: a
message reworded, or one that happens to say "out of memory", changes nothing."""

from __future__ import annotations

import pytest

from fuzz.lockstep import Lockstep, refusal_corners
from impl.target import Cause, Refused


@pytest.mark.parametrize(
    ("cause", "corner"),
    [
        (Cause.NO_ROW, "pool: out of rows"),
        (Cause.NO_SLOTS, "pool: out of slots"),
        (Cause.ALLOC_ROWS, "allocation path: out of rows (admit)"),
        (Cause.ALLOC_SLOTS, "allocation path: out of slots (admit)"),
    ],
)
def test_the_corner_is_the_causes(cause: Cause, corner: str) -> None:
    assert refusal_corners("admit", True, cause, {}) == ["admit: refused", corner]


def test_words_alone_reach_no_corner() -> None:
    assert refusal_corners("admit", True, Cause.GUARD, {}) == ["admit: refused"]


def test_the_budgets_refusals_carry_their_cause() -> None:
    lock = Lockstep({"target": "reference", "device": "cpu", "rows": 1, "tokens": 8, "width": 8, "faults": []})
    assert lock.step("admit", {"req": 0, "n": 4, "prompt": 4, "family": 0}) is None
    with pytest.raises(Refused) as refusal:
        lock.target.admit(1, 2, prompt_len=2)
    assert refusal.value.cause is Cause.NO_ROW
    with pytest.raises(Refused) as refusal:
        lock.target.extend(0, 1)
    assert refusal.value.cause is Cause.GUARD  # a complete prompt extends no further: the glue's own check


def _tripped(cause: Cause) -> str | None:
    """The failure kind of a forbidden retraction (of a finished request, which the scheduler's status filter keeps
    from the pool) that the pool refuses with `cause`."""
    lock = Lockstep({"target": "reference", "device": "cpu", "rows": 2, "tokens": 16, "width": 8, "faults": []})
    assert lock.step("admit", {"req": 0, "n": 4, "prompt": 4, "family": 0}) is None
    assert lock.step("finish", {"req": 0}) is None

    def refuse(rid: int) -> None:
        raise Refused("contract assert: reworded" if cause is Cause.GUARD else "any words", cause)

    lock.target.retract = refuse  # type: ignore[method-assign]
    failure = lock.step("retract", {"req": 0})
    return None if failure is None else failure.kind


def test_an_assert_tripped_is_the_contract_assert_cause_whatever_the_words() -> None:
    assert _tripped(Cause.CONTRACT_ASSERT) == "assert-tripped"
    assert _tripped(Cause.GUARD) is None
