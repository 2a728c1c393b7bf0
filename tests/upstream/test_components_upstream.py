"""The component lockstep on upstream SGLang's own row pool and token allocators, for the installed version:
fault-free runs find nothing and reach every refusal path the version can take; each kind of planted bug, patched
into a freshly built unit in-process, is found with a short counterexample; each triaged difference of this version
is found once its strict promise is asked for; every public member of a driven class is in the inventory.

Runs only in a sglang venv (`make sglang-test`); the main venv deliberately lacks sglang.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

if importlib.util.find_spec("sglang") is None:
    pytest.skip(
        "needs upstream sglang, which the main venv deliberately lacks; run `make sglang-test`",
        allow_module_level=True,
    )

from fuzz.components.cli import main
from fuzz.components.contract import DIFFERENCES, contract_for
from fuzz.components.inventory import undocumented
from fuzz.components.search import UnitResult, fuzz_unit, target_key, unavailable_units
from impl.upstream.components import upstream_units
from impl.upstream.dialects import capabilities, paged_naive_path, supported_version
from tests import component_faults as faults

VERSION = supported_version()
KEY = target_key("sglang")  # the release whose contract judges this sglang
SPECS = {spec.name: spec for spec in upstream_units()}
BACKENDS = ["torch", "triton"] if paged_naive_path() else ["triton"]
# Whether a paged kernel called short of pages reads past the free list here (its contract says so).
KERNEL_READS_PAST = not contract_for(KEY, "allocator").kernel_reads_within_free_list
PAGED = f"paged-p4-{BACKENDS[0]}"
EXAMPLES, HUNT_EXAMPLES = 60, 300
MAX_COUNTEREXAMPLE = 6  # events in a planted bug's shrunk counterexample
ROOT = Path(__file__).resolve().parents[2]


def fuzz(name: str, examples: int = EXAMPLES, **kwargs: Any) -> UnitResult:
    return fuzz_unit(SPECS[name], "sglang", examples, seed=0, **kwargs)


def alloc_zero_takes_all_0518(raw: Any) -> None:
    """0.5.18's `alloc` without its need-0 branch: when every request reuses its row, `free_slots[-0:]` is the
    whole list, and every free row is taken."""
    original = raw.alloc

    def alloc(reqs: list[Any]) -> Any:
        if any(req.req_pool_idx is None for req in reqs):
            return original(reqs)
        del raw.free_slots[-0:]
        return [req.req_pool_idx for req in reqs]

    raw.alloc = alloc


@pytest.mark.parametrize("name", sorted(SPECS))
def test_fault_free_units_find_nothing(name: str) -> None:
    result = fuzz(name)
    assert result.failure is None, result.line("sglang")
    assert result.steps > 5 * EXAMPLES, "the test cases ran almost no events"


def _paths(name: str) -> set[str]:
    """The refusal paths a unit must reach: 0.5.18's paged kernels are never called short (they would read past
    the free list), so there its extend and decode refusals are the calls the fuzzer skipped."""
    if name == "rows":
        rows_paths = {"rows.alloc:None", "rows.alloc:stale-refused", "rows.free:rowless-refused"}
        return rows_paths | ({"alloc_rows:None"} if capabilities().alloc_rows else set())
    if name.startswith("token"):
        return {"alloc:None", "alloc_extend-as-alloc:None", "alloc_decode-as-alloc:None"}
    if KERNEL_READS_PAST:
        return {"alloc:None", "skipped:short-kernel-call"}
    return {"alloc:None", "alloc_extend:None", "alloc_decode:None", "forbidden:free_segment:refused"}


@pytest.mark.parametrize("name", ["rows", "token-p1", PAGED, f"paged-p16-{BACKENDS[-1]}-sort"])
def test_every_refusal_path_is_reached(name: str) -> None:
    coverage = fuzz(name, 150).coverage
    assert {path for path in _paths(name) if coverage[path] == 0} == set()


PLANTS = [
    ("token-p1", faults.hands_out_again),
    (PAGED, faults.hands_out_again),
    (f"paged-p16-{BACKENDS[-1]}", faults.drops_a_free),
    ("token-p1", faults.refusal_takes_a_page),
    (PAGED, faults.refusal_takes_a_page),
    *((f"paged-p4-{backend}", faults.upstream_extend_offsets_from_head) for backend in BACKENDS),
    ("token-p1", faults.group_end_drops_pending),
    (f"{PAGED}-sort", faults.group_end_drops_pending),
    ("rows", faults.alloc_rows_zero_takes_all if capabilities().alloc_rows else alloc_zero_takes_all_0518),
    ("rows", faults.generation_not_bumped),
    ("token-p1-sort", faults.merge_loses_a_page),
    (f"{PAGED}-sort", faults.merge_loses_a_page),
]


@pytest.mark.parametrize(("name", "plant"), PLANTS, ids=[f"{n}-{p.__name__}" for n, p in PLANTS])
def test_each_planted_bug_is_found_and_shrunk(name: str, plant: faults.Plant) -> None:
    result = fuzz(name, HUNT_EXAMPLES, patch=plant)
    assert result.failure is not None, f"{plant.__name__} on {name} went unnoticed"
    assert result.failure.step < MAX_COUNTEREXAMPLE, result.counterexample()
    assert result.failure.kind != "crash", result.line("sglang")


# Each triaged difference of this version that can be judged in-process, and the unit that shows it.
IN_PROCESS = [
    (flag, "rows" if flag in ("generation_survives_clear", "refuses_stale_reuse") else PAGED)
    for version, flag in DIFFERENCES
    if version == KEY and flag != "kernel_reads_within_free_list"
]


@pytest.mark.parametrize(("flag", "name"), IN_PROCESS)
def test_each_difference_is_found_by_its_strict_promise(flag: str, name: str) -> None:
    own = contract_for(KEY, SPECS[name].kind)
    assert getattr(own, flag) is False, "a difference the version's own contract does not relax"
    result = fuzz(name, HUNT_EXAMPLES, contract=dataclasses.replace(own, **{flag: True}))
    assert result.failure is not None, f"{flag} on {VERSION}: the strict promise found nothing"
    assert result.failure.step < MAX_COUNTEREXAMPLE, result.counterexample()


SHORT_KERNEL_CALL = """
from impl.upstream.components import UpstreamAllocator
from impl.upstream.dialects import load_dialect
unit = UpstreamAllocator(load_dialect(), 4, False, True)
assert unit.alloc(32) is not None  # every page handed out: the free list is an empty tensor, data_ptr() 0
print("alloc_extend:", unit.alloc_extend([0], [5], [-1], False))
"""


def test_a_short_kernel_call_reads_past_the_free_list_where_the_contract_says() -> None:
    # In a subprocess: where the kernel runs before the capacity check it loads from address 0 and the interpreter
    # dies of it.
    done = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", SHORT_KERNEL_CALL], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    if KERNEL_READS_PAST:
        assert done.returncode == -signal.SIGSEGV, done.stdout + done.stderr[-2000:]
    else:
        assert done.returncode == 0, done.stderr[-2000:]
        assert "alloc_extend: None" in done.stdout


@pytest.mark.parametrize("name", ["rows", "token-p1", PAGED])
def test_the_inventory_covers_every_public_member(name: str) -> None:
    assert undocumented(type(SPECS[name].build().raw)) == []


def test_the_decode_row_pool_is_named_with_why_it_is_not_driven() -> None:
    (line,) = unavailable_units("sglang")
    assert line.startswith("decode-rows: ")
    assert "einops" in line or "no component adapter" in line


def test_cli_on_upstream(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--target", "sglang", "--unit", "rows", "--examples", "5"]) == 0
    out = capsys.readouterr().out
    assert f"({VERSION})" in out and "not driven: decode-rows" in out
