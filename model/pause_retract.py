"""The retract-mode pause (`Scheduler.pause_generation(mode="retract")`, then `continue_generation`), judged as
one step: what a server does for a weight update.

Every request of the running batch (every decoding request, in ascending id) and then the chunked request (the
one mid-prefill) are retracted in that order (`retract_all`: each the `retract` action's release, no insert,
`reset_for_retract`) and re-queued, to be re-admitted with their outputs as prompt; queued and finished requests
are left as they are. The scheduler has one chunked request at most, so the step is enabled only where at most
one request is mid-prefill. The choice is what the step evicted in all (`evicted`: each retraction's release
evicts for the requests still to be retracted).

Judged by the executable model only (`model.interp.PY`), like the batch.
"""

from __future__ import annotations

from typing import Any

from model.actions import EVICT_PARAMS, Action, judged_action
from model.interp import PY, PyOps
from model.retract_decode import after_evicting, running
from model.state import Sizes, State
from properties.vocabulary import STATUS_PREFILL

PAUSE_RETRACT = "pause_retract"


def pause_order(s: State) -> list[int] | None:
    """The requests the pause retracts, in its order (the running batch, then the chunked request); None where
    more than one request is mid-prefill, which the scheduler never has."""
    chunked = sorted(r for r in s.rec_status if s.rec_status.get(r) == STATUS_PREFILL)
    return None if len(chunked) > 1 else running(s) + chunked


def pause_retract_action(table: dict[str, Action]) -> Action:
    """The retract-mode pause over `table`'s retraction (a fault's variant where one is on)."""
    retract = table["retract"].inner or table["retract"]

    def enabled(o: Any, p: Sizes, s: State, a: dict[str, Any]) -> Any:
        assert isinstance(o, PyOps), "the retract-mode pause is judged by the executable model only"
        order = pause_order(s)
        return bool(order) and all(retract.enabled(o, p, s, _retraction(rid)) for rid in order or ())

    def judged(p: Sizes, s: State, a: dict[str, Any]) -> State | None:
        for rid in pause_order(s) or ():
            s = retract.update(PY, p, s, _retraction(rid))
        return after_evicting(p, s, a["evicted"])

    return judged_action(PAUSE_RETRACT, EVICT_PARAMS, enabled, judged, ("evicted",))


def _retraction(rid: int) -> dict[str, Any]:
    return {"req": rid, "evictable": 0, "evicted": 0}
