"""Which requests a decode retraction picks: upstream's keep order (`_get_decode_retraction_order`), held to the
picks a pool reported.

The model judges how many requests a retraction takes and what that frees (`model.retract_decode`); which ones
it takes depends on each request's original prompt length (`origin_input_ids`), which the model does not keep.
The ledger keeps it: a request's prompt at its first admission, which a retraction and a re-admission leave as
it was. The picks must be the tail of the keep order, popped from the end, the aborted one last.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from impl.target import Retracted
from model.retract_decode import PICKS, keep_order, running
from model.state import State
from properties.vocabulary import STATUS_NEW


@dataclass
class OriginLedger:
    """Each request's original prompt length, noted at its first admission."""

    origins: dict[int, int] = field(default_factory=dict)

    def admitted(self, state: State, rid: int, prompt: int) -> None:
        """An accepted admission of `rid` with `prompt` tokens; `state` is the model's before it."""
        if state.rec_status.get(rid) == STATUS_NEW:
            self.origins[rid] = prompt

    def wrong_pick(self, state: State, choice: dict[str, int]) -> str | None:
        """Why the picks in `choice` are not upstream's keep order's tail, or None if they are; `state` is the
        model's before the retraction."""
        batch = running(state)
        origins = {rid: self.origins.get(rid, 0) for rid in batch}
        outputs = {rid: state.rec_C.get(rid) - origins[rid] for rid in batch}
        order = keep_order(batch, outputs, origins)
        count = choice.get("retracted", 0) + choice.get("aborted", 0)
        picks = [choice.get(name) for name in PICKS[:count]]
        expected = list(reversed(order))[: len(picks)]
        if picks == expected:
            return None
        keys = ", ".join(f"{rid}: {outputs[rid]} out, {origins[rid]} prompt" for rid in order)
        return f"picked {picks}, the keep order ({keys}) pops {expected}"


def retracted_choice(result: Retracted) -> dict[str, int]:
    """A pool's decode retraction as the model's choice: the picks in order (the aborted one after the
    retracted), how many it retracted, whether it aborted one."""
    picks = [*result.retracted, *([] if result.aborted is None else [result.aborted])]
    choice = {name: rid for name, rid in zip(PICKS, picks, strict=False)}
    return {**choice, "retracted": len(result.retracted), "aborted": int(result.aborted is not None)}
