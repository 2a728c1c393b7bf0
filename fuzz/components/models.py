"""The two tiny models a component fuzzer steps beside a real unit: rows (who holds which row, at which
generation) and pages (free, staged, pending in a free group, or held by whom, position by position).

Plain Python, no torch. Holders are model-level references (ints in creation order); a model never knows a real
`Req` or tensor. Neither model orders its free sets: no unit promises a free-list order to its callers.
"""

from __future__ import annotations

from dataclasses import dataclass, field


def cdiv(n: int, d: int) -> int:
    return -(-n // d)


@dataclass
class RowModel:
    """Rows 1..rows (0 is padding). A request reference holds a row or none; a stale one is a released record
    still naming a row; a block is rows `alloc_rows` handed out with no request bound."""

    rows: int
    width: int
    free: set[int] = field(default_factory=set)
    req_rows: dict[int, int | None] = field(default_factory=dict)
    stale: dict[int, int] = field(default_factory=dict)
    blocks: dict[int, list[int]] = field(default_factory=dict)
    last_gen: list[int] = field(default_factory=list)
    pair_holder: dict[tuple[int, int], int] = field(default_factory=dict)
    table: list[list[int]] = field(default_factory=list)
    next_ref: int = 0

    @classmethod
    def fresh(cls, rows: int, width: int) -> RowModel:
        model = cls(rows, width, free=set(range(1, rows + 1)), last_gen=[0] * (rows + 1))
        model.table = [[0] * width for _ in range(rows + 1)]
        return model

    def new_ref(self) -> int:
        self.next_ref += 1
        return self.next_ref - 1

    def live(self) -> list[int]:
        return [ref for ref, row in self.req_rows.items() if row is not None]

    def rowless(self) -> list[int]:
        return [ref for ref, row in self.req_rows.items() if row is None]

    def held(self) -> dict[int, int]:
        """Row -> the reference holding it (a request or a block)."""
        owners = {row: ref for ref, row in self.req_rows.items() if row is not None}
        owners.update({row: ref for ref, rows in self.blocks.items() for row in rows})
        return owners

    def retire_all(self) -> None:
        """`clear()`: every row free, every reference forgotten (the scheduler flushes only when idle)."""
        self.free = set(range(1, self.rows + 1))
        self.req_rows, self.stale, self.blocks = {}, {}, {}

    def self_check(self) -> str | None:
        """The model's own invariant: free and held rows partition 1..rows."""
        held = [row for row in self.req_rows.values() if row is not None]
        held += [row for rows in self.blocks.values() for row in rows]
        if sorted(held + list(self.free)) != list(range(1, self.rows + 1)):
            return f"model rows out of partition: free {sorted(self.free)}, held {sorted(held)}"
        return None


@dataclass
class PageModel:
    """Pages 1..num_pages (0 is padding). Each is free, staged (freed under `need_sort`, waiting for a merge),
    pending in the open free group, or held: a holder's `slots[i]` is the slot of its position i."""

    page_size: int
    num_pages: int
    need_sort: bool
    free: set[int] = field(default_factory=set)
    staged: set[int] = field(default_factory=set)
    pending: set[int] | None = None
    holders: dict[int, list[int]] = field(default_factory=dict)
    next_ref: int = 0

    @classmethod
    def fresh(cls, page_size: int, num_pages: int, need_sort: bool) -> PageModel:
        return cls(page_size, num_pages, need_sort, free=set(range(1, num_pages + 1)))

    def new_ref(self) -> int:
        self.next_ref += 1
        return self.next_ref - 1

    def available_pages(self) -> int:
        """What an allocation may take: free pages and staged ones (an allocation merges when short)."""
        return len(self.free) + len(self.staged)

    def merge(self) -> None:
        self.free |= self.staged
        self.staged = set()

    def release(self, pages: list[int]) -> None:
        """Pages a free gives back: into the open group, else staged under `need_sort`, else free."""
        if self.pending is not None:
            self.pending.update(pages)
        elif self.need_sort:
            self.staged.update(pages)
        else:
            self.free.update(pages)

    def end_group(self) -> None:
        pages, self.pending = self.pending or set(), None
        self.release(sorted(pages))

    def truncate(self, ref: int, start: int) -> list[int]:
        """Free a holder's positions from `start` on: it keeps the whole pages before `start`'s page and loses the
        rest (a page freed mid-way is freed whole). Returns the pages freed, ascending."""
        slots = self.holders[ref]
        keep = start // self.page_size * self.page_size
        pages = sorted({slot // self.page_size for slot in slots[keep:]})
        self.holders[ref] = slots[:keep]
        return pages

    def clear(self, num_pages: int | None = None) -> None:
        """`clear()` (or `resize`): every page free, no group, every holder forgotten."""
        self.num_pages = self.num_pages if num_pages is None else num_pages
        self.free, self.staged, self.pending = set(range(1, self.num_pages + 1)), set(), None
        self.holders = {}

    def held(self) -> dict[int, int]:
        """Page -> the holder it belongs to."""
        return {slot // self.page_size: ref for ref, slots in self.holders.items() for slot in slots}

    def self_check(self) -> str | None:
        """The model's own invariant: free, staged, pending and held pages partition 1..num_pages."""
        parts = [*self.free, *self.staged, *(self.pending or ()), *self.held()]
        if sorted(parts) != list(range(1, self.num_pages + 1)):
            return f"model pages out of partition: {sorted(parts)}"
        return None
