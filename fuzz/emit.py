"""`python -m fuzz emit FILE`: turn a counterexample into a plain pytest regression test.

Hypothesis has no `@example` for state machines, so a found trace is kept as a test that replays it without
Hypothesis. The emitted test runs the pool with no fault, where the trace must pass; the environment variable
`KVLIFE_REGRESSION_FAULTS` (comma-separated) turns faults on, which shows the test fails while the bug is in.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

from model.trace import Trace

REGRESSIONS = Path("tests/regressions")

_TEMPLATE = '''"""Regression: {summary}

Emitted by `python -m fuzz emit` from a counterexample ({source}); the trace below must pass on the pool.
"""

import os

from fuzz.replay import replay
from model.trace import parse

TRACE = {trace!r}


def test_{name}() -> None:
    faults = [f for f in os.environ.get("KVLIFE_REGRESSION_FAULTS", "").split(",") if f]
    trace = parse(TRACE.encode())
    trace = type(trace)({{**trace.config, "faults": faults}}, trace.seed, trace.steps, trace.failure, trace.meta)
    result = replay(trace)
    assert result.failure is None, "\\n".join([*result.lines, str(result.failure)])
'''


def emit(trace: Trace, out_dir: Path = REGRESSIONS) -> Path:
    """Write the regression test for `trace` and return its path (named after the failure and the steps)."""
    text = json.dumps(trace.to_json(), sort_keys=True)
    failure = trace.failure
    kind = re.sub(r"[^a-z0-9]+", "_", f"{failure.kind}_{failure.id}".lower()) if failure else "trace"
    name = f"{kind}_{hashlib.sha256(text.encode()).hexdigest()[:10]}"
    summary = f"{failure.kind} {failure.id} at step {failure.step}: {failure.message}" if failure else "a trace"
    source = ", ".join(f"{k} {v}" for k, v in sorted(trace.meta.items())) or "no provenance recorded"
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"test_{name}.py"
    path.write_text(_TEMPLATE.format(summary=summary[:200], source=source, trace=text, name=name))
    return path
