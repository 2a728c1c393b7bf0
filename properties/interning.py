"""One immutable object per distinct tuple of field values, for values built again and again from the same fields.

A lockstep step views every record of the pool and observes every record on both sides, and most records are as
they were the step before: looking up the object built last time costs less than building a frozen dataclass, and
two observations holding the same objects compare by identity. The same table remembers a pure function's answer
per distinct argument tuple (`properties.check`: a record's verdict per record and bounds). Keys equal across types
(1 and True) share one object: every check compares these objects' values, which are equal.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


class Interned(dict[tuple[Any, ...], T]):
    """`interned[fields]` is `build(*fields)`, built once per distinct `fields`; the table empties when it holds
    `limit` objects, so that it stays bounded on a long run."""

    def __init__(self, build: Callable[..., T], limit: int) -> None:
        super().__init__()
        self.build, self.limit = build, limit

    def __missing__(self, fields: tuple[Any, ...]) -> T:
        if len(self) >= self.limit:
            self.clear()
        built = self[fields] = self.build(*fields)
        return built
