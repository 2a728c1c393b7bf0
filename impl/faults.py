"""Named fault switches: each re-creates one historical bug at one named place in the reference pool.

A fault is a test fixture of the harness. Every switch is off unless a caller names it; `FaultSet()` is
the empty set, and `tests/impl/test_faults.py` proves that a default pool behaves as the contract says.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Fault:
    """One historical bug: where the switch acts, what it changes, and where the bug was shipped."""

    name: str
    site: str
    mechanism: str
    origin: str


FAULTS: dict[str, Fault] = {
    f.name: f
    for f in (
        Fault(
            name="legacy_reuse_guard",
            site="ReqToTokenPool.alloc",
            mechanism="the row-reuse assert reads scheduler fields (inflight_middle_chunks > 0 or "
            "kv_committed_len > 0) instead of the record (kv_allocated_len > 0); a released record keeps a "
            "stale kv_committed_len, so a stale req_pool_idx passes",
            origin="sglang PR #37167 (the guard it replaced, from #19465)",
        ),
        Fault(
            name="raw_row_free",
            site="release_kv_cache (row step)",
            mechanism="the row goes back with free_rows and the record is marked released, but "
            "req_pool_idx is left set, so the record still claims a row that is free",
            origin="sglang PR #37167 (bypass paths that skipped ReqToTokenPool.free)",
        ),
    )
}


class UnknownFault(ValueError):
    """A fault name that no switch carries."""


@dataclass(frozen=True)
class FaultSet:
    """The switches turned on for one pool; empty by default."""

    names: frozenset[str] = frozenset()

    @staticmethod
    def of(names: list[str] | tuple[str, ...] | frozenset[str]) -> FaultSet:
        unknown = sorted(set(names) - FAULTS.keys())
        if unknown:
            raise UnknownFault(f"unknown fault {', '.join(unknown)}; known: {', '.join(sorted(FAULTS))}")
        return FaultSet(frozenset(names))

    def on(self, name: str) -> bool:
        assert name in FAULTS, f"fault switch {name!r} is not registered"
        return name in self.names

    def sorted(self) -> list[str]:
        return sorted(self.names)


NO_FAULTS = FaultSet()
