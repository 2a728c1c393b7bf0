"""The decode retraction (`retract_decode`) on the reference pool: which requests it takes, in upstream's keep
order, as few as make the rest fit and never the last; the last one aborted where even alone it does not fit; and
the lockstep's judgement of a pool that takes too many, too few, the wrong ones, or keeps one that cannot fit."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from fuzz.lockstep import Lockstep
from impl.target import Retracted
from tests.retraction_scenarios import (
    CROWDED,
    aborts_the_last_that_cannot_fit,
    alone,
    crowded,
    decode_round,
    finished_then_round,
    follows_the_keep_order,
    pause_with_two_mid_prefill_is_refused,
    paused_mid_prefill,
    retraction,
    roomy,
    round_aborts_the_last_that_cannot_fit,
    round_in_an_open_group_retracts_all_but_one,
    round_that_does_not_fit_retracts_then_decodes,
    round_that_fits_decodes_everyone,
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


# -- the decode round ------------------------------------------------------------------------------------------


def test_a_round_that_fits_decodes_every_request_and_retracts_none() -> None:
    assert round_that_fits_decodes_everyone("reference").step("drain", {}) is None


def test_a_round_that_does_not_fit_retracts_as_the_retraction_does_then_decodes_the_rest() -> None:
    assert round_that_does_not_fit_retracts_then_decodes("reference").step("drain", {}) is None


def test_a_round_inside_an_open_free_group_finds_no_room_in_its_own_frees() -> None:
    assert round_in_an_open_group_retracts_all_but_one("reference").step("drain", {}) is None


@pytest.mark.parametrize("cache", ["chunk", "radix"])
def test_a_round_aborts_the_last_request_that_cannot_fit_alone(cache: str) -> None:
    assert round_aborts_the_last_that_cannot_fit("reference", cache).step("drain", {}) is None


def _round_answers(lock: Lockstep, picks: list[int]) -> None:
    """Make the pool's round retract `picks` with its own release, then decode the rest, whatever it should do."""

    def decode_round() -> Retracted:
        for rid in picks:
            lock.target.retract(rid)
        for rid in sorted(r for r, req in lock.target.reqs.items() if req.status.name == "DECODING"):
            lock.target.decode(rid)
        return Retracted(picks, None)

    lock.target.decode_round = decode_round  # type: ignore[method-assign]


@pytest.mark.parametrize(
    ("scenario", "picks"),
    [
        (roomy, [3]),  # retracted from a round that fits
        (crowded, [5, 4, 3]),  # a third pick past a rest that fits
    ],
)
def test_a_round_that_strays_from_the_memory_check_is_an_illegal_choice(
    scenario: Callable[[str], Lockstep], picks: list[int]
) -> None:
    lock = scenario("reference")
    _round_answers(lock, picks)
    failure, _ = decode_round(lock)
    assert failure is not None and (failure.kind, failure.id) == ("illegal-choice", "decode_round"), failure


# -- the retract-mode pause -----------------------------------------------------------------------------------


def test_a_pause_retracts_the_running_batch_and_the_chunked_request_and_requeues_them() -> None:
    lock = paused_mid_prefill("reference")
    assert lock.step("drain", {}) is None


def test_a_pause_with_two_requests_mid_prefill_is_refused() -> None:
    pause_with_two_mid_prefill_is_refused("reference")


def test_a_pause_that_leaves_the_chunked_request_holding_its_row_is_a_finding() -> None:
    """A pool whose pause retracts only the decoding requests (the chunked one forgotten, for the test only)."""
    lock = Lockstep({**CROWDED, "target": "reference", "faults": []})
    for rid, (prompt, n) in enumerate([(4, 4), (8, 4)]):
        assert lock.step("admit", {"req": rid, "prompt": prompt, "n": n, "family": rid}) is None
    lock.target.pause_retract = lambda: lock.target.retract(0)  # type: ignore[method-assign]
    failure = lock.step("pause_retract", {})
    assert failure is not None and failure.kind in ("mismatch", "invariant"), failure


def test_a_round_after_a_finish_decodes_only_the_requests_still_running() -> None:
    assert finished_then_round("reference").step("drain", {}) is None
