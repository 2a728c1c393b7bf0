"""`python -m fuzz verify-upstream`: the harness against the installed upstream SGLang (run in a sglang venv).

Five checks, each against `upstream/findings.json`, the triaged divergences upstream is known to show:
the prover's counterexample traces replayed on the upstream target; the lockstep `ci` profile on every pool
shape the target supports (a known finding the fuzzer hits is reported as known, and the run goes on without
the ops that trigger it, so that it cannot mask others); every finding's replay file (it must fail as recorded
on its versions and pass on the others); and a differential run of the same traces on the reference and on
upstream, whose first observable difference per trace becomes a table row with a replay file; and the walker on
every shape with fault plans (`fuzz.upstream_faults`: calls inside upstream failed on purpose, each failure held
to its contract, the points reached and failed reported per shape).

Exit status: 0 everything matches the findings; 1 something does not (each on its own line, `MISMATCH`);
2 sglang is not installed here, or the findings file is not valid (`load_findings`: one line naming the field);
70 kvlife itself failed.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from fuzz.lockstep import Lockstep
from fuzz.profiles import POOLS, PROFILES
from fuzz.replay import replay
from fuzz.run import run
from fuzz.targets import installed_sglang, retarget, sglang_problem, target_ops, target_problem
from fuzz.upstream_faults import check_fault_points
from fuzz.upstream_findings import (
    Finding,
    FindingsError,
    Report,
    is_release,
    known,
    known_still_drawn,
    load_findings,
)
from model.trace import (
    Failure,
    Step,
    Trace,
    TraceError,
    dump,
    load,
    write_atomically,
)
from properties.abstraction import observe

STEPS_PER_RANDOM_TRACE = 30
MIN_STEPS = 10_000  # lockstep steps per pool shape, unless `--cases` bounds the run
OUTCOMES = "findings-outcomes.json"  # under --out/VERSION: each finding's replay outcome there
WHAT_CHARS = 160  # of a differential row's description in the printed table; its replay file's meta has it whole


def upstream_config(config: dict[str, Any]) -> dict[str, Any]:
    """The config on the upstream target, without faults (they exist only in the reference pool); a paged pool
    runs upstream's Triton kernels (interpreted) where the version has no naive torch path."""
    return retarget({**config, "faults": [], "kernel_backend": "torch"}, "sglang")


def upstream_trace(trace: Trace) -> Trace:
    """The trace on the upstream target (`upstream_config`)."""
    return Trace(upstream_config(trace.config), trace.seed, trace.steps, trace.failure, trace.meta)


def finding_outcomes(findings: list[Finding]) -> dict[str, Failure | None]:
    """Each finding's replay on the installed sglang: the failure it shows, or None where it passes."""
    return {finding.id: replay(upstream_trace(load(finding.replay))).failure for finding in findings}


def check_findings(findings: list[Finding], version: str, report: Report) -> dict[str, Failure | None]:
    """Each finding's replay fails as recorded on its releases, and passes on the others (or shows there another
    finding of that release: one replay can reach two bugs); on a version no release names, a finding that
    reproduces is reported as known and one that passes as passing. Returns the outcomes."""
    report.say(f"findings on sglang {version}:")
    outcomes = finding_outcomes(findings)
    for finding in findings:
        failure = outcomes[finding.id]
        seen = "passes" if failure is None else f"step {failure.step}: {failure.kind} {failure.id}"
        same = failure is not None and (failure.kind, failure.id) == (finding.expect_kind, finding.expect_id)
        report.outcomes[finding.id] = "passes" if failure is None else "reproduces" if same else seen
        line, matched = _finding_verdict(finding, failure, seen, findings, version)
        report.say(f"  {line}") if matched else report.mismatch(line)
    return outcomes


def _finding_verdict(
    finding: Finding, failure: Failure | None, seen: str, findings: list[Finding], version: str
) -> tuple[str, bool]:
    """What one finding's replay on `version` says, and whether that matches the manifest."""
    trace = load(finding.replay)
    other = known([f for f in findings if f is not finding], failure, version, trace)
    if not is_release(version):
        if finding.matches(failure, version):
            return f"{finding.id}: reproduces, known (sglang {version} is no release the manifest names)", True
        which = f", which is {other.id}, known" if other is not None else ""
        line = f"{finding.id}: {seen}{which} (sglang {version} is no release the manifest names)"
        return line, failure is None or other is not None
    if version not in finding.versions:
        elsewhere = f"{finding.id}: not on {version} ({', '.join(finding.versions)} only); replay {seen}"
        if other is not None:
            return f"{elsewhere}, which is {other.id}, known here", True
        return elsewhere, failure is None
    if finding.matches(failure, version):
        return f"{finding.id}: reproduces ({seen}) [{finding.triage}]", True
    expected = f"{finding.expect_kind} {finding.expect_id}"
    return f"{finding.id}: no longer reproduces: expected {expected}, replay {seen}", False


