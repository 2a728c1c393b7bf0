"""The page arithmetic of `properties.vocabulary` means the same on the three kinds of value it runs on: Python
ints (where CrossHair checks its contracts), integer tensors (the allocation kernels, the page check) and Z3
integer terms (the model's transition relation)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import z3

from properties.vocabulary import ceil_align, ceil_div, num_new_pages, owned_slots, page_floor

VALUES = list(range(-9, 21))
PAGE_SIZES = (1, 2, 4, 16)
ROUNDINGS: dict[str, Callable[[int, int], int]] = {"ceil_align": ceil_align, "page_floor": page_floor}


@pytest.mark.parametrize("page_size", PAGE_SIZES)
@pytest.mark.parametrize("name", sorted(ROUNDINGS))
def test_a_rounding_agrees_on_ints_tensors_and_z3_terms(name: str, page_size: int) -> None:
    rounding = ROUNDINGS[name]
    on_ints = [rounding(x, page_size) for x in VALUES]
    assert rounding(torch.tensor(VALUES), page_size).tolist() == on_ints
    x = z3.Int("x")
    term = rounding(x, page_size)
    on_terms = [z3.simplify(z3.substitute(term, (x, z3.IntVal(v)))).as_long() for v in VALUES]
    assert on_terms == on_ints


@pytest.mark.parametrize("page_size", PAGE_SIZES)
def test_the_page_counts_agree_on_ints_and_tensors(page_size: int) -> None:
    pairs = [(p, s) for p in range(21) for s in range(p, 21)]
    prefix, seq = torch.tensor([p for p, _ in pairs]), torch.tensor([s for _, s in pairs])
    assert num_new_pages(prefix, seq, page_size).tolist() == [num_new_pages(p, s, page_size) for p, s in pairs]
    assert ceil_div(seq, page_size).tolist() == [ceil_div(s, page_size) for _, s in pairs]
    aligned = page_floor(prefix, page_size)
    assert owned_slots(aligned, seq, page_size).tolist() == [
        owned_slots(page_floor(p, page_size), s, page_size) for p, s in pairs
    ]


def test_rounding_by_one_page_returns_the_term_itself() -> None:
    """The model's formulas stay as small as before at page size 1: no `%` term is built."""
    x = z3.Int("x")
    assert ceil_align(x, 1) is x and page_floor(x, 1) is x
