"""Decode retractions on a full pool, for either target (`tests/fuzz/test_retract_decode.py` on the reference pool,
`tests/upstream/test_retract_decode_upstream.py` on upstream's `ScheduleBatch.retract_decode`).

Each scenario builds its state through the lockstep, so every step before the retraction is judged too.
"""

from __future__ import annotations

from typing import Any

from fuzz.lockstep import Lockstep
from model.trace import Failure
from properties.vocabulary import STATUS_DONE, STATUS_WAITING

# Eight rows on 24 slots: six requests of four prompt tokens fill every slot.
CROWDED = {"device": "cpu", "rows": 8, "tokens": 24, "width": 12, "page_size": 1, "cache": "chunk"}
# One request of eight tokens fills every slot of a pool of eight.
ALONE = {"device": "cpu", "rows": 4, "tokens": 8, "width": 16, "page_size": 1}


def lockstep(target: str, shape: dict[str, Any], **extra: Any) -> Lockstep:
    return Lockstep({**shape, **extra, "target": target, "faults": []})


def admitted(lock: Lockstep, prompts: list[int]) -> None:
    """Request i admitted with its whole prompt (`prompts[i]` tokens, family i): each then decodes."""
    for rid, prompt in enumerate(prompts):
        failure = lock.step("admit", {"req": rid, "prompt": prompt, "n": prompt, "family": rid})
        assert failure is None, failure


def decoded(lock: Lockstep, rid: int, steps: int) -> None:
    for _ in range(steps):
        failure = lock.step("decode", {"req": rid})
        assert failure is None, failure


def crowded(target: str) -> Lockstep:
    """Six decoding requests holding all 24 slots, none with outputs: the keep order is the batch order."""
    lock = lockstep(target, CROWDED)
    admitted(lock, [4] * 6)
    assert lock.snap.free_slots.numel() == 0
    return lock


def uneven(target: str) -> Lockstep:
    """Three decoding requests on a full pool of 14: request 0 has three outputs, 1 and 2 one each, and 1 the
    longest prompt (4 tokens, 2 has 2): the keep order is 0, 2, 1, so 1 goes first, not the batch's last."""
    lock = lockstep(target, {**CROWDED, "rows": 4, "tokens": 14})
    admitted(lock, [3, 4, 2])
    decoded(lock, 0, 3)
    decoded(lock, 2, 1)
    decoded(lock, 1, 1)
    assert lock.snap.free_slots.numel() == 0
    return lock


def alone(target: str, cache: str) -> Lockstep:
    """One decoding request holding every slot: even alone it cannot take the next decode's slot."""
    lock = lockstep(target, ALONE, cache=cache, evict_on_demand=cache == "radix")
    admitted(lock, [8])
    return lock


def retraction(lock: Lockstep) -> tuple[Failure | None, dict[str, int]]:
    """The decode retraction's failure (None if it passed) and what the pool chose."""
    failure = lock.step("retract_decode", {})
    return failure, lock.steps[-1].choice


# -- what both targets must do in each ---------------------------------------------------------------------------


def takes_as_few_as_make_the_rest_fit(target: str) -> Lockstep:
    """The crowded batch gives back its last two requests (the rest then fit); the lockstep after it."""
    lock = crowded(target)
    failure, choice = retraction(lock)
    assert failure is None, failure
    assert choice == {"r0": 5, "r1": 4, "retracted": 2, "aborted": 0}
    assert [lock.model.state.rec_status.get(r) for r in (4, 5)] == [STATUS_WAITING] * 2
    return lock


def follows_the_keep_order(target: str) -> None:
    """The uneven batch gives back the request with the fewest outputs and the longest prompt."""
    failure, choice = retraction(uneven(target))
    assert failure is None, failure
    assert choice == {"r0": 1, "retracted": 1, "aborted": 0}


def aborts_the_last_that_cannot_fit(target: str, cache: str, op: str = "retract_decode") -> Lockstep:
    """The request alone on a full pool is aborted, not kept, by the decode retraction `op` (or the decode round,
    which then decodes nothing); the lockstep after it."""
    lock = alone(target, cache)
    failure = lock.step(op, {})
    choice = lock.steps[-1].choice
    assert failure is None, failure
    assert (choice["r0"], choice["retracted"], choice["aborted"]) == (0, 0, 1)
    assert lock.model.state.rec_status.get(0) == STATUS_DONE
    return lock


