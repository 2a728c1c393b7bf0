"""How a unit refuses: with an assert (upstream's `assert`, the reference's `ContractViolation`), nothing else.

Any other exception out of a unit is a crash, which the loop reports as such. A `Problem` is what a step found:
its failure kind (the names of the README's counterexample kinds, plus `generation` and `crash`) and a message.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")
Problem = tuple[str, str]


def attempt(call: Callable[[], T]) -> tuple[T | None, AssertionError | None]:
    """Run one unit call: its result, or the assert it refused with."""
    try:
        return call(), None
    except AssertionError as refusal:
        return None, refusal
