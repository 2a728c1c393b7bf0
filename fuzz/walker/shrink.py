"""Shrinking a walker's failure without Hypothesis: step deletion, then argument minimisation, each candidate
replayed on a fresh pool (`fuzz.replay.replay`) and kept only if it fails with the same kind and id.

The passes, repeated until none makes progress or the time is spent: delete runs of steps (halves, quarters,
... single steps, as delta debugging does); fold a chunk into the request's prefill step before it (an extend of
`n` tokens deleted, its `n` added to the earlier admit or extend's, as one longer chunk); give requests the
earliest ids (in order of first use); drop batch entries, and turn a batch of one into its op; lower each argument
to the smallest value that still fails (its least value, half of it, one less). Every kept candidate is the
replay's own steps, with the pool's choices and what the lockstep read off the pool, so the result is a trace
`fuzz replay` reproduces as it is.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from fuzz.replay import replay
from fuzz.targets import model_sizes
from model.actions import OBSERVED
from model.concrete import Model
from model.trace import Failure, Step, Trace
from properties.vocabulary import BATCH_OPS

SHRINK_S = 20.0  # as the campaign's shrink: past it the best trace so far is kept
Steps = list[Step]


@dataclass
class Shrunk:
    """The smallest failing trace found, its failure, and how many replays it took."""

    steps: Steps
    failure: Failure
    replays: int


class Shrinker:
    """Shrinks one failure on one config; `same` keeps only candidates that fail with the failure's kind and id."""

    def __init__(self, config: dict[str, Any], failure: Failure, budget_s: float = SHRINK_S) -> None:
        self.config, self.target = config, (failure.kind, failure.id)
        self.deadline = time.perf_counter() + budget_s
        actions = Model(model_sizes(config)).actions
        # The least value of each argument, and which arguments name a request (renumbered together).
        self.requests = {name for a in actions.values() for name, sort in a.params if sort == "req"} | {"req"}
        self.least = {name: _least(sort) for a in actions.values() for name, sort in a.params}
        self.least.update(family=0, kind=0, sentinel=0)
        self.replays = 0

    def shrink(self, steps: Steps, failure: Failure) -> Shrunk:
        best = Shrunk(steps[: failure.step + 1], failure, 0)
        progress = True
        while progress and not self._late():
            progress = False
            for attempt in (self._delete, self._fold, self._renumber, self._unbatch, self._lower):
                found = attempt(best)
                if found is not None:
                    best, progress = found, True
        best.replays = self.replays
        return best

    def _late(self) -> bool:
        return time.perf_counter() > self.deadline

    def _try(self, steps: Steps) -> Shrunk | None:
        """The candidate's replay, if it fails the same way (cut at its failing step)."""
        self.replays += 1
        found = replay(Trace(self.config, None, steps))
        failure = found.failure
        if failure is None or (failure.kind, failure.id) != self.target:
            return None
        return Shrunk(found.steps[: failure.step + 1], failure, 0)

    def _delete(self, best: Shrunk) -> Shrunk | None:
        """Delete runs of steps before the failing one: halves first, then quarters, ... then single steps."""
        improved = None
        size = max(len(best.steps) // 2, 1)
        while size >= 1 and not self._late():
            start = len(best.steps) - 1 - size  # the failing step is last and stays
            while start >= 0 and not self._late():
                found = self._try(best.steps[:start] + best.steps[start + size :])
                if found is not None:
                    best = improved = found
                start = min(start - size, len(best.steps) - 1 - size)
            size //= 2
        return improved

    def _fold(self, best: Shrunk) -> Shrunk | None:
        """Fold each extend into its request's prefill step before it: one longer chunk instead of two."""
        improved, index = None, len(best.steps) - 2  # the failing step is last and stays
        while index > 0 and not self._late():
            candidate = _folded(best.steps, index)
            found = self._try(candidate) if candidate is not None else None
            if found is not None:
                best = improved = found
            index = min(index - 1, len(best.steps) - 2)
        return improved

    def _renumber(self, best: Shrunk) -> Shrunk | None:
        """The same steps with requests numbered 0, 1, 2, ... in order of first use."""
        names: dict[int, int] = {}
        renamed = []
        for step in best.steps:
            args = dict(step.args)
            for key, value in step.args.items():
                if _base(key) in self.requests:
                    args[key] = names.setdefault(value, len(names))
            renamed.append(Step(step.op, args))
        if [s.args for s in renamed] == [s.args for s in best.steps]:
            return None
        return self._try(renamed)

    def _unbatch(self, best: Shrunk) -> Shrunk | None:
        """Drop one entry of a batch at a time; a batch of one becomes its op."""
        improved, index = None, 0
        while index < len(best.steps) and not self._late():
            for candidate in _fewer_entries(best.steps, index):
                found = self._try(candidate)
                if found is not None:
                    best = improved = found
                    break
            else:
                index += 1
        return improved

    def _lower(self, best: Shrunk) -> Shrunk | None:
        """Lower each drawn argument of each step to the smallest of its least value, half, one less that still
        fails the same way."""
        improved, index = None, 0
        while index < len(best.steps) and not self._late():
            for key in list(best.steps[index].args):
                for value in self._smaller(key, best.steps[index].args.get(key, 0)):
                    steps = best.steps
                    found = self._try([*steps[:index], _with(steps[index], key, value), *steps[index + 1 :]])
                    if found is not None:
                        best = improved = found
                        break
                if index >= len(best.steps):
                    break
            index += 1
        return improved

    def _smaller(self, key: str, value: int) -> list[int]:
        base = _base(key)
        if base in OBSERVED or base in self.requests or key == "size" or _is_slot_op(key):
            return []  # observed afresh on replay; renumbered; or shapes a batch (`_unbatch`)
        least = self.least.get(base, 0)
        return sorted({v for v in (least, (least + value) // 2, value - 1) if least <= v < value})


def _least(sort: str) -> int:
    return 0 if sort == "req" else 1


def _base(key: str) -> str:
    """An argument's name without a batch slot's suffix (`req2` is slot 2's `req`)."""
    return key.rstrip("0123456789") or key


def _is_slot_op(key: str) -> bool:
    return key.startswith("op") and key[2:].isdigit()


def _with(step: Step, key: str, value: int) -> Step:
    return Step(step.op, {**step.args, key: value})


def _folded(steps: Steps, index: int) -> Steps | None:
    """Step `index`, an extend, deleted and its `n` added to the last admit or extend of the same request before
    it; None where step `index` is no extend or nothing before it prefilled its request."""
    step = steps[index]
    if step.op != "extend":
        return None
    rid = step.args.get("req")
    for earlier in range(index - 1, -1, -1):
        before = steps[earlier]
        if before.op in ("admit", "extend") and before.args.get("req") == rid:
            longer = _with(before, "n", before.args.get("n", 0) + step.args.get("n", 0))
            return [*steps[:earlier], longer, *steps[earlier + 1 : index], *steps[index + 1 :]]
    return None


def _fewer_entries(steps: Steps, index: int) -> Iterator[Steps]:
    """Step `index`, if a batch, with one entry dropped; a batch of one as its op."""
    step = steps[index]
    if step.op != "batch":
        return
    size = step.args.get("size", 0)
    for drop in range(size if size > 1 else 0):
        smaller = _batch_of(step.args, [slot for slot in range(size) if slot != drop])
        yield [*steps[:index], smaller, *steps[index + 1 :]]
    if size == 1:
        yield [*steps[:index], _entry_step(step.args, 0), *steps[index + 1 :]]


def _batch_of(args: dict[str, int], slots: list[int]) -> Step:
    """A batch of the given slots of `args`, renumbered from 0."""
    fields: dict[str, int] = {"size": len(slots)}
    for new, old in enumerate(slots):
        fields.update((f"{_base(k)}{new}", v) for k, v in args.items() if _slot(k) == old)
    return Step("batch", fields)


def _entry_step(args: dict[str, int], slot: int) -> Step:
    """Slot `slot` of a batch as the atomic step of its op."""
    code = args.get(f"op{slot}", 0)
    op = BATCH_OPS[code] if 0 <= code < len(BATCH_OPS) else "admit"
    fields = {_base(k): v for k, v in args.items() if _slot(k) == slot and not _is_slot_op(k)}
    return Step(op, {k: v for k, v in fields.items() if k not in OBSERVED})


def _slot(key: str) -> int | None:
    digits = key[len(_base(key)) :]
    return int(digits) if digits and key != "size" else None


def shrink(config: dict[str, Any], steps: Steps, failure: Failure, budget_s: float = SHRINK_S) -> Shrunk:
    """The failure's trace shrunk (see the module docstring)."""
    return Shrinker(config, failure, budget_s).shrink(steps, failure)
