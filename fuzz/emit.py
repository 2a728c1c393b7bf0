"""`python -m fuzz emit FILE`: turn a counterexample into a plain pytest regression test.

Hypothesis has no `@example` for state machines, so a found trace is kept as a test that replays it without
Hypothesis. The emitted test runs the pool with no fault, where the trace must pass; the environment variable
`KVLIFE_REGRESSION_FAULTS` (comma-separated fault names) turns faults on, which shows the test fails while the
bug is in.

The file's strings never become code: the trace is embedded as one string literal (`repr` of its ASCII JSON),
the test's name is built from `[a-z0-9_]` only, and the docstring keeps printable ASCII without quotes or
backslashes. Every emitted module has the same statements; only the literal's contents and the name differ.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

from fuzz.environment import env_names
from fuzz.replay import replay
from impl.faults import FAULTS
from model.trace import Trace, parse, write_atomically

REGRESSIONS = Path("tests/regressions")
FAULTS_VARIABLE = "KVLIFE_REGRESSION_FAULTS"
SUMMARY_CHARS = 200
NAME_CHARS = 60


def emit(trace: Trace, out_dir: Path = REGRESSIONS) -> Path:
    """Write the regression test for `trace` and return its path (named after the failure and the steps)."""
    text = json.dumps(trace.to_json(), sort_keys=True)  # ASCII: non-ASCII characters are \\u escapes
    failure = trace.failure
    kind = _identifier(f"{failure.kind}_{failure.id}") if failure else "trace"
    name = f"{kind}_{hashlib.sha256(text.encode()).hexdigest()[:10]}"
    path = out_dir / f"test_{name}.py"
    write_atomically(path, render(text, name, _summary(trace), _source(trace)))
    return path


def render(trace_json: str, name: str, summary: str, source: str) -> str:
    """The test module's source. `name` must be an identifier tail; the texts go through `docstring_safe`."""
    if not re.fullmatch(r"[a-z0-9_]+", name):
        raise ValueError(f"not a test name: {name!r}")
    lines = [
        f'"""Regression: {docstring_safe(summary)}',
        "",
        "Emitted by `python -m fuzz emit` from a counterexample; the trace below must pass on the pool.",
        f"Provenance: {docstring_safe(source)}.",
        '"""',
        "",
        "from fuzz.emit import replay_regression",
        "",
        f"TRACE = {trace_json!r}",
        "",
        "",
        f"def test_{name}() -> None:",
        "    replay_regression(TRACE)",
        "",
    ]
    return "\n".join(lines)


def docstring_safe(text: str) -> str:
    """`text` as docstring prose: printable ASCII without quotes or backslashes, whitespace runs as one space."""
    kept = "".join(c if " " <= c <= "~" and c not in "\"'\\" else " " for c in text)
    return " ".join(kept.split())


def _identifier(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")[:NAME_CHARS] or "trace"


def _summary(trace: Trace) -> str:
    f = trace.failure
    text = f"{f.kind} {f.id} at step {f.step}: {f.message}" if f else "a trace"
    return text[:SUMMARY_CHARS]


def _source(trace: Trace) -> str:
    items = ", ".join(f"{k} {v}" for k, v in sorted(trace.meta.items()))
    return items[:SUMMARY_CHARS] or "no provenance recorded"


def replay_regression(trace_json: str) -> None:
    """The body of every emitted test: load the trace through the one loader, turn on the faults named in
    `KVLIFE_REGRESSION_FAULTS` (none by default), replay it, and fail if the pool fails it."""
    faults = env_names(FAULTS_VARIABLE, FAULTS)
    trace = parse(trace_json.encode())
    trace = Trace({**trace.config, "faults": faults}, trace.seed, trace.steps, trace.failure, trace.meta)
    result = replay(trace)
    assert result.failure is None, "\n".join([*result.lines, str(result.failure)])
