"""Search each unit for a failing event list with Hypothesis, shrink what it finds, and count what it reached.

`fuzz_unit` runs up to `examples` test cases on fresh units; a failing case is shrunk (Hypothesis' own
shrinker, through `hypothesis.find`) and re-run once to report its failure. `run_components` does that for every
unit of a target and returns one line per failing unit, for callers such as `verify-upstream`.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, Phase, Verbosity, find, settings
from hypothesis.errors import NoSuchExample

from fuzz.components.contract import AllocContract, RowContract, contract_for
from fuzz.components.events import Event
from fuzz.components.loop import Failure, run_events
from fuzz.components.strategies import events_for
from impl.components import UnitSpec, reference_units

DEFAULT_EXAMPLES = 100
Patch = Callable[[Any], None]  # plants a fault into a freshly built unit's real object (tests only)


@dataclass
class UnitResult:
    """What fuzzing one unit gave: the shrunk counterexample and its failure, or none; and the work done."""

    name: str
    failure: Failure | None = None
    events: list[Event] = field(default_factory=list)
    cases: int = 0
    steps: int = 0
    seconds: float = 0.0
    coverage: Counter[str] = field(default_factory=Counter)

    def counterexample(self) -> str:
        """The failing events up to the failing one, one per line, numbered."""
        if self.failure is None:
            return ""
        return "\n".join(f"  {i}: {event}" for i, event in enumerate(self.events[: self.failure.step + 1]))

    def line(self, target: str) -> str:
        """One line naming the failure and its counterexample (empty when nothing was found)."""
        if self.failure is None:
            return ""
        events = "; ".join(str(event) for event in self.events[: self.failure.step + 1])
        f = self.failure
        return f"components {target} {self.name}: {f.kind} at step {f.step}: {f.message} [{events}]"


def target_key(target: str) -> str:
    """The contract key of a target: 'reference', or for 'sglang' the installed version where a contract names it,
    else the closest release at or before it (a source checkout is judged by the release it grew from)."""
    if target == "reference":
        return "reference"
    from fuzz.components.contract import CONTRACTS
    from impl.upstream.dialects import supported_version
    from impl.upstream.releases import closest_release

    version = supported_version()
    return version if version in CONTRACTS else closest_release(version).version


def units_for(target: str) -> list[UnitSpec]:
    """Every unit of `target` ('reference' or 'sglang', the installed version)."""
    if target == "reference":
        return reference_units()
    from impl.upstream.components import upstream_units

    return upstream_units()


def hypothesis_settings(examples: int) -> settings:
    return settings(
        max_examples=examples,
        database=None,
        deadline=None,
        phases=(Phase.generate, Phase.shrink),
        suppress_health_check=list(HealthCheck),
        verbosity=Verbosity.quiet,
    )


def fuzz_unit(
    spec: UnitSpec,
    target: str,
    examples: int,
    seed: int,
    strict: bool = False,
    patch: Patch | None = None,
    contract: RowContract | AllocContract | None = None,
) -> UnitResult:
    """Fuzz one unit for up to `examples` test cases from `seed`, judged by its target's contract (the strict one
    with `strict`, or `contract` when given); `patch` plants a fault into every unit built."""
    contract = contract or contract_for(target_key(target), spec.kind, strict)
    result = UnitResult(spec.name)

    def build() -> Any:
        unit = spec.build()
        if patch is not None:
            patch(unit.raw)
        return unit

    def fails(events: list[Event]) -> bool:
        result.cases += 1
        return run_events(build(), contract, events, result.coverage) is not None

    started = time.perf_counter()
    try:
        result.events = find(
            events_for(build(), spec.kind, contract),
            fails,
            settings=hypothesis_settings(examples),
            random=random.Random(seed),
        )
    except NoSuchExample:
        pass
    else:
        result.failure = run_events(build(), contract, result.events, Counter())
    result.seconds = time.perf_counter() - started
    result.steps = result.coverage["steps"]
    return result


def unavailable_units(target: str) -> list[str]:
    """The units `target` has but cannot build here, each with the reason (upstream's `DecodeReqToTokenPool`
    needs `einops`)."""
    if target == "reference":
        return []
    from impl.upstream.components import decode_pool_problem

    problem = decode_pool_problem() or "DecodeReqToTokenPool imports here, but no component adapter drives it yet"
    return [f"decode-rows: {problem}"]


def run_components(
    target: str, budget: int = DEFAULT_EXAMPLES, seed: int = 0, strict: bool = False, units: list[str] | None = None
) -> list[str]:
    """Fuzz every unit of `target` (or those named in `units`) with `budget` test cases each; one line per unit
    that failed, empty when nothing was found."""
    specs = [spec for spec in units_for(target) if units is None or spec.name in units]
    results = [fuzz_unit(spec, target, budget, seed, strict) for spec in specs]
    return [result.line(target) for result in results if result.failure is not None]
