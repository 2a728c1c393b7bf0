"""The page layout every allocation must respect, and the judgement of the pages it takes.

A request's positions on one page are that page's slots, consecutive and in position order: a position on the
prefix's open page continues from `last_loc`; a position that starts a page takes a new page's first slot; any
other continues from the position before it. A page taken must be free in the model (not staged, pending or
held) and distinct from every other page the same call took.
"""

from __future__ import annotations

from fuzz.components.models import PageModel, cdiv


def extend_layout(page_size: int, prefix_len: int, last_loc: int, slots: list[int]) -> tuple[list[int], str | None]:
    """The new pages of one request's extend output for positions `[prefix_len, prefix_len + len(slots))`, or
    the first position that breaks the layout."""
    open_page_end = cdiv(prefix_len, page_size) * page_size
    new_pages: list[int] = []
    for offset, slot in enumerate(slots):
        pos = prefix_len + offset
        if pos < open_page_end:
            expected = last_loc + 1 + offset
            if slot != expected:
                return new_pages, f"position {pos} is on the prefix's open page: slot {expected} expected, got {slot}"
        elif pos % page_size == 0:
            if slot % page_size != 0:
                return new_pages, f"position {pos} starts a page but got slot {slot}, not a page's first slot"
            new_pages.append(slot // page_size)
        elif slot != slots[offset - 1] + 1:
            return new_pages, f"position {pos} follows slot {slots[offset - 1]} on its page but got slot {slot}"
    return new_pages, None


def judge_pages(model: PageModel, pages: list[int]) -> str | None:
    """Why taking `pages` is illegal (out of range, page 0, taken twice, not free), or None."""
    held = model.held()
    for index, page in enumerate(pages):
        if not 1 <= page <= model.num_pages:
            return f"page {page} is out of range 1..{model.num_pages}"
        if page in pages[:index]:
            return f"page {page} handed out twice in one call"
        if page in held:
            return f"page {page} is held by holder h{held[page]}"
        if page in model.staged:
            return f"page {page} is staged (freed under need_sort, not merged)"
        if model.pending is not None and page in model.pending:
            return f"page {page} is pending in the open free group"
        if page not in model.free:
            return f"page {page} is not free"
    return None
