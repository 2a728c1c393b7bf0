"""Which requests and arguments the walker draws each op with: the machine's rules as data, and a rule derived
from the action table for any op the table does not name.

An op is drawn on requests in given statuses (`STATUS_NEW` being a fresh id), as `fuzz.machine`'s rules draw
them, whether or not the model enables the call (a call that no longer fits is a refusal the pool owes). Where
the pool is not bound to refuse a forbidden call (the hand-written release outside PR #37167's preconditions,
the offload release of a request that protects a prefix), the rule keeps only the calls the model enables. An
op the table does not name is drawn only where the model enables it, or, for a negative step
(`Action.negative`), only where it forbids it: that is what a negative step is. Arguments come from the action's
parameters and their sorts; the choices and what the lockstep reads off the pool are left out.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from model.actions import OBSERVED, Action
from model.state import Sizes, State
from properties.vocabulary import (
    FINISH_BY,
    LIVE_STATUSES,
    STATUS_DECODE,
    STATUS_DONE,
    STATUS_NEW,
    STATUS_PREFILL,
    STATUS_WAITING,
)

ANY, LEGAL, FORBIDDEN = "any", "legal", "forbidden"
FRESH = frozenset({STATUS_NEW})  # a request the model does not know: a fresh id
NO_REQUEST = frozenset[int]()  # the op takes no request
PREFILL = frozenset({STATUS_PREFILL})
DECODING = frozenset({STATUS_DECODE})
RELEASED = frozenset({STATUS_DONE})
READMITTABLE = frozenset({STATUS_DONE, STATUS_WAITING})
WAITING = frozenset({STATUS_WAITING})
EVERY_STATUS = frozenset({STATUS_NEW, STATUS_PREFILL, STATUS_DECODE, STATUS_DONE, STATUS_WAITING})
FAMILIES = 2  # two token streams, as the machine draws: enough for shared and unshared prefixes
SMALL_COUNT = 8  # the most draft tokens a speculative step reserves or accepts (the machine's bound)


@dataclass(frozen=True)
class Pick:
    """Requests an op is drawn on: those in `statuses`; `keep` says which calls are made (any, only those the
    model enables, only those it forbids)."""

    statuses: frozenset[int]
    keep: str = ANY


def _any_pool(p: Sizes) -> bool:
    return True


@dataclass(frozen=True)
class Rule:
    """How one op is drawn: its picks (an op without a request has one pick of `NO_REQUEST`); `pool`, whether
    the pool's shape lets it be drawn at all; `ready`, whether the state does now (None: whenever a pick can);
    `schedules`, whether it is the scheduler's (not drawn while a result pass's free group is open); `companion`,
    an op a swarm keeps on while this one is on (what ends what this op begins)."""

    op: str
    picks: tuple[Pick, ...]
    pool: Callable[[Sizes], bool] = _any_pool
    ready: Callable[[State], bool] | None = None
    schedules: bool = False
    companion: str | None = None

    def known_statuses(self) -> frozenset[int]:
        """The statuses of the known requests its picks draw on."""
        return frozenset().union(*(pick.statuses for pick in self.picks)) - FRESH

    def always_open(self) -> bool:
        """Whether some pick needs no known request (it takes none, or a fresh id)."""
        return any(not pick.statuses or STATUS_NEW in pick.statuses for pick in self.picks)


LIVE = frozenset(LIVE_STATUSES)


def _round_ready(s: State) -> bool:
    """A prefill round has its chunked request (one at most) or a waiting request to run."""
    statuses = list(s.rec_status.items.values())
    return statuses.count(STATUS_PREFILL) <= 1 and bool({STATUS_PREFILL, STATUS_WAITING} & set(statuses))


_SPECULATIVE: Callable[[Sizes], bool] = lambda p: p.speculative  # noqa: E731
# The prefill round's adder budgets with what the tree could evict: it runs where the tree evicts on demand.
_ROUND_POOL: Callable[[Sizes], bool] = lambda p: not p.radix or p.on_demand  # noqa: E731
# The machine's rules (`fuzz.machine`), one entry per op.
RULES: dict[str, Rule] = {
    rule.op: rule
    for rule in (
        Rule("admit", (Pick(FRESH),), schedules=True),
        Rule("batch", (Pick(FRESH),), schedules=True),  # its entries are drawn by their own ops' rules
        Rule("pd_prealloc", (Pick(FRESH),), schedules=True),
        Rule("extend", (Pick(PREFILL), Pick(READMITTABLE)), schedules=True),
        Rule("decode", (Pick(DECODING),), schedules=True),
        Rule("spec_prepare", (Pick(DECODING),), _SPECULATIVE, schedules=True),
        Rule("spec_commit", (Pick(DECODING),), _SPECULATIVE),
        Rule("finish", (Pick(LIVE),)),
        Rule("decode_finish", (Pick(DECODING),), schedules=True),
        Rule("spec_finish", (Pick(DECODING),), _SPECULATIVE),
        Rule("pp_release", (Pick(LIVE),)),
        # PP profiling runs at server start: drawn on a pool no request is running on (each walk begins so). Its
        # 128 requests on 0.5.18 make it the costliest step there is.
        Rule(
            "pp_profile",
            (Pick(NO_REQUEST),),
            ready=lambda s: not LIVE & set(s.rec_status.items.values()),
            schedules=True,
        ),
        # Priority preemption walks a batch that still lists requests that finished this round (#18694).
        Rule("retract", (Pick(LIVE), Pick(RELEASED))),
        Rule("abort", (Pick(LIVE), Pick(WAITING))),
        # The decode retraction takes the whole running batch: drawn while some request decodes.
        Rule("retract_decode", (Pick(NO_REQUEST),), ready=lambda s: STATUS_DECODE in s.rec_status.items.values()),
        # A weight update's retract-mode pause: every running request and the chunked one retracted.
        Rule("pause_retract", (Pick(NO_REQUEST),), ready=lambda s: bool(LIVE & set(s.rec_status.items.values()))),
        # The scheduler's decode round over the whole running batch, retracting only where it does not fit.
        Rule("decode_round", (Pick(NO_REQUEST),), ready=lambda s: STATUS_DECODE in s.rec_status.items.values()),
        # A request arrives and waits; the scheduler's prefill round picks from the queue after its chunked request.
        Rule("queue", (Pick(FRESH),)),
        Rule("prefill_round", (Pick(NO_REQUEST, LEGAL),), _ROUND_POOL, ready=_round_ready, schedules=True),
        # The hand-written release is only ever called under PR #37167's preconditions.
        Rule("pp_release_manual", (Pick(LIVE, LEGAL),)),
        # PD-decode requests protect no prefix; a released record may carry the -1 sentinel.
        Rule("offload_release", (Pick(DECODING, LEGAL), Pick(RELEASED))),
        Rule("differential", (Pick(LIVE),)),
        Rule("evict", (Pick(NO_REQUEST),), lambda p: p.radix),
        # A result pass's free group: a begin inside an open one is drawn too (the contract forbids it: it would
        # drop the pending frees); an end only with one open, as the scheduler calls it.
        Rule("group_begin", (Pick(NO_REQUEST),), companion="group_end"),
        Rule("group_end", (Pick(NO_REQUEST),), ready=lambda s: s.group_open == 1),
        # Flushing is for an idle pool, and drawn on a busy one too: there it is a refusal (a flush that takes a
        # mid-prefill or decoding request for idle wipes its row and slots under it).
        Rule("flush", (Pick(NO_REQUEST),), schedules=True),
        Rule("reuse_released", (Pick(RELEASED),), schedules=True),
        Rule("release_again", (Pick(RELEASED),)),
        Rule("free_row", (Pick(RELEASED),)),
    )
}


def rule_for(op: str, action: Action | None) -> Rule:
    """The table's rule for `op`, or one derived from its action: drawn where the model enables it (forbids
    it, for a negative step), on any request or a fresh one."""
    if op in RULES:
        return RULES[op]
    assert action is not None, f"no rule and no action for {op!r}"
    statuses = EVERY_STATUS if any(sort == "req" for _, sort in action.params) else NO_REQUEST
    return Rule(op, (Pick(statuses, FORBIDDEN if action.negative else LEGAL),))


@dataclass(frozen=True)
class Param:
    """One argument a step draws: its name, its sort (`model.actions.Action.params`) and its values, smallest
    first (what the shrinker tries first)."""

    name: str
    sort: str
    values: Sequence[int]
    tokens: bool = False  # a length in tokens: drawn small more often than not, as a swarm says


def drawn_params(action: Action, sizes: Sizes, kinds: Sequence[int]) -> tuple[Param, ...]:
    """The arguments of `action` a step draws (not its choices, not what the lockstep observes), each with its
    values: a length is 1 to the row width, a row one of the pool's; a family, a kind, a sentinel and a draft
    count have their own."""
    values: dict[str, Sequence[int]] = {
        "family": range(FAMILIES),
        "kind": tuple(sorted(kinds)),
        "sentinel": range(2),
        "reserve": range(1, SMALL_COUNT + 1),
        "accepted": range(1, SMALL_COUNT + 1),
        "stop": range(1, SMALL_COUNT + 1),
        "by": range(len(FINISH_BY)),
        "quarter": range(1, SMALL_COUNT + 1),
    }
    skipped = set(action.choice) | OBSERVED
    return tuple(
        Param(name, sort, values[name]) if name in values else _by_sort(name, sort, sizes)
        for name, sort in action.params
        if name not in skipped and sort != "req"
    )


def _by_sort(name: str, sort: str, sizes: Sizes) -> Param:
    if sort == "row":
        return Param(name, sort, range(1, sizes.rows + 1))
    return Param(name, sort, range(1, sizes.width + 1), tokens=True)


def ids_by_status(state: State) -> dict[int, list[int]]:
    """The known request ids in each status, oldest first (the model's records; a fresh id is drawn apart)."""
    groups: dict[int, list[int]] = {}
    for rid, status in sorted(state.rec_status.items.items()):
        if status != STATUS_NEW:
            groups.setdefault(status, []).append(rid)
    return groups


def open_now(pick: Pick, groups: dict[int, list[int]]) -> bool:
    """Whether `pick` has a request to draw now: it takes none, takes a fresh id, or some known one is in its
    statuses (`groups` lists only the statuses some request is in)."""
    return not pick.statuses or STATUS_NEW in pick.statuses or not pick.statuses.isdisjoint(groups)


def candidates(pick: Pick, groups: dict[int, list[int]]) -> list[int]:
    """The known ids `pick` draws on, oldest first."""
    found = [rid for status in pick.statuses if status in groups for rid in groups[status]]
    return sorted(found)