# -- the prover's traces ----------------------------------------------------------------------------------


def export_prover_traces(out: Path, ops: frozenset[str]) -> tuple[list[Path], list[str]]:
    """Settle the theorems the manifest expects refuted, their searches restricted to `ops` (the target's: a
    trace through an op upstream lacks could not run there), and write their traces to `out`. Also returns the
    theorems that have no refuting trace within those ops."""
    from model.manifest import MANIFEST
    from model.manifest import load as load_manifest
    from model.settle import settle_named, write_trace

    refuted = [name for name, row in load_manifest(MANIFEST).items() if row.outcome == "refuted"]
    for stale in out.glob("*.json"):
        stale.unlink()
    # Outcomes differ from the manifest by design here (a restricted search proves nothing): only the traces count.
    settled = settle_named(refuted, ops=ops)
    paths = sorted(write_trace(s, out) for s in settled if s.trace is not None)
    return paths, [s.theorem.name for s in settled if s.trace is None]


def replay_prover_traces(paths: list[Path], findings: list[Finding], version: str, report: Report) -> None:
    """Each prover trace on the upstream target and on the reference (both without faults): it passes, shows
    upstream what it shows on the reference (the theorem's bad state, reached on upstream's own classes), is a
    known finding, or cannot run there (said why). Only an upstream failure of its own is a mismatch."""
    report.say(f"prover traces on sglang {version}:")
    for path in paths:
        recorded = load(path)
        theorem = recorded.meta.get("theorem", path.stem)
        try:
            failure = replay(upstream_trace(recorded)).failure
        except TraceError as exc:
            report.say(f"  {path.stem}: not replayable upstream: {exc}")
            continue
        on_reference = replay(Trace(reference_config(recorded.config), None, recorded.steps)).failure
        finding = known(findings, failure, version, recorded)
        if failure is None:
            report.say(f"  {path.stem}: passes")
        elif finding is not None:
            report.say(f"  {path.stem}: known {finding.id}")
        elif on_reference is not None and _same(failure, on_reference):
            report.say(
                f"  {path.stem}: as on the reference, step {failure.step}: {failure.kind} {failure.id} "
                f"({theorem}: the bad state on upstream's classes): {_short(failure.message)}"
            )
        else:
            report.mismatch(f"{path.stem}: step {failure.step}: {failure.kind} {failure.id}: {failure.message}")


def reference_config(config: dict[str, Any]) -> dict[str, Any]:
    """The config on the reference without faults: what upstream is compared with."""
    return {**config, "target": "reference", "faults": [], "kernel_backend": "torch"}


def _same(a: Failure, b: Failure) -> bool:
    return (a.step, a.kind, a.id) == (b.step, b.kind, b.id)


def _short(text: str) -> str:
    return text if len(text) <= WHAT_CHARS else text[: WHAT_CHARS - 3] + "..."


# -- lockstep fuzzing -------------------------------------------------------------------------------------


def upstream_pools(device: str = "cpu") -> dict[str, dict[str, Any]]:
    """The pool shapes the upstream target can build here on `device`, as sglang configs (`upstream_config`); a
    radix shape once per tree core the installed sglang has (`shape@core`), the core servers run first. The
    device comes first: probing the installed sglang fixes Triton's mode for it."""
    from impl.upstream.dialects import tree_cores

    configs: dict[str, dict[str, Any]] = {}
    for name, shape in POOLS.items():
        cores = tree_cores(device) if shape["cache"] == "radix" else ()
        on_device = {**shape, "device": device}
        for core in cores or (None,):
            config = upstream_config(on_device if core is None else {**on_device, "tree_core": core})
            configs[name if core is None else f"{name}@{core}"] = config
    return {name: config for name, config in configs.items() if target_problem(config) is None}


