"""The decode retraction on the upstream target runs upstream's own `ScheduleBatch.retract_decode` on the merged
running batch, and the decode round upstream's `Scheduler.update_running_batch` (its check, the retraction, the
re-queue, the abort) then the result pass: their picks, their abort of the last request and their releases match
the model on every release, and an in-process change to the keep order or to the round's caller code (for the
test only) is a finding, which a retraction re-enacted in the adapter would not show."""

from __future__ import annotations

import importlib.util

import pytest

if importlib.util.find_spec("sglang") is None:
    pytest.skip(
        "needs upstream sglang, which the main venv deliberately lacks; run `make sglang-test`",
        allow_module_level=True,
    )

from fuzz.drain import DRAIN, drain_args
from impl.upstream.dialects import supported_version
from tests.retraction_scenarios import (
    CROWDED,
    aborts_the_last_that_cannot_fit,
    crowded,
    decode_round,
    finished_then_round,
    follows_the_keep_order,
    lockstep,
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
from tests.upstream.known import excluded_on

# A release whose flush is a known finding's trigger (clear-zeroes-generations) drains without it, as its runs do.
DRAINED = drain_args(excluded_on(supported_version()))


def test_upstream_gives_back_as_few_requests_as_make_the_rest_fit() -> None:
    assert takes_as_few_as_make_the_rest_fit("sglang").step(DRAIN, DRAINED) is None


def test_upstream_takes_fewest_outputs_then_longest_prompt_first() -> None:
    follows_the_keep_order("sglang")


@pytest.mark.parametrize("cache", ["chunk", "radix"])
def test_upstream_aborts_the_last_request_that_cannot_fit_alone(cache: str) -> None:
    assert aborts_the_last_that_cannot_fit("sglang", cache).step(DRAIN, DRAINED) is None


def test_a_changed_keep_order_upstream_is_a_finding(monkeypatch: pytest.MonkeyPatch) -> None:
    from sglang.srt.managers.schedule_batch import ScheduleBatch

    order = ScheduleBatch._get_decode_retraction_order
    monkeypatch.setattr(
        ScheduleBatch, "_get_decode_retraction_order", staticmethod(lambda *a: list(reversed(order(*a))))
    )
    failure, _ = retraction(uneven("sglang"))
    assert failure is not None and (failure.kind, failure.id) == ("illegal-choice", "retract_decode"), failure
    assert "broke the retraction order" in failure.message, failure.message


def test_upstream_round_that_fits_decodes_every_request() -> None:
    assert round_that_fits_decodes_everyone("sglang").step(DRAIN, DRAINED) is None


def test_upstream_round_that_does_not_fit_retracts_then_decodes_the_rest() -> None:
    assert round_that_does_not_fit_retracts_then_decodes("sglang").step(DRAIN, DRAINED) is None


def test_upstream_round_inside_an_open_free_group_finds_no_room_in_its_own_frees() -> None:
    assert round_in_an_open_group_retracts_all_but_one("sglang").step(DRAIN, DRAINED) is None


@pytest.mark.parametrize("cache", ["chunk", "radix"])
def test_upstream_round_aborts_the_last_request_that_cannot_fit_alone(cache: str) -> None:
    assert round_aborts_the_last_that_cannot_fit("sglang", cache).step(DRAIN, DRAINED) is None


def test_a_round_that_drops_its_retracted_requests_upstream_is_a_finding(monkeypatch: pytest.MonkeyPatch) -> None:
    """`_add_request_to_queue` made to drop what it is given (for the test only): the retracted requests are lost,
    never re-queued, which the model's waiting requests show."""
    from sglang.srt.managers.scheduler import Scheduler

    monkeypatch.setattr(Scheduler, "_add_request_to_queue", lambda self, req, is_retracted=False: None)
    failure, _ = decode_round(crowded("sglang"))
    assert failure is not None and (failure.kind, failure.id) == ("mismatch", "abstraction"), failure


def test_upstream_pause_retracts_the_running_batch_and_the_chunked_request() -> None:
    assert paused_mid_prefill("sglang").step(DRAIN, DRAINED) is None


def test_upstream_pause_with_two_requests_mid_prefill_is_refused() -> None:
    pause_with_two_mid_prefill_is_refused("sglang")


def test_a_pause_that_forgets_the_chunked_request_upstream_is_a_finding(monkeypatch: pytest.MonkeyPatch) -> None:
    """`retract_all` made to skip the last request it is given, the chunked one (for the test only): upstream's
    pause then drops the chunked request with its row, which the model's re-queued request shows."""
    from sglang.srt.managers import scheduler

    retract_all = scheduler.retract_all

    def skipping(*, reqs, **kwargs):  # type: ignore[no-untyped-def]
        retract_all(reqs=reqs[:-1], **kwargs)

    monkeypatch.setattr(scheduler, "retract_all", skipping)
    lock = lockstep("sglang", CROWDED)
    for rid, (prompt, n) in enumerate([(4, 4), (8, 4)]):
        assert lock.step("admit", {"req": rid, "prompt": prompt, "n": n, "family": rid}) is None
    failure = lock.step("pause_retract", {})
    assert failure is not None and failure.kind in ("mismatch", "invariant"), failure


def test_upstream_round_filters_the_request_that_finished_since_the_last_round() -> None:
    assert finished_then_round("sglang").step(DRAIN, DRAINED) is None


def test_a_round_without_its_filter_upstream_is_a_finding(monkeypatch: pytest.MonkeyPatch) -> None:
    """`filter_batch` made to keep everything when the decode round calls it (for the test only): the request that
    finished last round, still in the running batch, is decoded again, which upstream's own asserts or the
    model's finished request show."""
    import sys

    from sglang.srt.managers.schedule_batch import ScheduleBatch

    real = ScheduleBatch.filter_batch

    def filter_batch(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        if sys._getframe(1).f_code.co_name != "update_running_batch":
            real(self, *args, **kwargs)

    monkeypatch.setattr(ScheduleBatch, "filter_batch", filter_batch)
    lock = roomy("sglang")
    assert lock.step("decode_finish", {"req": 0, "by": 0}) is None
    failure, _ = decode_round(lock)
    assert failure is not None, "a round that decodes a finished request passed"
