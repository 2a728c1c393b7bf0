"""The two interpreters of the model: plain Python values, and Z3 terms. Actions are written against `Ops`."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import z3


class Arr:
    """A total map with a default, as a persistent value: `store` returns a new map."""

    __slots__ = ("default", "items")

    def __init__(self, default: Any, items: dict[Any, Any] | None = None):
        self.default = default
        self.items = items if items is not None else {}

    def get(self, key: Any) -> Any:
        return self.items.get(key, self.default)

    def set(self, key: Any, value: Any) -> Arr:
        items = dict(self.items)
        items[key] = value
        return Arr(self.default, items)

    def __iter__(self) -> Iterator[Any]:
        return iter(self.items)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Arr):
            return NotImplemented
        keys = self.items.keys() | other.items.keys()
        return self.default == other.default and all(self.get(k) == other.get(k) for k in keys)

    def __hash__(self) -> int:
        return hash(self.default)

    def __repr__(self) -> str:
        return f"Arr({self.default!r}, {self.items!r})"


class PyOps:
    """Concrete interpreter: Python ints and bools."""

    @staticmethod
    def And(*xs: Any) -> bool:
        return all(xs)

    @staticmethod
    def Or(*xs: Any) -> bool:
        return any(xs)

    @staticmethod
    def Not(x: Any) -> bool:
        return not x

    @staticmethod
    def Implies(a: Any, b: Any) -> bool:
        return (not a) or bool(b)

    @staticmethod
    def If(c: Any, a: Any, b: Any) -> Any:
        return a if c else b

    @staticmethod
    def select(arr: Arr, i: Any) -> Any:
        return arr.get(i)

    @staticmethod
    def store(arr: Arr, i: Any, v: Any) -> Arr:
        return arr.set(i, v)

    @staticmethod
    def const_array(default: Any) -> Arr:
        return Arr(default)

    @staticmethod
    def div(a: Any, k: int) -> Any:
        """Floor division by a positive constant."""
        return a // k


class Cells:
    """A symbolic array over the small index range `[0, len(items))`, one term per index.

    Bounded model checking indexes records by request ids it keeps below the depth; cells let Z3 reason
    about those records as plain variables instead of array theory, while rows stay true arrays so the
    search costs the same for any pool size. Out of range, a read gives `default`.
    """

    __slots__ = ("default", "items")

    def __init__(self, items: list[Any], default: Any):
        self.items = items
        self.default = default

    def select(self, i: Any) -> Any:
        k = _concrete(i)
        if k is not None:  # lemma instances index every cell by a constant: no ite chain to build
            return self.items[k] if 0 <= k < len(self.items) else self.default
        out = self.default
        for k in reversed(range(len(self.items))):
            out = z3.If(i == k, self.items[k], out)
        return out

    def store(self, i: Any, v: Any) -> Cells:
        k = _concrete(i)
        if k is not None:
            return Cells([v if n == k else old for n, old in enumerate(self.items)], self.default)
        return Cells([z3.If(i == k, v, old) for k, old in enumerate(self.items)], self.default)

    def __eq__(self, other: object) -> Any:
        assert isinstance(other, Cells) and len(other.items) == len(self.items)
        return z3.And(*[a == b for a, b in zip(self.items, other.items, strict=True)])

    __hash__ = None  # type: ignore[assignment]


def _concrete(i: Any) -> int | None:
    """The value of an index that is a constant (a Python int or a Z3 numeral), else None."""
    if isinstance(i, int):
        return i
    return i.as_long() if z3.is_int_value(i) else None


class Z3Ops:
    """Symbolic interpreter: Z3 integer and boolean terms, arrays from Int (or `Cells`)."""

    And = staticmethod(z3.And)
    Or = staticmethod(z3.Or)
    Not = staticmethod(z3.Not)
    Implies = staticmethod(z3.Implies)

    @staticmethod
    def If(c: Any, a: Any, b: Any) -> Any:
        if isinstance(a, Cells):
            return Cells([z3.If(c, x, y) for x, y in zip(a.items, b.items, strict=True)], a.default)
        return z3.If(c, a, b)

    @staticmethod
    def select(arr: Any, i: Any) -> Any:
        return arr.select(i) if isinstance(arr, Cells) else z3.Select(arr, i)

    @staticmethod
    def store(arr: Any, i: Any, v: Any) -> Any:
        return arr.store(i, v) if isinstance(arr, Cells) else z3.Store(arr, i, v)

    @staticmethod
    def div(a: Any, k: int) -> Any:
        return a if k == 1 else a / k  # Z3's integer division floors for a positive divisor

    @staticmethod
    def const_array(default: Any) -> Any:
        sort = z3.BoolSort() if isinstance(default, bool) else z3.IntSort()
        return z3.K(z3.IntSort(), z3.BoolVal(default) if sort == z3.BoolSort() else z3.IntVal(default))


PY = PyOps()
Z3 = Z3Ops()
