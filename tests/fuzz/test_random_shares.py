"""`verify-upstream --random N` splits N traces over the pool shapes; fewer traces than shapes still draws N (a
share of 0 once asked Hypothesis for no example, and kvlife failed)."""

from __future__ import annotations

import pytest

from fuzz.upstream_verify import random_traces, shares


@pytest.mark.parametrize(("total", "parts"), [(4, 8), (40, 8), (300, 7), (0, 3), (5, 1), (3, 0)])
def test_the_shares_add_up_and_differ_by_at_most_one(total: int, parts: int) -> None:
    split = shares(total, parts)
    assert len(split) == parts
    assert sum(split) == (total if parts else 0)
    assert not split or max(split) - min(split) <= 1


def test_a_share_of_nothing_draws_no_trace() -> None:
    assert random_traces({"target": "sglang"}, 0) == []
