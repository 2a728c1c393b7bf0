"""The re-check of a rerun: every counterexample an earlier campaign left in `--out`, replayed again; those that
still fail count as findings of this run, and a trace a killed campaign left unshrunk loses its needless steps."""

from __future__ import annotations

import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from fuzz.campaign.findings import Group, Signature, add_finding
from fuzz.replay import load_trace, replay
from fuzz.run import delete_steps
from model.exits import save_traceback
from model.trace import Trace, TraceError, dump, load, one_line

REPORT_NAMES = ("report.json",)
REPRODUCES = "reproduces"
INTERNAL_ERROR = "internal error"


@dataclass
class Recheck:
    """A counterexample found by an earlier run on the same `--out`, replayed again."""

    file: str
    status: str
    failure: dict[str, Any] | None = None


def recheck(out: Path) -> list[Recheck]:
    """Replay every counterexample already in `out` through the loader: does it still fail? A file that is not a
    valid trace is `invalid: why`; a crash of kvlife while replaying one is an `internal error`, never a finding."""
    found = []
    for path in sorted(out.glob("*.json")):
        if path.name in REPORT_NAMES:
            continue
        try:
            result = replay(load_trace(path, None))
        except TraceError as exc:
            found.append(Recheck(str(path), f"invalid: {exc}"))
            continue
        except Exception as exc:
            found.append(Recheck(str(path), internal(exc)))
            continue
        status = REPRODUCES if result.failure is not None else "no longer reproduces"
        found.append(Recheck(str(path), status, asdict(result.failure) if result.failure else None))
    return found


def internal(exc: Exception) -> str:
    """A re-check's status when kvlife itself failed: one line, the traceback saved to a file it names."""
    where = save_traceback("".join(traceback.format_exception(exc)))
    what = one_line(f"{type(exc).__name__}: {exc}", 200)
    return f"{INTERNAL_ERROR} (kvlife itself failed, not the pool): {what}; traceback in {where}"


def resume(out: Path, groups: dict[Signature, Group], say: Callable[[str], None]) -> list[Recheck]:
    """Re-check `out`, say what each file does now, and count those that still fail in `groups`."""
    rechecked = recheck(out)
    if not rechecked:
        return rechecked
    say(f"resume: re-checking {len(rechecked)} counterexamples already in {out}")
    for item in rechecked:
        if item.status == REPRODUCES:
            try:
                add_finding(groups, item.file, trim_unshrunk(Path(item.file)))
            except Exception as exc:
                item.status, item.failure = internal(exc), None
        say(f"  {one_line(item.file)}: {item.status}")
    return rechecked


def trim_unshrunk(path: Path) -> Trace:
    """A trace left unshrunk by a killed campaign loses the steps it can do without (in place); others as they are."""
    trace = load(path)
    if trace.meta.get("shrunk") is not False or trace.failure is None:
        return trace
    steps, failure = delete_steps(trace.config, trace.steps[: trace.failure.step + 1], trace.failure)
    trimmed = Trace(trace.config, trace.seed, steps, failure, {**trace.meta, "shrunk": "steps deleted on resume"})
    dump(trimmed, path)
    return trimmed
