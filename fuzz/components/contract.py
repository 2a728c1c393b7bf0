"""What each unit promises, per target: the strict contract kvlife holds every unit to, and each shipped
version's triaged departures from it.

A unit is judged against its own target's contract. A strict flag a target does not keep is a triaged
difference (`DIFFERENCES` says which kind and why); the fuzzer then draws no event that would expose it, and
`--strict` (or `strict=True`) judges the unit against the strict contract instead, which finds it. The dialect
fields (how a segment free treats a mid-page start) are both legal; they pick the model's expectation.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal


@dataclass(frozen=True)
class RowContract:
    """The row pool's promises beyond the common ones (distinct rows, never row 0 or a held row, frees come back,
    nothing changes on refusal)."""

    # A row's (index, generation) pair names one holder for the pool's life, `clear()` included.
    generation_survives_clear: bool = True
    # `alloc` refuses a released record (allocated length 0) that still names a row, whatever its committed length.
    refuses_stale_reuse: bool = True


@dataclass(frozen=True)
class AllocContract:
    """The token allocator's promises beyond the common ones."""

    # A second `free_group_begin` inside an open group is refused (it would drop the pending frees).
    refuses_nested_group: bool = True
    # `free_group_end` with no group open changes nothing.
    end_outside_group_noop: bool = True
    # Every refusal leaves the allocator exactly as it was, however far the call got.
    refuses_atomically: bool = True
    # `alloc_extend` / `alloc_decode` short of pages refuse before their kernel reads past the free list. Not in
    # STRICT_FLAGS: a kernel that reads past an exhausted list reads address 0 and kills the process, so this is
    # judged in a subprocess (tests/upstream/test_components_upstream.py), and the fuzzer never makes such a call
    # where the flag is off.
    kernel_reads_within_free_list: bool = True
    # Dialect: "aligned" refuses a segment free that starts mid-page; "any" frees that start's whole page too.
    segment_starts: Literal["aligned", "any"] = "any"
    # Dialect: "refused" asserts on free_segments whose neighbours share a page; "trimmed" frees that page once.
    shared_page_segments: Literal["refused", "trimmed"] = "trimmed"


STRICT_FLAGS = {
    RowContract: ("generation_survives_clear", "refuses_stale_reuse"),
    AllocContract: ("refuses_nested_group", "end_outside_group_noop", "refuses_atomically"),
}

CONTRACTS: dict[str, tuple[RowContract, AllocContract]] = {
    "reference": (
        RowContract(),
        AllocContract(),
    ),
    "0.5.23": (
        RowContract(),
        AllocContract(refuses_atomically=False, segment_starts="aligned", shared_page_segments="refused"),
    ),
    "0.5.18": (
        RowContract(generation_survives_clear=False, refuses_stale_reuse=False),
        AllocContract(refuses_nested_group=False, end_outside_group_noop=False, kernel_reads_within_free_list=False),
    ),
}

Triage = Literal["upstream bug", "contract difference"]
# Every strict flag a target does not keep: how it is triaged, and what the unit does instead.
DIFFERENCES: dict[tuple[str, str], tuple[Triage, str]] = {
    ("0.5.23", "refuses_atomically"): (
        "upstream bug",
        "free_segments / free_full_segments check page-disjointness lazily (the _page_disjoint generator), so the "
        "segments before one that shares a page are freed before the assert fires",
    ),
    ("0.5.18", "generation_survives_clear"): (
        "upstream bug",
        "ReqToTokenPool.clear zeroes req_generation, so a row's next holder can carry the (row, generation) pair of "
        "one before the clear; 0.5.23 keeps it monotonic (its clear() says why)",
    ),
    ("0.5.18", "refuses_stale_reuse"): (
        "upstream bug",
        "alloc's reuse guard reads inflight_middle_chunks > 0 or kv_committed_len > 0, so a released record with a "
        "stale committed length keeps its stale row (the guard PR #37167 replaced)",
    ),
    ("0.5.18", "refuses_nested_group"): (
        "contract difference",
        "free_group_begin has no nesting assert: a nested begin drops the pending frees (0.5.23 asserts)",
    ),
    ("0.5.18", "kernel_reads_within_free_list"): (
        "upstream bug",
        "PagedTokenToKVPoolAllocator.alloc_extend / alloc_decode launch their Triton kernel before the capacity "
        "check, so a batch short of pages reads past the free list; an exhausted list is an empty tensor whose "
        "data_ptr() is 0, and the kernel loads from address 0 (a segfault under the interpreter); 0.5.23 checks "
        "first",
    ),
    ("0.5.18", "end_outside_group_noop"): (
        "upstream bug",
        "free_group_end leaves free_group as it was, so an end with no group open frees the last group's slots again",
    ),
}


def contract_for(target: str, kind: str, strict: bool = False) -> RowContract | AllocContract:
    """The contract a unit of `kind` ('rows' or 'allocator') on `target` is judged against."""
    rows, alloc = CONTRACTS[target]
    contract: RowContract | AllocContract = rows if kind == "rows" else alloc
    if not strict:
        return contract
    strict_flags: dict[str, Any] = {flag: True for flag in STRICT_FLAGS[type(contract)]}
    return dataclasses.replace(contract, **strict_flags)


def differences(target: str) -> list[str]:
    """One line per promise `target` does not keep, with its triage."""
    lines = []
    for contract in CONTRACTS[target]:
        for flag in (f.name for f in dataclasses.fields(contract)):
            if getattr(contract, flag) is False:
                triage, why = DIFFERENCES[(target, flag)]
                lines.append(f"{target} {type(contract).__name__}.{flag}: {triage}: {why}")
    return lines