def fuzz_pool(
    name: str,
    config: dict[str, Any],
    findings: list[Finding],
    version: str,
    out: Path,
    report: Report,
    cases: int | None = None,
) -> None:
    """The `ci` profile (`cases` test cases where given) on one pool; a known finding drops its ops and the
    run starts again."""
    # Not shrunk: a known finding needs none, and upstream steps slowly (shrinking one took over five minutes);
    # `fuzz run --target sglang` shrinks what turns out new.
    profile = replace(PROFILES["ci"], shrink=False, max_examples=cases or PROFILES["ci"].max_examples)
    exclude: frozenset[str] = frozenset()
    steps, passes = 0, 0
    while True:
        # The first pass is the ci profile itself; without `cases`, further passes (seeded 1, 2, ...: reproducible)
        # run until the shape has taken MIN_STEPS steps.
        # The further passes alternate the exhaustion swarm (the allocation paths' own refusals) with all rules.
        seed = None if passes == 0 else passes
        swarm = "exhaustion" if passes % 2 else "all"
        this = profile if seed is None else replace(profile, derandomize=False)
        result = run(config, this, seed, out, out / "db", swarm=swarm, exclude=exclude)
        rate = result.steps / result.seconds if result.seconds > 0 else 0.0
        dropped = f", without {', '.join(sorted(exclude))}" if exclude else ""
        seeded = "" if seed is None else f", seed {seed}, {swarm} rules"
        report.say(
            f"  {name}{dropped}{seeded}: {result.cases} cases, {result.steps} steps in {result.seconds:.1f} s "
            f"({rate:.0f} steps/s); {_refusal_line(result.corners)}"
        )
        steps, passes = steps + result.steps, passes + 1
        if result.counterexample is None:
            if cases or steps >= MIN_STEPS:
                report.say(f"    {name}: {steps} steps in all")
                return
            continue
        trace = load(result.counterexample)
        finding = known_still_drawn(findings, trace.failure, version, exclude, trace)
        if finding is None:
            report.mismatch(f"{name}: {result.failure_text} ({result.counterexample})")
            return
        report.say(f"    known {finding.id} ({result.counterexample}); again without {', '.join(finding.fuzz_exclude)}")
        exclude |= finding.fuzz_exclude


def _refusal_line(corners: dict[str, int]) -> str:
    """How often the run's batches met the allocation paths' own refusals (rows, slots) and the budget's."""
    own = {
        short: sum(n for c, n in corners.items() if c.startswith(f"allocation path: out of {short}"))
        for short in ("rows", "slots")
    }
    budget = corners.get("pool: out of rows", 0) + corners.get("pool: out of slots", 0)
    return f"upstream refused {own['rows']} short of rows, {own['slots']} short of slots; the budget {budget}"


# -- the component lockstep -----------------------------------------------------------------------------


def check_components(version: str, report: Report, cases: int | None) -> None:
    """Every pool and allocator of the installed version driven directly through its public methods
    (`fuzz.components`), each judged by the version's own contract; the differences that contract excuses are
    printed (each is triaged in docs/upstream-findings.md), and a unit that breaks it is a mismatch."""
    from fuzz.components.cli import refusal_paths
    from fuzz.components.contract import differences
    from fuzz.components.search import DEFAULT_EXAMPLES, fuzz_unit, target_key, unavailable_units, units_for

    report.say(f"component lockstep on sglang {version} (its own contract):")
    for line in unavailable_units("sglang") + differences(target_key("sglang")):
        report.say(f"  not driven: {line}")
    for spec in units_for("sglang"):
        result = fuzz_unit(spec, "sglang", cases or DEFAULT_EXAMPLES, 0)
        report.say(f"  {result.name}: {result.cases} cases, {result.steps} steps; refusals {refusal_paths(result)}")
        if result.failure is not None:
            report.mismatch(f"{result.line('sglang')}: {result.counterexample()}")


# -- the differential run ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Difference:
    """The first step where the reference and upstream differ on one trace."""

    trace: str
    step: int
    call: str
    what: str
    replay: Path | None
    finding: str | None
    policy: bool = False  # two legal choices that differ: not reported, the comparison ends there


def _outcome(lock: Lockstep, step: Step) -> tuple[Failure | None, dict[str, int], Any]:
    failure = lock.step(step.op, step.args)
    return failure, lock.steps[-1].choice, observe(lock.snap)


def _verdict(failure: Failure | None) -> str:
    return "ok" if failure is None else f"{failure.kind} {failure.id}"


