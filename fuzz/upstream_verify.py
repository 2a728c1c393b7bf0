"""`python -m fuzz verify-upstream`: the harness against the installed upstream SGLang (run in a sglang venv).

Four checks, each against `upstream/findings.json`, the triaged divergences upstream is known to show:
the prover's counterexample traces replayed on the upstream target; the lockstep `ci` profile on every pool
shape the target supports (a known finding the fuzzer hits is reported as known, and the run goes on without
the ops that trigger it, so that it cannot mask others); every finding's replay file (it must fail as recorded
on its versions and pass on the others); and a differential run of the same traces on the reference and on
upstream, whose first observable difference per trace becomes a table row with a replay file.

Exit status: 0 everything matches the findings; 1 something does not (each on its own line, `MISMATCH`);
2 sglang is not installed here, or the findings file is not valid (`load_findings`: one line naming the field);
70 kvlife itself failed.
"""

from __future__ import annotations

import json
import sys
import time
from contextlib import redirect_stdout
from dataclasses import dataclass, field, replace
from io import StringIO
from pathlib import Path
from typing import Any

from fuzz.lockstep import Lockstep, installed_sglang, retarget, target_ops, target_problem
from fuzz.profiles import POOLS, PROFILES
from fuzz.replay import replay
from fuzz.run import run
from model.trace import (
    NAME,
    Failure,
    Rule,
    Step,
    Trace,
    TraceError,
    dump,
    load,
    one_line,
    one_of,
    parse_json,
    read_bounded,
    show,
    step_schema,
)
from properties.abstraction import observe

TRIAGE = ("upstream-bug", "model-wrong", "contract-difference")
ROOT = Path(__file__).resolve().parents[1]  # a finding's replay file must stay inside it
STEPS_PER_RANDOM_TRACE = 30
WHAT_CHARS = 160  # of a differential row's description in the printed table; its replay file's meta has it whole


class FindingsError(ValueError):
    """The findings file is not valid; the message says why, on one line."""

    def __init__(self, message: str) -> None:
        super().__init__(one_line(message))


@dataclass(frozen=True)
class Finding:
    """One triaged divergence: where it applies, where upstream it comes from, and how its replay fails."""

    id: str
    versions: tuple[str, ...]
    triage: str
    upstream: str
    summary: str
    replay: Path
    expect_kind: str
    expect_id: str
    fuzz_exclude: frozenset[str] = frozenset()

    def matches(self, failure: Failure | None, version: str) -> bool:
        """Whether `failure`, seen on `version`, is this finding."""
        return (
            failure is not None
            and version in self.versions
            and (failure.kind, failure.id) == (self.expect_kind, self.expect_id)
        )


@dataclass
class Report:
    """What a verification printed, and what did not match (each a one-line `MISMATCH`)."""

    lines: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def say(self, line: str) -> None:
        self.lines.append(line)
        print(line, flush=True)

    def mismatch(self, line: str) -> None:
        self.problems.append(line)
        self.say(f"  MISMATCH {line}")


# -- the findings manifest -------------------------------------------------------------------------------


MAX_FINDINGS_BYTES = 1 << 20
MAX_FINDINGS = 1000
MAX_PROSE_CHARS = 4096


def _names(value: Any) -> bool:
    return isinstance(value, list) and len(value) <= 100 and all(NAME.ok(v) for v in value)


def _expect(value: Any) -> bool:
    return isinstance(value, dict) and set(value) == {"kind", "id"} and all(NAME.ok(v) for v in value.values())


PROSE = Rule(
    f"a string of at most {MAX_PROSE_CHARS} characters", lambda v: isinstance(v, str) and len(v) <= MAX_PROSE_CHARS
)
# Each key of a findings entry: its rule, and its value when absent (None: required).
FINDING_FIELDS: dict[str, tuple[Rule, Any]] = {
    "id": (NAME, None),
    "versions": (Rule("a list of version strings", _names), None),
    "triage": (one_of(*TRIAGE), None),
    "upstream": (PROSE, None),
    "summary": (PROSE, None),
    "replay": (NAME, None),
    "expect": (Rule('{"kind": NAME, "id": NAME}', _expect), None),
    "fuzz_exclude": (Rule("a list of op names", _names), []),
}
FINDING_KEYS = tuple(FINDING_FIELDS)


