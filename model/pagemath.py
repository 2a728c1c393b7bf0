"""Page arithmetic of the memory contract, as pure functions with contracts that CrossHair checks.

`ceil_align` and `page_floor` are the two roundings every release and allocation path depends on (SGLang
frees over-allocation from `ceil_align(C)` and caches `page_floor(C)`); `extend_split` is the three-part split
of an extend that the allocation kernels compute (finish the prefix's partial page, whole new pages, a
trailing partial page). The model's symbolic forms (`properties.invariants`) are checked against these.
"""

from __future__ import annotations


def ceil_align(x: int, page_size: int) -> int:
    """`x` rounded up to a whole number of pages.

    pre: x >= 0
    pre: page_size >= 1
    post: __return__ % page_size == 0
    post: x <= __return__ < x + page_size
    """
    return -(-x // page_size) * page_size


def page_floor(x: int, page_size: int) -> int:
    """`x` rounded down to a whole number of pages.

    pre: x >= 0
    pre: page_size >= 1
    post: __return__ % page_size == 0
    post: x - page_size < __return__ <= x
    """
    return x // page_size * page_size


def num_new_pages(prefix_len: int, seq_len: int, page_size: int) -> int:
    """Pages an extend from `prefix_len` to `seq_len` takes from the free list.

    pre: 0 <= prefix_len <= seq_len
    pre: page_size >= 1
    post: __return__ >= 0
    post: __return__ * page_size == ceil_align(seq_len, page_size) - ceil_align(prefix_len, page_size)
    """
    return -(-seq_len // page_size) - -(-prefix_len // page_size)


def extend_split(prefix_len: int, seq_len: int, page_size: int) -> tuple[int, int, int]:
    """Tokens written into the prefix's last partial page, into whole new pages, and into a trailing partial page.

    pre: 0 <= prefix_len <= seq_len
    pre: page_size >= 1
    post: sum(__return__) == seq_len - prefix_len
    post: min(__return__) >= 0
    post: __return__[1] % page_size == 0
    post: __return__[2] < page_size
    post: __return__[1] + page_size * (__return__[2] > 0) == page_size * num_new_pages(prefix_len, seq_len, page_size)
    """
    first = min(seq_len, ceil_align(prefix_len, page_size)) - prefix_len
    if prefix_len + first == seq_len:
        return first, 0, 0
    whole = page_floor(seq_len, page_size) - ceil_align(prefix_len, page_size)
    return first, whole, seq_len - page_floor(seq_len, page_size)


def owned_pages(protected_len: int, allocated_len: int, page_size: int) -> int:
    """Slots a record owns alone: its pages from `P` (page-aligned) to `ceil_align(A)`.

    pre: 0 <= protected_len <= allocated_len
    pre: page_size >= 1
    pre: protected_len % page_size == 0
    post: __return__ >= allocated_len - protected_len
    post: __return__ % page_size == 0
    """
    return ceil_align(allocated_len, page_size) - protected_len