def first_difference(name: str, trace: Trace, out: Path, findings: list[Finding], version: str) -> Difference | None:
    """Step the trace on both targets (no faults) until either fails; the first observable difference, with a
    replay file (the trace up to it, on the reference target)."""
    sides = [
        Lockstep(reference_config(trace.config)),
        Lockstep(upstream_config(trace.config)),
    ]
    for index, step in enumerate(trace.steps):
        (ref, ref_choice, ref_obs), (up, up_choice, up_obs) = (_outcome(lock, step) for lock in sides)
        if _verdict(ref) == _verdict(up) and ref is None and ref_choice != up_choice:
            # Both sides chose legally (each side's model judged it), but differently: a difference of policy
            # (which free row, how much of a tie the eviction took). From here the two pools may differ legally.
            return Difference(name, index, _call(step), f"reference {ref_choice}, sglang {up_choice}", None, None, True)
        what = [f"reference {_verdict(ref)}, sglang {_verdict(up)}"] if _verdict(ref) != _verdict(up) else []
        what += [_sides(d) for d in ref_obs.differences(up_obs)]
        if what:
            path = out / f"{name}.json"
            meta = {"source": "differential", "sglang": version, "differs": "; ".join(what)}
            dump(
                Trace(
                    {**trace.config, "target": "reference", "faults": []},
                    trace.seed,
                    trace.steps[: index + 1],
                    None,
                    meta,
                ),
                path,
            )
            hit = known(findings, up, version, Trace(trace.config, trace.seed, trace.steps[: index + 1]))
            return Difference(name, index, _call(step), "; ".join(what), path, hit.id if hit else None)
        if ref is not None:
            return None
    return None


def _sides(difference: str) -> str:
    """An observation difference (written as model vs pool) as reference vs sglang."""
    return difference.replace("model ", "reference ").replace("pool ", "sglang ")


def _call(step: Step) -> str:
    return f"{step.op}(" + ", ".join(f"{k}={v}" for k, v in step.args.items()) + ")"


def shares(total: int, parts: int) -> list[int]:
    """`total` split over `parts` as evenly as whole numbers go, the first parts taking the remainder: `--random`
    fewer than the pool shapes still draws that many traces."""
    share, extra = divmod(total, parts) if parts else (0, 0)
    return [share + (index < extra) for index in range(parts)]


def random_traces(config: dict[str, Any], count: int) -> list[tuple[str, Trace]]:
    """`count` lockstep traces drawn by the fuzzer's rules for the upstream target's ops, run on the reference
    (derandomized: the same count gives the same traces); none for a count of 0."""
    if count <= 0:
        return []
    from hypothesis import HealthCheck, Phase, settings
    from hypothesis.stateful import get_state_machine_test

    from fuzz.machine import Recorder, build_machine

    reference = {**config, "target": "reference", "kernel_backend": "torch"}
    cases: list[list[Step]] = []

    def driver(_: dict[str, Any]) -> Lockstep:
        lock = Lockstep(reference)
        cases.append(lock.steps)
        return lock

    machine = build_machine(Recorder(config, driver=driver))
    test = get_state_machine_test(
        machine,
        settings=settings(
            max_examples=count,
            stateful_step_count=STEPS_PER_RANDOM_TRACE,
            derandomize=True,
            database=None,
            deadline=None,
            phases=(Phase.generate,),
            suppress_health_check=list(HealthCheck),
            print_blob=False,
        ),
    )
    test()
    return [(f"random-{index:04d}", Trace(reference, None, steps)) for index, steps in enumerate(cases) if steps]


def differential(
    traces: list[tuple[str, Trace]], findings: list[Finding], version: str, out: Path, report: Report
) -> list[Difference]:
    """The traces on both targets, a table row for each that differs; a difference upstream shows as no known
    finding is a mismatch. Choices are matched by contract: where both targets choose legally but differently
    (row, page, eviction victim), the comparison of that trace ends there, counted, not reported."""
    ops = target_ops({"target": "sglang"})
    runnable = [(name, trace) for name, trace in traces if _runs_upstream(trace, ops)]
    found = [row for name, trace in runnable if (row := first_difference(name, trace, out, findings, version))]
    rows = [row for row in found if not row.policy]
    report.say(
        f"differential on sglang {version}: {len(runnable)} traces on both targets, {len(rows)} differ, "
        f"{len(found) - len(rows)} part by a legal difference of policy, {len(traces) - len(runnable)} cannot run "
        "upstream"
    )
    if rows:
        report.say(f"  {'trace':<28} {'step':>4}  {'call':<40} {'finding':<20} what differs")
    for row in rows:
        what = _short(row.what)  # all of it: the replay file
        report.say(f"  {row.trace:<28} {row.step:>4}  {row.call:<40} {row.finding or '-':<20} {what}")
        report.say(f"    replay: python -m fuzz replay {row.replay} --target sglang")
        if row.finding is None:
            report.mismatch(f"differential {row.trace} step {row.step}: {row.what}")
    return rows


