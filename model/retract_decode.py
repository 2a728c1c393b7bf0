"""The decode retraction (`ScheduleBatch.retract_decode`): the scheduler's pick of which running requests give
their KV back when the next decode step does not fit, judged as one step.

The running batch is every decoding request, in ascending id. Upstream pops requests off the end of its keep
order while the rest do not fit the next decode (`check_decode_mem`: a page per request whose committed length
is page-aligned, against the free slots plus what eviction can free), always retracting at least one and keeping
at least one; the last request that still does not fit is aborted (its retraction's release, then it is dropped).
Each retraction is the `retract` action's own release (no insert, `reset_for_retract`), applied in the pool's
order. The pool's choices are the ids in that order (`r0`..), how many were retracted (`retracted`), whether the
one after them was aborted (`aborted`) and what the step evicted in all (`evicted`).

What each pick could evict is not observable between the picks, so whether the rest fit is known only as
bounds: they surely fit within the free slots plus what was evictable before the step (`evictable`, observed),
and surely do not beyond the free slots plus the whole tree. A retraction past a surely-fitting rest, a stop
before a surely-not-fitting one, or a kept last request that surely cannot fit is an illegal choice; between the
bounds either is allowed. Which requests the policy picks (`keep_order`) is checked by the harness, which knows
each request's original prompt length.

The need is the non-speculative one on every pool: the harness's batches carry no speculative algorithm, so
upstream's speculative estimate (`_new_tokens_required_next_decode_spec_v2`) is not what runs.

Judged by the executable model only (`model.interp.PY`), like the batch.
"""

from __future__ import annotations

from typing import Any

from model.actions import Action, _abort_update, _after_eviction, _releasable, judged_action, page_floor
from model.interp import PY, PyOps
from model.state import Sizes, State
from properties.vocabulary import STATUS_DECODE

RETRACT_DECODE = "retract_decode"
# The most decoding requests one retraction step takes (a trace names each pick in its own field).
MAX_RUNNING = 16
PICKS = tuple(f"r{i}" for i in range(MAX_RUNNING))
RETRACT_DECODE_CHOICE = (*PICKS, "retracted", "aborted", "evicted")
RETRACT_DECODE_PARAMS = (
    *((name, "req") for name in PICKS),
    ("retracted", "len"),
    ("aborted", "len"),
    ("evictable", "len"),
    ("evicted", "len"),
)


def running(s: State) -> list[int]:
    """The running batch: every decoding request, in ascending id."""
    return sorted(r for r in s.rec_status if s.rec_status.get(r) == STATUS_DECODE)


def decode_need(p: Sizes, s: State, reqs: list[int]) -> int:
    """`new_tokens_required_next_decode`: a page for each request whose committed length is page-aligned."""
    return p.page_size * sum(1 for r in reqs if s.rec_C.get(r) % p.page_size == 0)


def keep_order(reqs: list[int], outputs: dict[int, int], origins: dict[int, int]) -> list[int]:
    """`_get_decode_retraction_order`: most preferred to keep first, by (outputs, -original prompt) descending,
    ties in batch order; the retraction pops from the end."""
    return sorted(reqs, key=lambda r: (outputs[r], -origins[r]), reverse=True)


def retract_decode_action(table: dict[str, Action]) -> Action:
    """The decode retraction over `table`'s retraction (a fault's variant where one is on)."""
    retract = table["retract"].inner or table["retract"]

    def enabled(o: Any, p: Sizes, s: State, a: dict[str, Any]) -> Any:
        assert isinstance(o, PyOps), "the decode retraction is judged by the executable model only"
        batch = running(s)
        fits = 1 <= len(batch) <= MAX_RUNNING  # in a free group its frees wait there
        return fits and all(_releasable(o, p, s, r) for r in batch)

    def judged(p: Sizes, s: State, a: dict[str, Any]) -> State | None:
        return judge_retraction(retract, p, s, a)

    optional = frozenset(PICKS) | {"retracted", "aborted"}
    return judged_action(RETRACT_DECODE, RETRACT_DECODE_PARAMS, enabled, judged, RETRACT_DECODE_CHOICE, optional)


def judge_retraction(retract: Action, p: Sizes, s: State, a: dict[str, Any]) -> State | None:
    """The state after the picks of a retraction over `retract`'s release (what the step evicted in all freed at
    the end), or None where the picks break the rule."""
    batch, k, aborted = running(s), a.get("retracted", -1), a.get("aborted", -1)
    if not 0 <= k <= len(batch) or aborted not in (0, 1):
        return None
    picks: list[int] = [a.get(name, -1) for name in PICKS[: k + aborted]]  # a missing pick is in no batch
    if len(picks) > len(batch) or len(set(picks)) != len(picks) or set(picks) - set(batch):
        return None
    if len(batch) > 1 and not 1 <= k <= len(batch) - 1:
        return None
    if len(batch) == 1 and k != 0:
        return None
    rest = list(batch)
    for i, rid in enumerate(picks[:k]):
        if i > 0 and surely_fits(p, s, a, rest):
            return None  # popped past a rest that fits
        s = retract.update(PY, p, s, {"req": rid, "evictable": 0, "evicted": 0})
        rest.remove(rid)
    if aborted and (len(rest) != 1 or surely_fits(p, s, a, rest)):
        return None  # the last one aborted though it may fit
    if not aborted and surely_short(p, s, rest):
        return None  # stopped (or kept the last one) where the rest cannot fit
    if aborted:
        last = {"req": picks[k], "evictable": 0, "evicted": 0, "dup": 0}
        s = _abort_update(PY, p, retract.update(PY, p, s, last), last)
    return after_evicting(p, s, a["evicted"])


def surely_fits(p: Sizes, s: State, a: dict[str, Any], rest: list[int]) -> bool:
    """The rest's next decode fits the free slots plus what was evictable before the step."""
    return decode_need(p, s, rest) <= s.n_free_slots + _evictable_room(p, s, a["evictable"])


def surely_short(p: Sizes, s: State, rest: list[int]) -> bool:
    """The rest's next decode fits nowhere: not in the free slots even with the whole tree evicted."""
    return decode_need(p, s, rest) > s.n_free_slots + _evictable_room(p, s, s.tree_slots)


def _evictable_room(p: Sizes, s: State, evictable: int) -> int:
    """What evicting `evictable` tree slots adds to the free ones: nothing while a free group is open (the
    allocator holds what the tree gives back until the group ends), nothing without on-demand eviction."""
    return evictable if p.on_demand and s.group_open != 1 else 0


def after_evicting(p: Sizes, s: State, got: int) -> State | None:
    """What the step's retractions and checks evicted: whole pages of the tree (nothing without on-demand
    eviction)."""
    if not p.on_demand:
        return s if got == 0 else None
    if not 0 <= got <= s.tree_slots or page_floor(PY, p, got) != got:
        return None
    return _after_eviction(PY, p, s, {"evicted": got})
