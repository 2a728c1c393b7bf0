"""Finishes found by the result pass's check on the reference pool: a verified run trimmed at its stop keys only
what the client saw, a stop at the run's end keys it all, a finishing decode releases in its own step."""

from __future__ import annotations

import pytest

from properties.vocabulary import FINISH_BY
from tests.finish_scenarios import (
    decode_finish_releases_in_its_pass,
    profiling_gives_everything_back,
    readmitted_after_a_trimmed_finish_owns_all_it_commits,
    stop_at_the_run_end_keeps_it_all,
    stop_outside_the_run_is_refused,
    trimmed_run_keeps_only_through_the_stop,
)

KINDS = range(len(FINISH_BY))


@pytest.mark.parametrize("by", KINDS)
def test_a_trimmed_run_keeps_only_through_the_stop(by: int) -> None:
    trimmed_run_keeps_only_through_the_stop("reference", by)


@pytest.mark.parametrize("by", KINDS)
def test_a_stop_at_the_run_end_keeps_it_all(by: int) -> None:
    stop_at_the_run_end_keeps_it_all("reference", by)


@pytest.mark.parametrize("by", KINDS)
def test_a_finishing_decode_releases_in_its_pass(by: int) -> None:
    decode_finish_releases_in_its_pass("reference", by)


def test_a_stop_outside_the_run_is_refused() -> None:
    stop_outside_the_run_is_refused("reference")


def test_an_unknown_finish_kind_is_refused() -> None:
    from impl.engine import ReferencePool
    from impl.target import PoolConfig, Refused

    pool = ReferencePool(PoolConfig(rows=2, tokens=16, width=8))
    pool.admit(0, 4, prompt_len=4)
    with pytest.raises(Refused, match="finish kind 4"):
        pool.decode_finish(0, len(FINISH_BY))
    assert pool.snapshot().records[0].committed_len == 4


@pytest.mark.parametrize("cache", ["chunk", "radix"])
def test_pp_profiling_gives_everything_back(cache: str) -> None:
    profiling_gives_everything_back("reference", cache)


def test_pp_profiling_that_does_not_fit_is_refused() -> None:
    from impl.engine import ReferencePool
    from impl.target import PoolConfig, Refused

    pool = ReferencePool(PoolConfig(rows=2, tokens=8, width=32))
    with pytest.raises(Refused, match="needs a row and 10 slots"):
        pool.pp_profile(2)
    with pytest.raises(Refused, match="does not fit a row"):
        pool.pp_profile(7)


def test_a_request_readmitted_after_a_trimmed_finish_owns_all_it_commits() -> None:
    readmitted_after_a_trimmed_finish_owns_all_it_commits("reference")
