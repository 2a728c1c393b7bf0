"""What a step's evictions must respect, judged on the pool before and after it.

An on-demand eviction (inside an allocation or a retraction) and the explicit `evict` step free unlocked
tree leaves, least recently used first, until they have freed what they asked for or nothing evictable is
left. Seen from outside: no evicted slot lies on a lock holder's protected prefix, and an eviction that
freed less than it asked left nothing evictable behind. Whole-leaf removal and the counters are the tree's
own check's and `tree-counters`'; that the freed slots came back is the page check's.
"""

from __future__ import annotations

from collections.abc import Sequence

from properties.snapshot import SnapshotLike


def check_evictions(
    before: SnapshotLike,
    after: SnapshotLike,
    evictions: Sequence[tuple[int, int]],
    page_size: int,
    unlocks_between: bool = False,
) -> list[str]:
    """Messages for each way the step's evictions `(asked, freed)` broke the rules (none when they kept them).

    `unlocks_between`: the step releases between its evictions (a decode retraction checks the fit, evicting,
    before each request it releases), so what a short eviction left evictable is not what `after` shows, and
    that rule is not judged."""
    problems = [
        f"an eviction freed {freed} tokens, not a whole number of pages of {page_size}"
        for _, freed in evictions
        if freed % page_size
    ]
    removed = set(before.tree_slots.tolist()) - set(after.tree_slots.tolist())
    for rid, record in sorted(after.records.items()):
        if record.tree_locked and rid in after.row_slots:
            hit = sorted(removed & set(after.row_slots[rid][: record.protected_len]))
            if hit:
                problems.append(f"evicted slots {hit[:8]} of request {rid}'s locked prefix")
    short = [] if unlocks_between else [(asked, freed) for asked, freed in evictions if freed < asked]
    left = sorted(set(after.evictable_slots.tolist()) & set(before.tree_slots.tolist()))
    if short and left:
        problems.append(
            f"an eviction freed {short[0][1]} of the {short[0][0]} tokens it asked for, "
            f"yet slots {left[:8]} that were cached before stay evictable"
        )
    return problems
