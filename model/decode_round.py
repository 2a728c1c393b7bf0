"""The scheduler's decode round (`Scheduler.update_running_batch`, then the decode batch's result pass), judged as
one step.

The running batch is every decoding request, in ascending id. The round checks whether the next decode fits
(`check_decode_mem`); only where it does not, it retracts (`ScheduleBatch.retract_decode`, judged exactly as the
`retract_decode` step is: `model.retract_decode.judge_retraction`), re-queues what it retracted and aborts the
last request that still does not fit. Then every request left decodes one token (`prepare_for_decode`: the
decode action's own guard and update, one after the other), and the result pass appends the sampled tokens.

The choices are the retraction's (`r0`.., `retracted`, `aborted`) and what the whole round evicted
(`evicted`); `retracted == aborted == 0` says the check passed and nothing was retracted. Whether the round fits
is known only as bounds (`model.retract_decode.surely_fits` / `surely_short`): a retraction where the round
surely fits, or none where it surely does not, is an illegal choice.

Judged by the executable model only (`model.interp.PY`), like the batch.
"""

from __future__ import annotations

from typing import Any

from model.actions import Action, _releasable, judged_action
from model.interp import PY, PyOps
from model.retract_decode import (
    MAX_RUNNING,
    PICKS,
    RETRACT_DECODE_CHOICE,
    RETRACT_DECODE_PARAMS,
    after_evicting,
    judge_retraction,
    running,
    surely_fits,
    surely_short,
)
from model.state import Sizes, State

DECODE_ROUND = "decode_round"
# Room enough that the decode's own guard reads only its status, row width and lengths.
_UNBOUNDED = 1 << 40


def decode_round_action(table: dict[str, Action]) -> Action:
    """The decode round over `table`'s retraction and decode (a fault's variant where one is on)."""
    retract = table["retract"].inner or table["retract"]
    decode = table["decode"].inner or table["decode"]

    def enabled(o: Any, p: Sizes, s: State, a: dict[str, Any]) -> Any:
        assert isinstance(o, PyOps), "the decode round is judged by the executable model only"
        batch = running(s)
        if not 1 <= len(batch) <= MAX_RUNNING:
            return False
        roomy = s.but(n_free_slots=_UNBOUNDED)
        return all(_releasable(o, p, s, r) and decode.enabled(o, p, roomy, {"req": r}) for r in batch)

    def judged(p: Sizes, s: State, a: dict[str, Any]) -> State | None:
        batch = running(s)
        if (a.get("retracted", -1), a.get("aborted", -1)) == (0, 0):
            if surely_short(p, s, batch):
                return None  # the check cannot have passed: upstream retracts
            after, rest = after_evicting(p, s, a["evicted"]), batch
        else:
            if surely_fits(p, s, a, batch):
                return None  # retracted from a round that fits
            taken = {a.get(name) for name in PICKS[: a.get("retracted", 0) + a.get("aborted", 0)]}
            after, rest = judge_retraction(retract, p, s, a), [r for r in batch if r not in taken]
        for rid in rest:
            if after is None or not decode.enabled(PY, p, after, {"req": rid}):
                return None
            after = decode.update(PY, p, after, {"req": rid})
        return after

    optional = frozenset(PICKS) | {"retracted", "aborted"}
    return judged_action(DECODE_ROUND, RETRACT_DECODE_PARAMS, enabled, judged, RETRACT_DECODE_CHOICE, optional)
