"""The findings manifest (`upstream/findings.json`): the triaged divergences upstream is known to show, read with
the trace loader's discipline, and how a failure is matched to one of them (its replay's failure, or a symptom in
a trace that uses its trigger)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fuzz.drain import DRAIN
from fuzz.fault_plans import STAGES, barred, exclusion_names, stage_of
from impl.fault_points import plan_of
from impl.upstream.releases import published_releases
from model.trace import (
    NAME,
    Failure,
    Rule,
    Step,
    Trace,
    TraceError,
    load,
    one_line,
    one_of,
    parse_json,
    read_bounded,
    show,
    step_schema,
)
from properties.vocabulary import KIND_EXCLUSIONS

TRIAGE = ("upstream-bug", "model-wrong", "contract-difference")
ROOT = Path(__file__).resolve().parents[1]  # a finding's replay file must stay inside it


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
    # Other (kind, id) failures the finding shows as in a trace that uses its trigger (a `fuzz_exclude` op or
    # request kind): which check trips first depends on what the trace does next.
    # A symptom with a stage (`fuzz.fault_plans.STAGES`) counts only where the failing step is of that stage.
    symptoms: frozenset[tuple[str, str, str]] = frozenset()  # (kind, id, stage or "" for any)

    def matches(self, failure: Failure | None, version: str) -> bool:
        """Whether `failure`, seen on `version`, is this finding: its kind and id, on a release it names or on a
        version no published release names (a source checkout, whose findings are not in the manifest)."""
        return (
            failure is not None
            and (version in self.versions or not is_release(version))
            and (failure.kind, failure.id) == (self.expect_kind, self.expect_id)
        )

    def shows_in(self, failure: Failure | None, version: str, trace: Trace) -> bool:
        """Whether `failure` of `trace`, seen on `version`, is this finding: its replay's failure, or one of its
        symptoms in a trace that uses its trigger."""
        if failure is None or self.matches(failure, version):
            return failure is not None
        on_version = version in self.versions or not is_release(version)
        return on_version and self._symptom(failure, trace) and self.triggered_by(trace, failure)

    def _symptom(self, failure: Failure, trace: Trace) -> bool:
        """Whether `failure` is one of the symptoms, at its stage where the symptom names one."""
        failing = trace.steps[failure.step] if 0 <= failure.step < len(trace.steps) else None
        stage = stage_of(failing.op, failing.args) if failing is not None else ""
        return any((kind, name) == (failure.kind, failure.id) and at in ("", stage) for kind, name, at in self.symptoms)

    def triggered_by(self, trace: Trace, failure: Failure | None = None) -> bool:
        """Whether the trace takes an op or draws a request kind that the finding's `fuzz_exclude` names, or its
        failing step (`failure`'s) planned a failure at a point it names (`fault:POINT`, `fault:POINT@STAGE`)."""
        kinds = {KIND_EXCLUSIONS[name] for name in self.fuzz_exclude if name in KIND_EXCLUSIONS}
        if failure is not None and 0 <= failure.step < len(trace.steps):
            failing = trace.steps[failure.step]
            plan = plan_of(failing.args)
            if plan is not None and barred(plan.point, failing.op, self.fuzz_exclude, failing.args):
                return True
        for step in trace.steps:
            if step.op in self.fuzz_exclude or (_flushes(step) and "flush" in self.fuzz_exclude):
                return True
            if any(value in kinds for key, value in step.args.items() if key.startswith("kind")):
                return True
        return False


def _flushes(step: Step) -> bool:
    """Whether a step flushes the cache as part of what it does: a drain does, unless it says it does not."""
    return step.op == DRAIN and step.args.get("flush", 1) == 1


def is_release(version: str) -> bool:
    """Whether `version` is a published release of `upstream/releases.txt`."""
    return version in {release.version for release in published_releases()}


@dataclass
class Report:
    """What a verification printed, and what did not match (each a one-line `MISMATCH`)."""

    lines: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    # Each finding's replay here: 'reproduces', 'passes', or how else it failed (the findings x release table's cells).
    outcomes: dict[str, str] = field(default_factory=dict)

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


def _symptom(value: Any) -> bool:
    if not isinstance(value, dict) or value.get("stage", "") not in ("", *STAGES):
        return False
    return _expect({key: v for key, v in value.items() if key != "stage"})


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
    "fuzz_exclude": (Rule("a list of op names (or kind:NAME)", _names), []),
    "symptoms": (
        Rule(
            f'a list of {{"kind": NAME, "id": NAME}}, each with an optional "stage" (one of {", ".join(STAGES)})',
            lambda v: isinstance(v, list) and len(v) <= 20 and all(_symptom(x) for x in v),
        ),
        [],
    ),
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
    if not set(entry.get("fuzz_exclude", [])) <= set(step_schema()) | set(KIND_EXCLUSIONS) | exclusion_names():
        raise FindingsError(
            f"{where}: fuzz_exclude names an op, kind or fault point kvlife does not have: "
            f"{show(entry['fuzz_exclude'])}"
        )
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
        symptoms=frozenset((x["kind"], x["id"], x.get("stage", "")) for x in entry.get("symptoms", [])),
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


def fuzz_excluded(findings: list[Finding], version: str) -> frozenset[str]:
    """The ops (and request kinds) the findings of `version` drop from fuzzing (`fuzz_exclude`), so that a run looks
    past the bugs the release already has."""
    return frozenset(op for f in findings if version in f.versions for op in f.fuzz_exclude)


def known(findings: list[Finding], failure: Failure | None, version: str, trace: Trace | None = None) -> Finding | None:
    """The finding `failure` on `version` is (with the `trace` that failed, also by a finding's symptoms), or None."""
    if trace is not None:
        return next((f for f in findings if f.shows_in(failure, version, trace)), None)
    return next((f for f in findings if f.matches(failure, version)), None)


def known_still_drawn(
    findings: list[Finding], failure: Failure | None, version: str, exclude: frozenset[str], trace: Trace | None = None
) -> Finding | None:
    """The finding `failure` on `version` is whose ops the run still draws, or None: two findings can fail alike
    (the same kind and id, from different ops), and one the run already dropped cannot explain it. With the
    `trace` that failed, a finding's symptoms count too."""
    return next(
        (
            f
            for f in findings
            if (f.shows_in(failure, version, trace) if trace is not None else f.matches(failure, version))
            and f.fuzz_exclude
            and not f.fuzz_exclude <= exclude
        ),
        None,
    )
