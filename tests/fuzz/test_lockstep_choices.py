"""The lockstep's judgement of what the pool chose: a choice the contract does not allow is a finding
(`illegal-choice`) that names what the pool chose, on pools that evict on demand (whose allocations also choose what
they evicted) and on those that do not."""

from __future__ import annotations

from typing import Any

import pytest

from fuzz.lockstep import Lockstep
from fuzz.profiles import POOLS


@pytest.mark.parametrize("pool", ["chunk-p1", "radix-p1", "radix-p4"])
def test_a_row_already_held_is_an_illegal_choice(pool: str) -> None:
    lock = Lockstep({**POOLS[pool], "faults": []})
    assert lock.step("admit", {"req": 0, "prompt": 3, "n": 3, "family": 0}) is None
    held = lock.snap.records[0].row
    admit = lock.target.admit

    def hands_out_a_held_row(rid: int, extend_len: int, **kwargs: Any) -> int:
        admit(rid, extend_len, **kwargs)
        return held

    lock.target.admit = hands_out_a_held_row  # type: ignore[method-assign]
    failure = lock.step("admit", {"req": 1, "prompt": 3, "n": 3, "family": 1})
    assert failure is not None and (failure.kind, failure.id) == ("illegal-choice", "admit"), failure
    assert failure.message.startswith(f"the pool chose row={held}, dup="), failure.message
    assert ("evicted=" in failure.message) == bool(POOLS[pool].get("evict_on_demand")), failure.message