def load_findings(path: Path) -> list[Finding]:
    """Read and check the manifest with the trace loader's discipline (bounded read, strict JSON, every field's
    type; each replay file inside the repository and a valid trace); raises `FindingsError` with a one-line reason."""
    try:
        doc = parse_json(read_bounded(path, MAX_FINDINGS_BYTES))
    except TraceError as exc:
        raise FindingsError(f"cannot read findings {one_line(str(path))}: {exc}") from None
    entries = doc.get("findings") if isinstance(doc, dict) else None
    if not isinstance(entries, list) or len(entries) > MAX_FINDINGS:
        raise FindingsError(f"findings {one_line(str(path))}: `findings` must be a list of at most {MAX_FINDINGS}")
    extra = [key for key in doc if key not in ("about", "findings")]
    if extra:
        raise FindingsError(f"findings {one_line(str(path))}: unexpected key {show(extra[0])} (known: about, findings)")
    return [_finding(index, entry) for index, entry in enumerate(entries)]


def _finding(index: int, entry: Any) -> Finding:
    if not isinstance(entry, dict):
        raise FindingsError(f"finding {index} must be an object, got {show(entry)}")
    where = f"finding {show(entry.get('id'))}"
    extra = [key for key in entry if key not in FINDING_KEYS]
    if extra:
        raise FindingsError(f"{where}: unexpected key {show(extra[0])} (known: {', '.join(FINDING_KEYS)})")
    for key, (rule, default) in FINDING_FIELDS.items():
        value = entry.get(key, default)
        if not rule.ok(value):
            raise FindingsError(f"{where} lacks or mistypes {key}: {key} must be {rule.what}, got {show(value)}")
    where = f"finding {entry['id']}"
    if not set(entry.get("fuzz_exclude", [])) <= set(step_schema()):
        raise FindingsError(f"{where}: fuzz_exclude names an op kvlife does not have: {show(entry['fuzz_exclude'])}")
    return Finding(
        id=entry["id"],
        versions=tuple(entry["versions"]),
        triage=entry["triage"],
        upstream=entry["upstream"],
        summary=entry["summary"],
        replay=_replay_file(where, entry["replay"]),
        expect_kind=entry["expect"]["kind"],
        expect_id=entry["expect"]["id"],
        fuzz_exclude=frozenset(entry.get("fuzz_exclude", [])),
    )


def _replay_file(where: str, replay_path: Any) -> Path:
    """A finding's replay file: a relative path that stays inside the repository (links resolved), holding a
    valid trace."""
    if Path(replay_path).is_absolute():
        raise FindingsError(f"{where}: replay must be a path relative to the repository, got {show(replay_path)}")
    path = (ROOT / replay_path).resolve()
    if not path.is_relative_to(ROOT):
        raise FindingsError(f"{where}: replay file {show(replay_path)} is outside the repository")
    if not path.is_file():
        raise FindingsError(f"{where}: replay file {one_line(str(path))} does not exist")
    try:
        load(path)
    except TraceError as exc:
        raise FindingsError(f"{where}: replay file {show(replay_path)} is not a valid trace: {exc}") from None
    return path


def known(findings: list[Finding], failure: Failure | None, version: str) -> Finding | None:
    """The finding `failure` on `version` is, or None."""
    return next((f for f in findings if f.matches(failure, version)), None)


def upstream_config(config: dict[str, Any]) -> dict[str, Any]:
    """The config on the upstream target, without faults (they exist only in the reference pool); a paged pool
    runs upstream's Triton kernels (interpreted) where the version has no naive torch path."""
    return retarget({**config, "faults": [], "kernel_backend": "torch"}, "sglang")


def upstream_trace(trace: Trace) -> Trace:
    """The trace on the upstream target (`upstream_config`)."""
    return Trace(upstream_config(trace.config), trace.seed, trace.steps, trace.failure, trace.meta)


def check_findings(findings: list[Finding], version: str, report: Report) -> None:
    """Each finding's replay fails as recorded on its versions, and passes on the others."""
    report.say(f"findings on sglang {version}:")
    for finding in findings:
        result = replay(upstream_trace(load(finding.replay)))
        failure = result.failure
        seen = "passes" if failure is None else f"step {failure.step}: {failure.kind} {failure.id}"
        elsewhere = f"{finding.id}: not on {version} ({', '.join(finding.versions)} only); replay {seen}"
        if version not in finding.versions and failure is None:
            report.say(f"  {elsewhere}")
        elif version not in finding.versions:
            report.mismatch(elsewhere)
        elif finding.matches(failure, version):
            report.say(f"  {finding.id}: reproduces ({seen}) [{finding.triage}]")
        else:
            report.mismatch(
                f"{finding.id}: no longer reproduces: expected {finding.expect_kind} {finding.expect_id}, replay {seen}"
            )


