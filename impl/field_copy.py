"""`copy.deepcopy` of the pool's own objects, field by field without deepcopy's dispatch on every int.

The release-path differential copies the whole pool once per path (`ReferencePool.clone`). `copy.deepcopy`'s
generic path rebuilds an object through `__reduce_ex__` and dispatches on every key and value of its `__dict__`,
and on every int of a list of free rows; the pool's objects hold mostly ints and strings. `FieldCopy.__deepcopy__`
shares those atoms as `copy.deepcopy` does, copies a list of atoms in one call, and hands every other value back
to `copy.deepcopy` with the same memo, so that shared objects stay shared and cycles close as before.
"""

from __future__ import annotations

import copy
from typing import Any

ATOMS = frozenset({int, float, bool, str, bytes, type(None)})


class FieldCopy:
    """A class whose instances `copy.deepcopy` copies field by field (its `__dict__`)."""

    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        kind = type(self)
        copied = object.__new__(kind)
        memo[id(self)] = copied
        copied.__dict__.update({name: copy_value(value, memo) for name, value in self.__dict__.items()})
        return copied


def copy_value(value: Any, memo: dict[int, Any]) -> Any:
    """`copy.deepcopy(value, memo)`, with atoms shared and a list of atoms copied in one call."""
    kind = type(value)
    if kind in ATOMS:
        return value
    if kind is list and all(type(item) in ATOMS for item in value):
        found = memo.get(id(value))
        if found is None:
            found = memo[id(value)] = list(value)
            memo.setdefault(id(memo), []).append(value)  # kept alive, as `copy.deepcopy` keeps what it copies
        return found
    return copy.deepcopy(value, memo)
