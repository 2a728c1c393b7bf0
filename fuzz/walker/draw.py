"""Drawing one step: an op by its swarm weight, steered toward the transitions this run has rarely reached from
the current shape, then a request by the op's rule (`fuzz.walker.rules`) and arguments by their sorts."""

from __future__ import annotations

import random
from typing import Any

from fuzz.unchecked import unchecked
from fuzz.walker.rules import ANY, LEGAL, Param, Pick, candidates, drawn_params, open_now, rule_for
from fuzz.walker.swarm import Swarm
from model.actions import OBSERVED, Action
from model.batch import ENTRY_FIELDS
from model.state import Sizes
from properties.vocabulary import BATCH_OPS, KIND_NORMAL, MAX_BATCH, STATUS_NEW

STEER = 4.0  # an op never drawn from the current shape weighs up to this much more than its swarm weight
MAX_TRIES = 8  # requests tried for a pick that keeps only the calls the model enables (or forbids)
SMALL_PAGES = 2  # a small length lies within the first pages
_UNOBSERVED = dict.fromkeys(OBSERVED, 0)  # what the lockstep reads off the pool, taken as 0 to judge a draw

Groups = dict[int, list[int]]
Drawn = tuple[str, dict[str, int]]


class Drawer:
    """Draws the steps of one run; `reset` starts a new walk (fresh request ids from 0 again)."""

    def __init__(
        self,
        rng: random.Random,
        sizes: Sizes,
        actions: dict[str, Action],
        ops: frozenset[str],
        swarm: Swarm,
        kinds: tuple[int, ...],
    ) -> None:
        self.rng, self.sizes, self.swarm = rng, sizes, swarm
        self.rules = {op: rule_for(op, actions.get(op)) for op in sorted(ops)}
        # The ops this swarm draws on this pool, each with the statuses it needs a request in, or none needed.
        self.drawn = [
            (op, rule, rule.known_statuses(), rule.always_open())
            for op, rule in self.rules.items()
            if swarm.weights.get(op) and rule.pool(sizes)
        ]
        self.other_kinds = tuple(k for k in kinds if k != KIND_NORMAL)
        self.params = {op: drawn_params(a, sizes, kinds) for op, a in actions.items() if op in ops and op != "batch"}
        self.entry_ops = tuple(op for op in BATCH_OPS if op in self.params)
        self.small = range(1, min(SMALL_PAGES * sizes.page_size, sizes.width) + 1)
        self.next_rid = 0

    def reset(self) -> None:
        self.next_rid = 0

    def draw(self, lock: Any, groups: Groups, seen: dict[str, int]) -> Drawn | None:
        """The next step from the model's state now, steered by how often each op was drawn from this shape
        (`seen`); None when no op of the swarm can be drawn."""
        state, weights = lock.model.state, self.swarm.weights
        grouped = bool(state.group_open)  # a result pass's free group is open: the scheduler only releases
        ready = [
            op
            for op, rule, known, always in self.drawn
            if (always or not known.isdisjoint(groups))
            and not (grouped and rule.schedules)
            and (rule.ready is None or rule.ready(state))
        ]
        while ready:
            steered = [weights[op] * (1 + STEER / (1 + seen.get(op, 0))) for op in ready]
            op = self.rng.choices(ready, steered)[0]
            args = self._batch(lock, groups) if op == "batch" else self._args(op, lock, groups)
            if args is not None:
                return op, args
            ready.remove(op)
        return None

    def _args(self, op: str, lock: Any, groups: Groups) -> dict[str, int] | None:
        pick = self.rng.choice([pick for pick in self.rules[op].picks if open_now(pick, groups)])
        for _ in range(1 if pick.keep == ANY else MAX_TRIES):
            rid = self._request(pick, groups)
            args = self._fill(op, rid, lock)
            if pick.keep == ANY or self._kept(pick, op, args, lock):
                if rid is not None and rid == self.next_rid:
                    self.next_rid += 1
                return args
        return None

    def _request(self, pick: Pick, groups: Groups, used: frozenset[int] = frozenset()) -> int | None:
        """A request of `pick`: a known one in its statuses, or a fresh id where it takes new ones."""
        if not pick.statuses:
            return None
        known = [rid for rid in candidates(pick, groups) if rid not in used]
        fresh = STATUS_NEW in pick.statuses
        index = self.rng.randrange(len(known) + fresh)
        return self.next_rid if index == len(known) else known[index]

    def _kept(self, pick: Pick, op: str, args: dict[str, int], lock: Any) -> bool:
        legal = lock.model.enabled(op, {**_UNOBSERVED, **args})
        return bool(legal) if pick.keep == LEGAL else not legal

    def _fill(self, op: str, rid: int | None, lock: Any) -> dict[str, int]:
        args = {} if rid is None else {"req": rid}
        for param in self.params.get(op, ()):
            args[param.name] = self._value(param, rid, lock)
        return args

    def _value(self, param: Param, rid: int | None, lock: Any) -> int:
        rng = self.rng
        if param.sort == "row" and rid in lock.last_row:
            return int(lock.last_row[rid])  # the row the record last held: a stale row, as a bypassed free leaves
        if param.name == "kind":
            odds = self.swarm.other_kind_odds
            return rng.choice(self.other_kinds) if self.other_kinds and rng.random() < odds else KIND_NORMAL
        if param.tokens and rng.random() < self.swarm.small_odds:
            return rng.choice(self.small)
        return rng.choice(param.values)

    def _batch(self, lock: Any, groups: Groups) -> dict[str, int] | None:
        """Up to `MAX_BATCH` entries, each a different request drawn by its own op's rule: new admissions, next
        chunks, re-admissions and decodes (a mixed batch where prefill and decode meet); at the swarm's odds sent
        unchecked where a shortfall would fail its first allocation (`fuzz.unchecked`)."""
        args: dict[str, int] = {}
        used: set[int] = set()
        for _ in range(self.rng.randint(1, MAX_BATCH)):
            drawn = self._entry(lock, groups, frozenset(used))
            if drawn is None:
                continue
            op, entry = drawn
            slot = len(used)
            used.add(entry["req"])
            args[f"op{slot}"] = BATCH_OPS.index(op)
            args.update((f"{name}{slot}", value) for name, value in entry.items() if name in ENTRY_FIELDS)
        if not used:
            return None
        batch = {"size": len(used), **args}
        if self.rng.random() < self.swarm.unchecked_odds:
            return unchecked(lock, batch) or batch
        return batch

    def _entry(self, lock: Any, groups: Groups, used: frozenset[int]) -> Drawn | None:
        options = []
        for op in self.entry_ops:
            picks = [p for p in self.rules[op].picks if _open(p, groups, used)]
            options += [(op, pick) for pick in picks]
        if not options:
            return None
        weights = [1 + self.swarm.weights.get(op, 0) for op, _ in options]
        op, pick = self.rng.choices(options, weights)[0]
        rid = self._request(pick, groups, used)
        assert rid is not None
        if rid == self.next_rid:
            self.next_rid += 1
        return op, self._fill(op, rid, lock)


def _open(pick: Pick, groups: Groups, used: frozenset[int]) -> bool:
    """Whether `pick` has a request not yet in the batch (a fresh id always is)."""
    return STATUS_NEW in pick.statuses or any(rid not in used for rid in candidates(pick, groups))