# -- the decode round (`decode_round`: `update_running_batch`, then the result pass) ------------------------------


def decode_round(lock: Lockstep) -> tuple[Failure | None, dict[str, int]]:
    """The decode round's failure (None if it passed) and what the pool chose."""
    failure = lock.step("decode_round", {})
    return failure, lock.steps[-1].choice


def roomy(target: str) -> Lockstep:
    """Four decoding requests of four tokens on 24 slots: eight free, the next decode fits."""
    lock = lockstep(target, CROWDED)
    admitted(lock, [4] * 4)
    return lock


def round_that_fits_decodes_everyone(target: str) -> Lockstep:
    """Nothing retracted; every request decodes one token."""
    lock = roomy(target)
    failure, choice = decode_round(lock)
    assert failure is None, failure
    assert (choice["retracted"], choice["aborted"]) == (0, 0), choice
    assert [lock.model.state.rec_C.get(r) for r in range(4)] == [5] * 4
    assert lock.snap.free_slots.numel() == 4
    return lock


def round_that_does_not_fit_retracts_then_decodes(target: str) -> Lockstep:
    """The crowded batch gives back its last two requests, then the four left decode one token each."""
    lock = crowded(target)
    failure, choice = decode_round(lock)
    assert failure is None, failure
    assert choice == {"r0": 5, "r1": 4, "retracted": 2, "aborted": 0}
    assert [lock.model.state.rec_status.get(r) for r in (4, 5)] == [STATUS_WAITING] * 2
    assert [lock.model.state.rec_C.get(r) for r in range(4)] == [5] * 4
    assert lock.snap.free_slots.numel() == 4
    return lock


def round_in_an_open_group_retracts_all_but_one(target: str) -> Lockstep:
    """Inside an open free group the retractions' frees wait for its end, so no retraction makes room: the round
    retracts all but one and aborts that last one too."""
    lock = crowded(target)
    assert lock.step("group_begin", {}) is None
    failure, choice = decode_round(lock)
    assert failure is None, failure
    assert (choice["retracted"], choice["aborted"]) == (5, 1), choice
    assert lock.step("group_end", {}) is None
    assert lock.snap.free_slots.numel() == 24
    return lock


def round_aborts_the_last_that_cannot_fit(target: str, cache: str) -> Lockstep:
    """The request alone on a full pool is aborted by the round, which then decodes nothing."""
    return aborts_the_last_that_cannot_fit(target, cache, "decode_round")


# -- the retract-mode pause (`pause_retract`: `pause_generation(mode="retract")`, then `continue_generation`) --------


def paused_mid_prefill(target: str) -> Lockstep:
    """Two decoding requests and a third mid-prefill (4 of its 8 tokens in): the pause retracts all three and
    re-queues them, and every slot is free again (nothing was inserted)."""
    lock = lockstep(target, CROWDED)
    admitted(lock, [4, 4])
    assert lock.step("admit", {"req": 2, "prompt": 8, "n": 4, "family": 2}) is None
    assert lock.step("pause_retract", {}) is None
    assert [lock.model.state.rec_status.get(r) for r in range(3)] == [STATUS_WAITING] * 3
    assert lock.snap.free_slots.numel() == 24
    return lock


def pause_with_two_mid_prefill_is_refused(target: str) -> Lockstep:
    """Two requests mid-prefill is a state the scheduler never has (one chunked request): the pause is refused and
    changes nothing."""
    lock = lockstep(target, CROWDED)
    for rid in (0, 1):
        assert lock.step("admit", {"req": rid, "prompt": 8, "n": 4, "family": rid}) is None
    assert lock.step("pause_retract", {}) is None
    assert lock.corners == ["pause_retract: forbidden call refused"], lock.corners
    return lock


def finished_then_round(target: str) -> Lockstep:
    """Request 0 finishes by a stop token in its decode's result pass; the next round (whose filter drops it from
    the running batch on the upstream target) decodes request 1 only."""
    lock = roomy(target)
    assert lock.step("decode_finish", {"req": 0, "by": 0}) is None
    assert lock.model.state.rec_status.get(0) == STATUS_DONE
    failure, choice = decode_round(lock)
    assert failure is None, failure
    assert (choice["retracted"], choice["aborted"]) == (0, 0), choice
    assert [lock.model.state.rec_C.get(r) for r in range(1, 4)] == [5] * 3
    return lock
