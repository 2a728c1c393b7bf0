"""The decode retraction (`retract_decode`) on the reference pool: which requests it takes, in upstream's keep
order, as few as make the rest fit and never the last; the last one aborted where even alone it does not fit; and
the lockstep's judgement of a pool that takes too many, too few, the wrong ones, or keeps one that cannot fit."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from fuzz.lockstep import Lockstep
from impl.target import Retracted
from tests.retraction_scenarios import (
    aborts_the_last_that_cannot_fit,
    alone,
    crowded,
    follows_the_keep_order,
    retraction,
    takes_as_few_as_make_the_rest_fit,
    uneven,
)


def test_a_crowded_batch_gives_back_as_few_requests_as_make_the_rest_fit() -> None:
    assert takes_as_few_as_make_the_rest_fit("reference").snap.free_slots.numel() == 8


def test_the_keep_order_takes_fewest_outputs_then_longest_prompt_first() -> None:
    follows_the_keep_order("reference")


@pytest.mark.parametrize("cache", ["chunk", "radix"])
def test_the_last_request_that_cannot_fit_alone_is_aborted(cache: str) -> None:
    assert aborts_the_last_that_cannot_fit("reference", cache).step("drain", {}) is None


def _pool_answers(lock: Lockstep, picks: list[int], aborted: int | None = None) -> None:
    """Make the pool retract `picks` (then abort `aborted`) with its own release, whatever its policy says."""

    def retract_decode() -> Retracted:
        for rid in picks:
            lock.target.retract(rid)
        return Retracted(picks, aborted)

    lock.target.retract_decode = retract_decode  # type: ignore[method-assign]


@pytest.mark.parametrize(
    ("scenario", "picks", "why"),
    [
        (crowded, [5, 4, 3], "does not allow"),  # a third pick past a rest that fits
        (crowded, [5], "does not allow"),  # stopped while the rest does not fit
        (uneven, [2], "broke the retraction order"),  # the batch's last, not the keep order's
        (lambda target: alone(target, "chunk"), [], "does not allow"),  # kept the last one though it cannot fit
    ],
)
def test_a_pool_that_strays_from_the_policy_is_an_illegal_choice(
    scenario: Callable[[str], Lockstep], picks: list[int], why: str
) -> None:
    lock = scenario("reference")
    _pool_answers(lock, picks)
    failure, _ = retraction(lock)
    assert failure is not None and (failure.kind, failure.id) == ("illegal-choice", "retract_decode"), failure
    assert why in failure.message, failure.message
