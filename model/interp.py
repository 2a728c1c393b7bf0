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


class Z3Ops:
    """Symbolic interpreter: Z3 integer and boolean terms, arrays from Int."""

    And = staticmethod(z3.And)
    Or = staticmethod(z3.Or)
    Not = staticmethod(z3.Not)
    Implies = staticmethod(z3.Implies)
    If = staticmethod(z3.If)

    @staticmethod
    def select(arr: Any, i: Any) -> Any:
        return z3.Select(arr, i)

    @staticmethod
    def store(arr: Any, i: Any, v: Any) -> Any:
        return z3.Store(arr, i, v)

    @staticmethod
    def const_array(default: Any) -> Any:
        sort = z3.BoolSort() if isinstance(default, bool) else z3.IntSort()
        return z3.K(z3.IntSort(), z3.BoolVal(default) if sort == z3.BoolSort() else z3.IntVal(default))


PY = PyOps()
Z3 = Z3Ops()
