"""Per-seed swarm weights (Groce et al.'s swarm testing, as TigerBeetle's VOPR draws them): each seed turns some
ops off and weighs the rest, so that a run hammers a few flows instead of averaging over all of them."""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

OFF_ODDS = 0.25  # the chance that a seed never draws a given op
MAX_WEIGHT = 100
WALK_STEPS = (16, 96)  # the steps of one walk from a fresh pool, drawn per seed
SMALL_ODDS = (0.2, 0.8)  # the share of lengths drawn from the first few pages, drawn per seed
OTHER_KIND_ODDS = (0.0, 0.25, 0.5)  # the share of admissions of a kind other than normal, one per seed
# The share of batches sent unchecked where a shortfall fails their first allocation (`fuzz.unchecked`), so that
# upstream's own out-of-memory refusals answer; one per seed.
UNCHECKED_ODDS = (0.0, 0.3, 0.6)


@dataclass(frozen=True)
class Swarm:
    """One seed's swarm: each op's weight (0: never drawn), the steps of a walk, how often a length is small, how
    often an admission is of another kind than normal and how often a batch that may is sent unchecked."""

    weights: dict[str, int]
    walk_steps: int
    small_odds: float
    other_kind_odds: float
    unchecked_odds: float

    def describe(self) -> str:
        """One line: the ops drawn with their weights, the walk's length, the length and kind mix."""
        on = " ".join(f"{op}={w}" for op, w in sorted(self.weights.items()) if w)
        off = ",".join(sorted(op for op, w in self.weights.items() if not w)) or "none"
        return (
            f"walks of {self.walk_steps} steps, {self.small_odds:.0%} small lengths, "
            f"{self.other_kind_odds:.0%} other kinds, {self.unchecked_odds:.0%} unchecked batches; weights {on}; "
            f"off {off}"
        )


def draw_swarm(
    rng: random.Random, ops: Iterable[str], creators: Iterable[str], companions: Mapping[str, str] | None = None
) -> Swarm:
    """A swarm over `ops`; at least one of `creators` (the ops that bring a new request in) stays on, or the pool
    would stay empty; an op's companion (`companions`: what ends what it begins) is on whenever the op is."""
    ordered = sorted(ops)
    weights = {op: 0 if rng.random() < OFF_ODDS else rng.randint(1, MAX_WEIGHT) for op in ordered}
    makers = sorted(set(creators) & set(ordered))
    if makers and not any(weights[op] for op in makers):
        weights[rng.choice(makers)] = rng.randint(1, MAX_WEIGHT)
    for op, companion in sorted((companions or {}).items()):
        if weights.get(op) and weights.get(companion) == 0:
            weights[companion] = rng.randint(1, MAX_WEIGHT)
    walk_steps = rng.randint(*WALK_STEPS)
    small_odds = rng.uniform(*SMALL_ODDS)
    other_kind_odds = rng.choice(OTHER_KIND_ODDS)
    return Swarm(weights, walk_steps, small_odds, other_kind_odds, rng.choice(UNCHECKED_ODDS))
