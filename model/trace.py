"""Counterexample files: versioned JSON traces (never pickle), loaded as untrusted input.

A trace is the config, the seed, each step with its arguments and the implementation's choices, and the
failure it shows. Every field is checked on load; a file that is not a valid trace raises `TraceError`
with a one-line reason, before anything is run.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeGuard

from model.actions import ARG_DEFAULTS, CONTRACT, OBSERVED

FORMAT = "kvlife-trace"
VERSION = 1
MAX_FILE_BYTES = 16 << 20
MAX_STEPS = 100_000
MAX_VALUE = 1 << 24
CONFIG_BOUNDS = {"rows": (1, 1 << 20), "tokens": (1, 1 << 24), "width": (1, 1 << 20), "page_size": (1, 1 << 10)}
CONFIG_CHOICES = {"target": ("reference", "sglang"), "device": ("cpu", "cuda"), "cache": ("chunk", "radix")}
OPS = {a.name: a for a in CONTRACT}
# Steps the harness takes that change nothing on model or pool, with their arguments.
OBSERVATIONS = {"differential": ("req",)}


class TraceError(ValueError):
    """The file is not a valid kvlife trace; the message says why, on one line."""


@dataclass(frozen=True)
class Step:
    op: str
    args: dict[str, int]
    choice: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Failure:
    step: int
    kind: str
    id: str
    message: str


@dataclass(frozen=True)
class Trace:
    config: dict[str, Any]
    seed: int | None
    steps: list[Step]
    failure: Failure | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        doc = {"format": FORMAT, "version": VERSION, **asdict(self)}
        if self.failure is None:
            del doc["failure"]
        return doc


def dump(trace: Trace, path: Path) -> None:
    """Write atomically: a reader (or a crash) never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(fd, "w") as out:
        json.dump(trace.to_json(), out, indent=1)
        out.write("\n")
    os.replace(tmp, path)


def load(path: Path) -> Trace:
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise TraceError(f"cannot read {path}: {exc.strerror}") from None
    if size > MAX_FILE_BYTES:
        raise TraceError(f"file is {size} bytes, larger than the {MAX_FILE_BYTES}-byte limit")
    return parse(path.read_bytes())


def parse(data: bytes) -> Trace:
    if not data.strip():
        raise TraceError("file is empty")
    try:
        doc = json.loads(data, parse_constant=_reject_constant)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise TraceError(f"not valid JSON: {exc}") from None
    except RecursionError:
        raise TraceError("not valid JSON: nested too deeply") from None
    if not isinstance(doc, dict):
        raise TraceError("top level must be a JSON object")
    if doc.get("format") != FORMAT:
        raise TraceError(f"format must be {FORMAT!r}, got {doc.get('format')!r}")
    if doc.get("version") != VERSION:
        raise TraceError(f"version {doc.get('version')!r} is not supported (this kvlife reads version {VERSION})")
    config = _config(doc.get("config"))
    steps = _steps(doc.get("steps"))
    seed = doc.get("seed")
    if seed is not None and not _is_int(seed):
        raise TraceError("seed must be an integer or null")
    meta = doc.get("meta", {})
    if not isinstance(meta, dict):
        raise TraceError("meta must be an object")
    return Trace(config, seed, steps, _failure(doc.get("failure"), len(steps)), meta)


def _reject_constant(name: str) -> None:
    raise TraceError(f"not valid JSON: {name} is not a number")


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _config(config: Any) -> dict[str, Any]:
    if not isinstance(config, dict):
        raise TraceError("config must be an object")
    for key, (low, high) in CONFIG_BOUNDS.items():
        value = config.get(key)
        if not _is_int(value) or not low <= value <= high:
            raise TraceError(f"config.{key} must be an integer in [{low}, {high}], got {value!r}")
    for key, allowed in CONFIG_CHOICES.items():
        if config.get(key) not in allowed:
            raise TraceError(f"config.{key} must be one of {', '.join(allowed)}, got {config.get(key)!r}")
    if not isinstance(config.get("speculative", False), bool):
        raise TraceError("config.speculative must be true or false")
    faults = config.get("faults", [])
    if not isinstance(faults, list) or not all(isinstance(f, str) for f in faults):
        raise TraceError("config.faults must be a list of fault names")
    return config


def _steps(steps: Any) -> list[Step]:
    if not isinstance(steps, list):
        raise TraceError("steps must be a list")
    if len(steps) > MAX_STEPS:
        raise TraceError(f"{len(steps)} steps is more than the {MAX_STEPS}-step limit")
    return [_step(i, s) for i, s in enumerate(steps)]


def _step(index: int, step: Any) -> Step:
    if not isinstance(step, dict):
        raise TraceError(f"step {index} must be an object")
    op = step.get("op")
    if op in OBSERVATIONS:
        return Step(op, _int_map(index, "args", step.get("args"), set(OBSERVATIONS[op]), required=True))
    if op not in OPS:
        raise TraceError(f"step {index}: unknown op {op!r} (known: {', '.join(sorted(OPS) + list(OBSERVATIONS))})")
    action = OPS[op]
    expected = {name for name, _ in action.params} - set(action.choice)
    args = _int_map(index, "args", step.get("args"), expected, required=True, optional=OBSERVED | set(ARG_DEFAULTS))
    choice = _int_map(index, "choice", step.get("choice", {}), set(action.choice), required=False)
    return Step(op, args, choice)


def _int_map(
    index: int, what: str, value: Any, keys: set[str], required: bool, optional: frozenset[str] = frozenset()
) -> dict[str, int]:
    if not isinstance(value, dict):
        raise TraceError(f"step {index}: {what} must be an object")
    extra, missing = set(value) - keys, keys - set(value) - optional
    if extra:
        raise TraceError(f"step {index}: unexpected {what} {sorted(extra)}")
    if required and missing:
        raise TraceError(f"step {index}: missing {what} {sorted(missing)}")
    for key, v in value.items():
        if not _is_int(v) or not 0 <= v <= MAX_VALUE:
            raise TraceError(f"step {index}: {what}.{key} must be an integer in [0, {MAX_VALUE}], got {v!r}")
    return dict(value)


def _failure(failure: Any, n_steps: int) -> Failure | None:
    if failure is None:
        return None
    if not isinstance(failure, dict):
        raise TraceError("failure must be an object")
    step = failure.get("step")
    if not _is_int(step) or not 0 <= step < max(n_steps, 1):
        raise TraceError(f"failure.step must be a step index in [0, {n_steps}), got {step!r}")
    kind, inv_id, message = (failure.get(k) for k in ("kind", "id", "message"))
    if not (isinstance(kind, str) and isinstance(inv_id, str) and isinstance(message, str)):
        raise TraceError("failure.kind, failure.id and failure.message must be strings")
    return Failure(step, kind, inv_id, message)
