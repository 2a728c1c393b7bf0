"""The fault-point check of `verify-upstream`: the walker on every upstream shape with fault plans in a share of
its steps (`fuzz.fault_plans`), so that calls inside upstream fail where they can fail, and each failure is held
to its contract (refused, the pool left as it was).

A failure a triaged finding explains (`upstream/findings.json`, by its kind and id or a symptom of its trigger)
is counted as known and the next seed walks; any other is a mismatch, its trace written for replay. The report
says, per shape, how often each point was reached and failed, and which findings the runs met; a point the
target installs that no run failed is a mismatch too (a configured point never reached is a hole in the run).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from fuzz.fault_plans import PointCounts
from fuzz.upstream_findings import Finding, Report, fuzz_excluded, known
from fuzz.walker.walk import Walker
from model.trace import Trace, dump

FAULT_RATE = 5  # percent of the drawn steps that carry a plan
FAULT_STEPS = 600  # per shape
WALK_STEPS = 60  # per seed: a seed's run ends at its first failure, known or not


def check_fault_points(
    pools: dict[str, dict[str, Any]], findings: list[Finding], version: str, out: Path, report: Report
) -> PointCounts:
    """Walk every shape with fault plans; returns what the runs reached, over all shapes."""
    report.say(f"fault points on sglang {version} ({FAULT_RATE}% of the steps planned, {FAULT_STEPS} steps a shape):")
    # The release's other findings stay out of the walks, as in the lockstep runs; the points are all drawn.
    exclude = frozenset(name for name in fuzz_excluded(findings, version) if not name.startswith("fault:"))
    total = PointCounts()
    for name, config in pools.items():
        total.merge(_walk_shape(name, {**config, "fault_rate": FAULT_RATE}, findings, version, exclude, out, report))
    for point in total.never_fired():
        report.mismatch(f"fault point {point}: installed on sglang {version}, but no run failed it")
    return total


def _walk_shape(
    name: str,
    config: dict[str, Any],
    findings: list[Finding],
    version: str,
    exclude: frozenset[str],
    out: Path,
    report: Report,
) -> PointCounts:
    counts, met = PointCounts(), Counter[str]()
    steps = seed = 0
    while steps < FAULT_STEPS:
        result = Walker(config, seed, exclude).run(steps=min(WALK_STEPS, FAULT_STEPS - steps))
        steps, seed = steps + result.steps, seed + 1
        counts.merge(result.points)
        if result.failure is None or result.trace is None:
            continue
        finding = known(findings, result.failure, version, result.trace)
        if finding is None:
            path = out / f"{name.replace('@', '-')}-faults-seed{seed - 1}.json"
            dump(Trace(config, seed - 1, result.trace.steps, result.failure, {"source": "walker"}), path)
            failure = result.failure
            report.mismatch(f"{name}: fault points, seed {seed - 1}: {failure.kind} {failure.id}: ({path})")
            break
        met[finding.id] += 1
    known_line = ", ".join(f"{fid} x{n}" for fid, n in sorted(met.items())) or "none"
    report.say(f"  {name}: {steps} steps, {seed} seeds; {counts.describe()}; known findings met: {known_line}")
    return counts
