"""The events a component fuzzer applies: plain frozen values that name holders by model-level references.

A `pick` is resolved against the model when the event runs: the `pick % n`-th of the n candidates the event
can act on (live holders, rowless requests, ...), in the order they were created; an event with no candidate is
skipped. So events never carry a real row, slot or page, any list of them is a valid run, and shrinking may drop
or change any event.
"""

from __future__ import annotations

from dataclasses import dataclass, fields


@dataclass(frozen=True)
class Event:
    """Base of every event; `str()` prints it as a call."""

    def __str__(self) -> str:
        args = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in fields(self))
        return f"{type(self).__name__}({args})"


# -- row pool ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RowAlloc(Event):
    """`alloc(reqs)`: None is a new request, an int picks a request without a row or one holding its row (reuse)."""

    picks: tuple[int | None, ...]


@dataclass(frozen=True)
class RowAllocStale(Event):
    """Forbidden: `alloc` of a released record that still names its old row, beside `fresh` new requests. With no
    such record yet, a live request is released that way first (`committed` as in `RowStale`)."""

    pick: int
    committed: bool
    fresh: int


@dataclass(frozen=True)
class RowFree(Event):
    """`free(req)` of a request that holds a row."""

    pick: int


@dataclass(frozen=True)
class RowFreeRowless(Event):
    """Forbidden: `free(req)` of a request that holds no row."""

    pick: int


@dataclass(frozen=True)
class RowStale(Event):
    """A release that frees the row but leaves the record naming it (allocated 0, committed stale or 0)."""

    pick: int
    committed: bool


@dataclass(frozen=True)
class RowAllocRows(Event):
    """`alloc_rows(need)`: rows with no request bound to them."""

    need: int


@dataclass(frozen=True)
class RowFreeRows(Event):
    """`free_rows(rows)`: the first `count` rows (at least one) of an `alloc_rows` block."""

    pick: int
    count: int


@dataclass(frozen=True)
class RowWrite(Event):
    """`write`: values into positions `[start, start + length)` of a held row (clipped to the row's width)."""

    pick: int
    start: int
    length: int
    seed: int


@dataclass(frozen=True)
class RowClear(Event):
    """`clear()`: every row free again; every request the model knew is retired."""


@dataclass(frozen=True)
class RowQuery(Event):
    """A read-only question (`schedulable_token_capacity`, ...), the `which`-th the unit answers."""

    which: int
    n: int


# -- token allocator --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Alloc(Event):
    """`alloc(need_size)` of `pages` whole pages (page size 1: slots) for a new holder."""

    pages: int


@dataclass(frozen=True)
class Fill(Event):
    """`alloc` of every page an allocation could take but `leave`, so that what follows runs short."""

    leave: int


@dataclass(frozen=True)
class Extend(Event):
    """One batched extend: per request (None a new one, an int a holder) the number of positions to add.
    Paged: `alloc_extend`, passing the exact page count when `pass_count`; page size 1: one `alloc` of the sum."""

    items: tuple[tuple[int | None, int], ...]
    pass_count: bool


@dataclass(frozen=True)
class Decode(Event):
    """One batched decode: one new position for each picked holder. Paged: `alloc_decode`; page size 1: `alloc`."""

    picks: tuple[int, ...]


@dataclass(frozen=True)
class Free(Event):
    """Free a holder's positions from `keep` on (mod its length + 1) through `via`, one of the unit's free methods."""

    pick: int
    keep: int
    via: int


@dataclass(frozen=True)
class FreeSplit(Event):
    """`free_segments` (or `free_full_segments`) of a holder's positions from `keep` on, in two segments split at
    `split` positions into them."""

    pick: int
    keep: int
    split: int
    via: int


@dataclass(frozen=True)
class FreeEmpty(Event):
    """A free of no slots through `via`: it must change nothing."""

    via: int


@dataclass(frozen=True)
class BadSegment(Event):
    """Forbidden where segments must start on a page: `free_segment` of a holder's positions from a mid-page one."""

    pick: int
    keep: int


@dataclass(frozen=True)
class BadSplit(Event):
    """Forbidden where neighbouring segments may not share a page: `free_segments` split mid-page."""

    pick: int
    keep: int
    split: int


@dataclass(frozen=True)
class GroupBegin(Event):
    """`free_group_begin()`; inside an open group it is a nested begin, forbidden where the contract says so."""


@dataclass(frozen=True)
class GroupEnd(Event):
    """`free_group_end()`; with no group open it must change nothing where the contract says so."""


@dataclass(frozen=True)
class Merge(Event):
    """`merge_and_sort_free()`: staged pages join the free list, which comes out sorted."""


@dataclass(frozen=True)
class Clear(Event):
    """`clear()`: every page free again; every holder retired."""


@dataclass(frozen=True)
class Resize(Event):
    """`resize(config)` to `pages` pages: a clear at the new size."""

    pages: int


@dataclass(frozen=True)
class Query(Event):
    """A read-only question (`check_decode_capacity`, `get_all_free_pages`, ...), the `which`-th the unit answers."""

    which: int
    n: int