# -- the prover's traces ----------------------------------------------------------------------------------


def export_prover_traces(out: Path, ops: frozenset[str]) -> tuple[list[Path], list[str]]:
    """Settle the theorems the manifest expects refuted, their searches restricted to `ops` (the target's: a
    trace through an op upstream lacks could not run there), and write their traces to `out`. Also returns the
    theorems that have no refuting trace within those ops."""
    from model.__main__ import MANIFEST
    from model.__main__ import main as prove
    from model.theorems import searching_only

    refuted = [
        name for name, want in json.loads(MANIFEST.read_text())["theorems"].items() if want.get("outcome") == "refuted"
    ]
    for stale in out.glob("*.json"):
        stale.unlink()
    argv = ["prove", "--export-traces", str(out)] + [arg for name in refuted for arg in ("--only", name)]
    with redirect_stdout(StringIO()), searching_only(ops):
        prove(argv)  # outcomes differ from the manifest by design here: only the traces are wanted
    paths = sorted(out.glob("*.json"))
    theorems = {load(path).meta.get("theorem") for path in paths}
    return paths, [name for name in refuted if name not in theorems]


def replay_prover_traces(paths: list[Path], findings: list[Finding], version: str, report: Report) -> None:
    """Each prover trace on the upstream target: it passes, is a known finding, or cannot run there (said why)."""
    report.say(f"prover traces on sglang {version}:")
    for path in paths:
        trace = upstream_trace(load(path))
        try:
            failure = replay(trace).failure
        except TraceError as exc:
            report.say(f"  {path.stem}: not replayable upstream: {exc}")
            continue
        finding = known(findings, failure, version)
        if failure is None:
            report.say(f"  {path.stem}: passes")
        elif finding is not None:
            report.say(f"  {path.stem}: known {finding.id}")
        else:
            report.mismatch(f"{path.stem}: step {failure.step}: {failure.kind} {failure.id}: {failure.message}")


# -- lockstep fuzzing -------------------------------------------------------------------------------------


def upstream_pools() -> dict[str, dict[str, Any]]:
    """The pool shapes the upstream target can build here, as sglang configs (`upstream_config`)."""
    configs = {name: upstream_config(shape) for name, shape in POOLS.items()}
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
    while True:
        result = run(config, profile, None, out, out / "db", exclude=exclude)
        rate = result.steps / result.seconds if result.seconds > 0 else 0.0
        dropped = f", without {', '.join(sorted(exclude))}" if exclude else ""
        report.say(
            f"  {name}{dropped}: {result.cases} cases, {result.steps} steps in {result.seconds:.1f} s "
            f"({rate:.0f} steps/s)"
        )
        if result.counterexample is None:
            return
        trace = load(result.counterexample)
        finding = known(findings, trace.failure, version)
        if finding is None or not finding.fuzz_exclude or finding.fuzz_exclude <= exclude:
            report.mismatch(f"{name}: {result.failure_text} ({result.counterexample})")
            return
        report.say(f"    known {finding.id} ({result.counterexample}); again without {', '.join(finding.fuzz_exclude)}")
        exclude |= finding.fuzz_exclude


# -- the differential run ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Difference:
    """The first step where the reference and upstream differ on one trace."""

    trace: str
    step: int
    call: str
    what: str
    replay: Path
    finding: str | None


def _outcome(lock: Lockstep, step: Step) -> tuple[Failure | None, dict[str, int], Any]:
    failure = lock.step(step.op, step.args)
    return failure, lock.steps[-1].choice, observe(lock.snap)


def _verdict(failure: Failure | None) -> str:
    return "ok" if failure is None else f"{failure.kind} {failure.id}"


def first_difference(name: str, trace: Trace, out: Path, findings: list[Finding], version: str) -> Difference | None:
    """Step the trace on both targets (no faults) until either fails; the first observable difference, with a
    replay file (the trace up to it, on the reference target)."""
    sides = [
        Lockstep({**trace.config, "target": "reference", "faults": [], "kernel_backend": "torch"}),
        Lockstep(upstream_config(trace.config)),
    ]
    for index, step in enumerate(trace.steps):
        (ref, ref_choice, ref_obs), (up, up_choice, up_obs) = (_outcome(lock, step) for lock in sides)
        what = [f"reference {_verdict(ref)}, sglang {_verdict(up)}"] if _verdict(ref) != _verdict(up) else []
        if ref_choice != up_choice:
            what.append(f"choice: reference {ref_choice}, sglang {up_choice}")
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
            hit = known(findings, up, version)
            return Difference(name, index, _call(step), "; ".join(what), path, hit.id if hit else None)
        if ref is not None:
            return None
    return None


