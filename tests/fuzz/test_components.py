"""The component lockstep on the reference units: fault-free runs find nothing and reach every refusal path; each
kind of planted bug is found with a short counterexample; the strict contract finds the reference's triaged
differences; the layout judge, the inventory and the CLI."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from fuzz.components import events as ev
from fuzz.components.cli import main
from fuzz.components.contract import AllocContract, RowContract, contract_for, differences
from fuzz.components.inventory import INVENTORY, undocumented
from fuzz.components.layout import extend_layout
from fuzz.components.loop import run_events
from fuzz.components.search import UnitResult, fuzz_unit
from impl.allocator import TokenToKVPoolAllocator
from impl.components import reference_units
from impl.decode_pool import DecodeReqToTokenPool
from impl.paged_allocator import PagedTokenToKVPoolAllocator
from impl.req_pool import ReqToTokenPool
from tests import component_faults as faults

SPECS = {spec.name: spec for spec in reference_units()}
# The Triton interpreter costs 5-40 ms a launch: its units get fewer test cases here (make bench has the rates).
FAST = [name for name in SPECS if "triton" not in name]
TRITON = [name for name in SPECS if "triton" in name]
EXAMPLES, TRITON_EXAMPLES, HUNT_EXAMPLES = 40, 4, 300
MAX_COUNTEREXAMPLE = 6  # events in a planted bug's shrunk counterexample


def fuzz(name: str, examples: int = EXAMPLES, **kwargs: object) -> UnitResult:
    return fuzz_unit(SPECS[name], "reference", examples, seed=0, **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", FAST)
def test_fault_free_units_find_nothing(name: str) -> None:
    result = fuzz(name)
    assert result.failure is None, result.line("reference")
    assert result.steps > 5 * EXAMPLES, "the test cases ran almost no events"


@pytest.mark.parametrize("name", TRITON)
def test_fault_free_triton_units_find_nothing(name: str) -> None:
    result = fuzz(name, TRITON_EXAMPLES)
    assert result.failure is None, result.line("reference")
    assert result.coverage["steps"] > 0


@pytest.mark.parametrize(
    ("name", "paths"),
    [
        ("rows", {"rows.alloc:None", "alloc_rows:None", "rows.alloc:stale-refused", "rows.free:rowless-refused"}),
        ("token-p1", {"alloc:None", "alloc_extend-as-alloc:None", "alloc_decode-as-alloc:None"}),
        ("paged-p4-oracle", {"alloc:None", "alloc_extend:None", "alloc_decode:None"}),
        ("paged-p16-oracle-sort", {"alloc:None", "alloc_extend:None", "alloc_decode:None", "merge:by-allocation"}),
    ],
)
def test_every_allocation_path_is_exhausted(name: str, paths: set[str]) -> None:
    coverage = fuzz(name, 100).coverage
    assert {path for path in paths if coverage[path] == 0} == set()


@pytest.mark.parametrize(
    ("name", "plant"),
    [
        ("paged-p4-oracle", faults.hands_out_again),
        ("paged-p4-torch", faults.drops_a_free),
        ("token-p1", faults.refusal_takes_a_page),
        ("paged-p4-oracle", faults.reference_extend_offsets_from_head),
        ("paged-p16-oracle-sort", faults.group_end_drops_pending),
        ("rows", faults.alloc_rows_zero_takes_all),
        ("decode-rows", faults.generation_not_bumped),
        ("token-p1-sort", faults.merge_loses_a_page),
    ],
)
def test_each_planted_bug_is_found_and_shrunk(name: str, plant: faults.Plant) -> None:
    result = fuzz(name, HUNT_EXAMPLES, patch=plant)
    assert result.failure is not None, f"{plant.__name__} on {name} went unnoticed"
    assert result.failure.step < MAX_COUNTEREXAMPLE, result.counterexample()
    assert result.failure.kind != "crash", result.line("reference")


def test_the_reference_keeps_every_strict_promise() -> None:
    assert fuzz("paged-p4-oracle", HUNT_EXAMPLES, strict=True).failure is None  # a nested group is refused
    assert fuzz("rows", HUNT_EXAMPLES, strict=True).failure is None  # clear() keeps generations, as 0.5.23
    assert differences("reference") == []


def test_a_nested_group_is_refused_and_changes_nothing() -> None:
    unit = SPECS["paged-p4-oracle"].build()
    coverage: Counter[str] = Counter()
    events = [ev.Alloc(pages=1), ev.GroupBegin(), ev.Free(pick=0, keep=0, via=0), ev.GroupBegin(), ev.GroupEnd()]
    assert run_events(unit, contract_for("reference", "allocator"), events, coverage) is None
    assert coverage["forbidden:free_group_begin:refused"] == 1


def test_a_stale_reuse_is_refused_and_changes_nothing() -> None:
    unit = SPECS["rows"].build()
    events = [ev.RowAlloc((None, None)), ev.RowAllocStale(0, committed=True, fresh=1), ev.RowAlloc((None,))]
    coverage: Counter[str] = Counter()
    assert run_events(unit, contract_for("reference", "rows"), events, coverage) is None
    assert coverage["rows.alloc:stale-refused"] == 1


def test_the_layout_judge_names_the_position_that_breaks_it() -> None:
    # Page size 4: prefix of 6 ends at slot 21 (page 5); positions 6, 7 continue it, 8 starts a new page.
    assert extend_layout(4, 6, 21, [22, 23, 36, 37]) == ([9], None)
    assert (
        extend_layout(4, 6, 21, [22, 24, 36, 37])[1]
        == "position 7 is on the prefix's open page: slot 23 expected, got 24"
    )
    assert "starts a page" in str(extend_layout(4, 6, 21, [22, 23, 37, 38])[1])
    assert "follows slot 36" in str(extend_layout(4, 6, 21, [22, 23, 36, 40])[1])
    assert extend_layout(1, 0, -1, [5, 3]) == ([5, 3], None)


@pytest.mark.parametrize(
    "cls", [ReqToTokenPool, DecodeReqToTokenPool, TokenToKVPoolAllocator, PagedTokenToKVPoolAllocator]
)
def test_the_inventory_covers_every_public_member(cls: type) -> None:
    assert undocumented(cls) == []


def test_the_docs_list_every_inventory_member() -> None:
    docs = (Path(__file__).resolve().parents[2] / "docs" / "components.md").read_text()
    missing = sorted({member for entries in INVENTORY.values() for member in entries if f"| `{member}` |" not in docs})
    assert missing == []


def test_every_driven_inventory_entry_names_an_event() -> None:
    names = {name for name in dir(ev) if isinstance(getattr(ev, name), type)}
    for entries in INVENTORY.values():
        for member, how in entries.items():
            first = how.split(" ")[0].rstrip(",;")
            assert how.startswith(("not driven:", "observed", "registered")) or first in names, (member, how)


def test_contracts_keep_every_strict_promise_unless_triaged() -> None:
    for target in ("reference", "0.5.23", "0.5.18"):
        assert contract_for(target, "rows", strict=True) == RowContract()
        strict = contract_for(target, "allocator", strict=True)
        assert isinstance(strict, AllocContract) and strict.refuses_nested_group and strict.refuses_atomically
        assert all(target in line for line in differences(target))


def test_cli_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--unit", "rows", "--examples", "5"]) == 0
    out = capsys.readouterr().out
    assert "seed 0" in out and "rows " in out
    assert main(["--unit", "paged-p4-oracle", "--examples", "50", "--strict"]) == 0
    assert main(["--unit", "no-such-unit"]) == 2
    assert main(["--examples", "x"]) == 2