def _runs_upstream(trace: Trace, ops: frozenset[str]) -> bool:
    return not {s.op for s in trace.steps} - ops and target_problem(upstream_config(trace.config)) is None


# -- the whole check --------------------------------------------------------------------------------------


def verify(findings: list[Finding], version: str, out: Path, random_count: int, cases: int | None = None) -> Report:
    """Every check on the installed version (`cases`: the lockstep runs' test cases, the ci profile's by
    default); `out` keeps the traces, counterexamples and differential replays."""
    report = Report()
    report.say(tree_core_line(version))
    prover, untraced = export_prover_traces(out / "prover", target_ops({**POOLS["chunk-p1"], "target": "sglang"}))
    replay_prover_traces(prover, findings, version, report)
    for name in untraced:
        report.say(f"  {name}: no refuting trace within the upstream target's ops")
    pools = upstream_pools()
    report.say(f"lockstep ci profile on sglang {version}:")
    for name, config in pools.items():
        fuzz_pool(name, config, findings, version, out / "counterexamples", report, cases)
    check_findings(findings, version, report)
    check_components(version, report, cases)
    traces = [(p.stem, load(p)) for p in prover] + [(f.id, load(f.replay)) for f in findings]
    for (name, config), count in zip(pools.items(), shares(random_count, len(pools)), strict=True):
        traces += [(f"{name}-{n}", t) for n, t in random_traces(config, count)]
    differential(traces, findings, version, out / "differential", report)

    check_fault_points(pools, findings, version, out / "faults", report)
    return report


def tree_core_line(version: str) -> str:
    """Which radix tree the installed sglang builds: the tree cores it can name, and why not the Rust one."""
    from impl.upstream.dialects import capabilities

    caps = capabilities()
    if caps.tree_cores:
        fallback = f" (no Rust core: {caps.rust_core_fallback})" if "rust" not in caps.tree_cores else ""
        return f"sglang {version}: radix shapes on tree cores {', '.join(caps.tree_cores)}{fallback}"
    return f"sglang {version}: radix shapes on the one tree its factory builds (no tree core to name)"


def write_outcomes(path: Path, version: str, report: Report) -> None:
    """Each finding's outcome on this sglang, for the findings x release table (`upstream/findings_matrix.py`)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"sglang": version, "release": is_release(version), "mismatches": len(report.problems)}
    write_atomically(path, json.dumps({**doc, "findings": report.outcomes}, indent=1) + "\n")


def _why_not(problem: str | None) -> str:
    """The one line that says why the upstream target cannot run here."""
    if problem is None or "not installed" in problem:
        return (
            "sglang is not installed here; run `make verify-sglang` (or `make sglang-setup`, then "
            ".venv-sglang-VERSION/bin/python -m fuzz verify-upstream)"
        )
    return problem


def cli(findings_path: Path, out: Path, random_count: int, cases: int | None = None) -> int:
    """`python -m fuzz verify-upstream`: run every check, print a summary line, exit 0 iff all match."""
    version = installed_sglang()
    if version is None:
        print(f"verify-upstream: {_why_not(sglang_problem())}", file=sys.stderr)
        return 2
    try:
        findings = load_findings(findings_path)
    except FindingsError as exc:
        print(f"verify-upstream: {exc}", file=sys.stderr)
        return 2
    start = time.perf_counter()
    report = verify(findings, version, out / version, random_count, cases)
    write_outcomes(out / version / OUTCOMES, version, report)
    took = time.perf_counter() - start
    if report.problems:
        print(f"verify-upstream: sglang {version}: {len(report.problems)} mismatches ({took:.0f} s)")
        return 1
    print(f"verify-upstream: sglang {version}: everything matches {findings_path} ({took:.0f} s)")
    return 0
