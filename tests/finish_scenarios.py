"""Finishes found by the result pass's check, for either target (`tests/fuzz/test_finish_kinds.py` on the reference
pool, `tests/upstream/test_finish_kinds_upstream.py` on upstream's own `update_finish_state` and release).

Each scenario builds its state through the lockstep, so every step is judged against the model too; the
assertions here add what the model's counters alone would let slip: how much of the run the tree kept.
"""

from __future__ import annotations

from typing import Any

from fuzz.lockstep import Lockstep
from properties.vocabulary import FINISH_BY, STATUS_DECODE, STATUS_DONE

# A speculative radix tree of page size 1: every token the release keys is one tree slot.
SPEC_TREE = {"device": "cpu", "rows": 4, "tokens": 64, "width": 32, "page_size": 1, "cache": "radix"}
PROMPT = 6
RESERVE = 8


def lockstep(target: str, **extra: Any) -> Lockstep:
    return Lockstep({**SPEC_TREE, "speculative": True, **extra, "target": target, "faults": []})


def ok(lock: Lockstep, op: str, args: dict[str, int]) -> None:
    failure = lock.step(op, args)
    assert failure is None, failure


def decoding(lock: Lockstep, rid: int = 0) -> None:
    """Request `rid` admitted with its whole prompt, then reserving draft slots."""
    ok(lock, "admit", {"req": rid, "prompt": PROMPT, "n": PROMPT, "family": rid})
    ok(lock, "spec_prepare", {"req": rid, "reserve": RESERVE})


def tree_size(lock: Lockstep) -> int:
    return lock.model.state.tree_slots


def trimmed_run_keeps_only_through_the_stop(target: str, by: int) -> None:
    """Five tokens verified, the stop the second: the tree keys the prompt and two tokens, the three past the stop
    are freed with the rest of the reserve, and the pool is whole again."""
    lock = lockstep(target)
    decoding(lock)
    ok(lock, "spec_finish", {"req": 0, "accepted": 5, "stop": 2, "by": by})
    assert lock.model.state.rec_status.get(0) == STATUS_DONE
    assert tree_size(lock) == PROMPT + 2, FINISH_BY[by]
    assert lock.snap.free_slots.numel() + tree_size(lock) == SPEC_TREE["tokens"]


def stop_at_the_run_end_keeps_it_all(target: str, by: int) -> None:
    lock = lockstep(target)
    decoding(lock)
    ok(lock, "spec_finish", {"req": 0, "accepted": 3, "stop": 3, "by": by})
    assert tree_size(lock) == PROMPT + 3, FINISH_BY[by]


def decode_finish_releases_in_its_pass(target: str, by: int) -> None:
    """A plain decode whose token the check stops at: finished and released in that step, the tree keying the
    prompt and that token."""
    lock = lockstep(target, speculative=False)
    ok(lock, "admit", {"req": 0, "prompt": PROMPT, "n": PROMPT, "family": 0})
    ok(lock, "decode", {"req": 0})
    ok(lock, "decode_finish", {"req": 0, "by": by})
    assert lock.model.state.rec_status.get(0) == STATUS_DONE
    assert tree_size(lock) == PROMPT + 2, FINISH_BY[by]


def stop_outside_the_run_is_refused(target: str) -> None:
    """A stop past the accepted run names no token of it: the model forbids it, the pool refuses it unchanged."""
    lock = lockstep(target)
    decoding(lock)
    assert lock.step("spec_finish", {"req": 0, "accepted": 2, "stop": 3, "by": 0}) is None
    assert lock.model.state.rec_status.get(0) != STATUS_DONE


def profiling_gives_everything_back(target: str, cache: str) -> None:
    """PP profiling beside a decoding request: its synthetic requests take one free row in turn and give every slot
    back; the request's own record is untouched."""
    lock = Lockstep({**SPEC_TREE, "cache": cache, "target": target, "faults": []})
    ok(lock, "admit", {"req": 0, "prompt": PROMPT, "n": PROMPT, "family": 0})
    before = lock.snap
    ok(lock, "pp_profile", {"quarter": 2})
    assert lock.snap.free_slots.numel() == before.free_slots.numel()
    assert lock.snap.free_rows == before.free_rows
    assert lock.snap.records[0] == before.records[0]
    assert lock.steps[-1].choice["uses"] >= 1


def readmitted_after_a_trimmed_finish_owns_all_it_commits(target: str, stop: int = 2) -> None:
    """A request re-admitted after a finish at the `stop`-th of five verified tokens (trimmed below 5) starts with
    no stop: its next finish keys all it committed (a stale stop would cap the key below what the record owns)."""
    lock = lockstep(target)
    decoding(lock)
    ok(lock, "spec_finish", {"req": 0, "accepted": 5, "stop": stop, "by": 0})
    ok(lock, "extend", {"req": 0, "n": 4})
    while lock.model.state.rec_status.get(0) != STATUS_DECODE:
        ok(lock, "extend", {"req": 0, "n": 4})
    ok(lock, "decode_finish", {"req": 0, "by": 0})
    assert lock.model.state.rec_status.get(0) == STATUS_DONE
