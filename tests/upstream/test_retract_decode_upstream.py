"""The decode retraction on the upstream target runs upstream's own `ScheduleBatch.retract_decode` on the merged
running batch: its picks, its abort of the last request and its releases match the model on every release, and
an in-process change to its keep order (for the test only) is a finding, which a retraction re-enacted in the
adapter would not show."""

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
    aborts_the_last_that_cannot_fit,
    follows_the_keep_order,
    retraction,
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