def _sides(difference: str) -> str:
    """An observation difference (written as model vs pool) as reference vs sglang."""
    return difference.replace("model ", "reference ").replace("pool ", "sglang ")


def _call(step: Step) -> str:
    return f"{step.op}(" + ", ".join(f"{k}={v}" for k, v in step.args.items()) + ")"


def random_traces(config: dict[str, Any], count: int) -> list[tuple[str, Trace]]:
    """`count` lockstep traces drawn by the fuzzer's rules for the upstream target's ops, run on the reference
    (derandomized: the same count gives the same traces)."""
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
    finding is a mismatch."""
    ops = target_ops({"target": "sglang"})
    runnable = [(name, trace) for name, trace in traces if _runs_upstream(trace, ops)]
    rows = [row for name, trace in runnable if (row := first_difference(name, trace, out, findings, version))]
    report.say(
        f"differential on sglang {version}: {len(runnable)} traces on both targets, {len(rows)} differ, "
        f"{len(traces) - len(runnable)} cannot run upstream"
    )
    if rows:
        report.say(f"  {'trace':<28} {'step':>4}  {'call':<40} {'finding':<20} what differs")
    for row in rows:
        what = row.what if len(row.what) <= WHAT_CHARS else row.what[: WHAT_CHARS - 3] + "..."  # all of it: the file
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
    prover, untraced = export_prover_traces(out / "prover", target_ops({**POOLS["chunk-p1"], "target": "sglang"}))
    replay_prover_traces(prover, findings, version, report)
    for name in untraced:
        report.say(f"  {name}: no refuting trace within the upstream target's ops")
    pools = upstream_pools()
    report.say(f"lockstep ci profile on sglang {version}:")
    for name, config in pools.items():
        fuzz_pool(name, config, findings, version, out / "counterexamples", report, cases)
    check_findings(findings, version, report)
    traces = [(p.stem, load(p)) for p in prover] + [(f.id, load(f.replay)) for f in findings]
    for name, config in pools.items():
        traces += [(f"{name}-{n}", t) for n, t in random_traces(config, random_count // max(len(pools), 1))]
    differential(traces, findings, version, out / "differential", report)
    return report


def cli(findings_path: Path, out: Path, random_count: int, cases: int | None = None) -> int:
    """`python -m fuzz verify-upstream`: run every check, print a summary line, exit 0 iff all match."""
    version = installed_sglang()
    if version is None:
        print(
            "verify-upstream: sglang is not installed here; run `make verify-sglang` (or `make sglang-setup`, "
            "then .venv-sglang-VERSION/bin/python -m fuzz verify-upstream)",
            file=sys.stderr,
        )
        return 2
    try:
        findings = load_findings(findings_path)
    except FindingsError as exc:
        print(f"verify-upstream: {exc}", file=sys.stderr)
        return 2
    start = time.perf_counter()
    report = verify(findings, version, out / version, random_count, cases)
    took = time.perf_counter() - start
    if report.problems:
        print(f"verify-upstream: sglang {version}: {len(report.problems)} mismatches ({took:.0f} s)")
        return 1
    print(f"verify-upstream: sglang {version}: everything matches {findings_path} ({took:.0f} s)")
    return 0


def false_alarm_cli(budget_s: float, out: Path) -> int:
    """`python -m fuzz mutants --target sglang`: the no-fault runs only, on each pool upstream supports; what
    they find is a false alarm unless it is a known finding (upstream/findings.json)."""
    from fuzz.mutants import DETECTED, run_attempt

    version = installed_sglang()
    if version is None:
        print(
            "fuzz mutants: --target sglang needs upstream sglang; run it with .venv-sglang-VERSION/bin/python "
            "(make sglang-setup)",
            file=sys.stderr,
        )
        return 2
    findings = load_findings(ROOT / "upstream" / "findings.json")
    alarms = 0
    for pool in upstream_pools():
        attempt = run_attempt(None, pool, budget_s, out / f"sglang-{version}", target="sglang")
        seen = attempt.result
        if attempt.result == DETECTED and attempt.counterexample:
            hit = known(findings, load(Path(attempt.counterexample)).failure, version)
            seen = f"known {hit.id}" if hit else f"false alarm: {attempt.failure_kind} {attempt.failure_id}"
            alarms += hit is None
        print(f"fuzz mutants: sglang {version}, no fault, {pool}: {seen} ({attempt.wall_s:.0f} s)", flush=True)
    return 1 if alarms else 0
