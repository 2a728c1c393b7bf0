"""Counterexample files: versioned JSON traces (never pickle), loaded as untrusted input.

A trace is the config, the seed, each step with its arguments and the implementation's choices, and the
failure it shows. `load` is the one loader: every field's type and bounds are checked, and so is the memory a
pool of the config would take, before anything is built; a file that is not a valid trace raises `TraceError`
with a one-line reason naming the field. The schema is two tables: `CONFIG_SCHEMA` (one rule per config key)
and `step_schema()` (derived from the action table, `model.actions`, so a new op or argument needs no edit here).
The config and its size are checked first, before the action table (and torch, which it loads) is imported: a
file asking for a pool too large is refused in a fraction of a second.
"""

from __future__ import annotations

import functools
import json
import math
import os
import secrets
import stat
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeGuard

from properties.vocabulary import FAULT_POINTS, MAX_FAULT_CALL

if TYPE_CHECKING:
    from model.actions import Action

FORMAT = "kvlife-trace"
VERSION = 1
MAX_FILE_BYTES = 4 << 20  # a 1,000-step trace written with indents is about 200 KiB
# 20 times the longest trace kvlife writes (a nightly test case is 50 steps); replay stops at the first failure.
MAX_STEPS = 1_000
MAX_VALUE = 1 << 24
MAX_NAME_CHARS = 200  # a failure kind or id, a meta key, a fault name
MAX_TEXT_CHARS = 64 << 10  # a failure message, a meta string
MAX_META_DEPTH = 4
MAX_META_VALUES = 10_000
MAX_FAULTS = 64
# The memory a pool of the config would take (`pool_bytes`), and the replay's work: steps times that, since
# every step snapshots the pool's tables and a differential step clones the whole pool. At these limits a pool
# builds in a fraction of a second and a replay's peak memory (snapshots, clones) stays under about 2 GiB.
POOL_BYTES_LIMIT = 256 << 20
REPLAY_WORK_LIMIT = 1 << 30
ROW_ENTRY_BYTES = 4  # `req_to_token` is int32
ROW_BYTES = 256  # per row: the free list, the generations, their Python copies in snapshots, the model's rows
PAGE_BYTES = 128  # per page: the int64 free list, and its Python copies in snapshots and page checks
TOP_LEVEL = ("format", "version", "config", "seed", "steps", "failure", "meta")
STEP_KEYS = ("op", "args", "choice")


class TraceError(ValueError):
    """The file is not a valid kvlife trace; the message says why, on one line."""

    def __init__(self, message: str) -> None:
        super().__init__(one_line(message))


def one_line(text: str, limit: int = 500) -> str:
    """`text` on one printable line: control and non-printable characters escaped, at most `limit` characters."""
    flat = "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def show(value: Any, limit: int = 60) -> str:
    """A value from a file, quoted for a one-line message: ASCII only, cut short."""
    text = ascii(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


# -- the schema -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rule:
    """What one field's value must be: `what` says it (for the refusal), `ok` tests it."""

    what: str
    ok: Callable[[Any], bool]


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def integer(low: int, high: int) -> Rule:
    return Rule(f"an integer in [{low}, {high}]", lambda v: _is_int(v) and low <= v <= high)


def one_of(*choices: str) -> Rule:
    return Rule(f"one of {', '.join(choices)}", lambda v: isinstance(v, str) and v in choices)


def _is_name(value: object) -> bool:
    return isinstance(value, str) and 0 < len(value) <= MAX_NAME_CHARS and value.isprintable()


def _fault_names(value: object) -> bool:
    return isinstance(value, list) and len(value) <= MAX_FAULTS and all(_is_name(v) for v in value)


FLAG = Rule("true or false", lambda v: isinstance(v, bool))
NAME = Rule(f"a string of 1 to {MAX_NAME_CHARS} printable characters", _is_name)
# The config keys a trace may carry: `impl.engine.PoolConfig`'s fields, the target and its faults. Required keys
# come first; `fuzz.replay` refuses a key set away from its default that its lockstep does not pass to the pool.
REQUIRED_CONFIG = ("target", "device", "rows", "tokens", "width", "page_size", "cache")
CONFIG_SCHEMA: dict[str, Rule] = {
    "target": one_of("reference", "sglang"),
    "device": one_of("cpu", "cuda"),
    "rows": integer(1, 1 << 20),
    "tokens": integer(1, 1 << 24),
    "width": integer(1, 1 << 20),
    "page_size": integer(1, 1 << 10),
    "cache": one_of("chunk", "radix"),
    "speculative": FLAG,
    "faults": Rule(f"a list of at most {MAX_FAULTS} fault names", _fault_names),
    "kernel_backend": one_of("torch", "triton"),
    "need_sort": FLAG,
    "row_pool": one_of("req", "decode"),
    "pre_alloc_size": integer(0, 1 << 20),
    "evict_on_demand": FLAG,
    "tree_core": one_of("rust", "python"),
    # The percentage of drawn steps that carry a fault plan (`fuzz.fault_plans`); absent or 0: none.
    "fault_rate": integer(0, 100),
}
# The values a step may give each argument sort of the action table (`Action.params`).
SORTS: dict[str, Rule] = {"req": integer(0, MAX_VALUE), "row": integer(0, MAX_VALUE), "len": integer(0, MAX_VALUE)}
# What a pool chose is recorded as it chose it, even where the contract forbids the value (a negative count).
CHOICE = integer(-MAX_VALUE, MAX_VALUE)


@dataclass(frozen=True)
class StepShape:
    """The arguments a step of one op must give (all of them) and the choices it may record (any of them)."""

    args: dict[str, Rule]
    choice: dict[str, Rule]
    optional: frozenset[str] = frozenset()  # arguments a step may leave out (`model.actions.OPTIONAL_ARGS`)


# A contract step's fault plan (`impl.fault_points`): the point (1 + its index in FAULT_POINTS; 0: none) and which
# of the step's calls to it fails. Both may be left out: no plan.
FAULT_ARGS = {"fault": integer(0, len(FAULT_POINTS)), "fault_call": integer(0, MAX_FAULT_CALL)}


def _shape(action: Action, optional: frozenset[str]) -> StepShape:
    args = {name: SORTS[sort] for name, sort in action.params if name not in action.choice} | FAULT_ARGS
    return StepShape(args, dict.fromkeys(action.choice, CHOICE), (optional & set(args)) | set(FAULT_ARGS))


# A drain flushes the cache at its end unless `flush` is 0 (a run that excludes flush: `fuzz.drain.drain_args`).
DRAIN_SHAPE = StepShape({"flush": integer(0, 1)}, {}, frozenset({"flush"}))


@functools.cache
def step_schema() -> dict[str, StepShape]:
    """Every op of the contract, the harness's observation step (it changes nothing on model or pool) and its drain
    (`fuzz.drain`: releases the model works out from its own state)."""
    from model.actions import CONTRACT, OPTIONAL_ARGS, actions_for  # loaded once a step is to be checked
    from model.concrete import executable_actions

    executable = executable_actions(actions_for())
    shapes = {a.name: _shape(a, OPTIONAL_ARGS | a.optional) for a in (*CONTRACT, *executable)}
    return shapes | {"differential": StepShape({"req": SORTS["req"]}, {}), "drain": DRAIN_SHAPE}


# -- the trace --------------------------------------------------------------------------------------------


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
    """Write the trace atomically (`write_atomically`)."""
    write_atomically(path, json.dumps(trace.to_json(), indent=1) + "\n")


def write_atomically(path: Path, text: str) -> None:
    """Write through a temporary file and a rename: a reader (or a crash) never sees half a file. The file is
    created as `open` creates one, mode 0666 less the umask (`mkstemp` would make it 0600: unreadable to a team)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    while True:
        tmp = path.parent / f".{path.name[:100]}.{secrets.token_hex(6)}.tmp"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
            break
        except FileExistsError:
            continue
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


# -- reading ----------------------------------------------------------------------------------------------


def load(path: Path) -> Trace:
    """Read and validate a counterexample file; `TraceError` (one line) for anything that is not a valid trace."""
    return parse(read_bounded(path, MAX_FILE_BYTES))


def read_bounded(path: Path, limit: int) -> bytes:
    """The bytes of a regular file of at most `limit` bytes; `TraceError` otherwise (a FIFO is never waited on)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except (OSError, ValueError) as exc:
        raise TraceError(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise TraceError(f"{path} is not a regular file")
    with os.fdopen(fd, "rb") as handle:
        if info.st_size > limit:
            raise TraceError(f"file is {info.st_size} bytes, larger than the {limit}-byte limit")
        try:
            data = handle.read(limit + 1)
        except OSError as exc:
            raise TraceError(f"cannot read {path}: {exc.strerror}") from None
    if len(data) > limit:
        raise TraceError(f"file grew past the {limit}-byte limit while it was read")
    return data


def parse_json(data: bytes) -> Any:
    """Strict JSON, parsed at C speed: UTF-8, no NaN or Infinity. Duplicate keys are `refuse_duplicate_keys`'s."""
    if not data.strip():
        raise TraceError("file is empty")
    try:
        return json.loads(data.decode("utf-8"), parse_constant=_reject_constant)
    except UnicodeDecodeError as exc:
        raise TraceError(f"not UTF-8 text: {exc.reason} at byte {exc.start}") from None
    except json.JSONDecodeError as exc:
        raise TraceError(f"not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except RecursionError:
        raise TraceError("not valid JSON: nested too deeply") from None
    except TraceError:
        raise
    except ValueError:  # Python refuses to convert an integer of thousands of digits
        raise TraceError("not valid JSON: an integer of thousands of digits") from None


def refuse_duplicate_keys(data: bytes) -> None:
    """A reader of the file sees the first of two equal keys, `json` keeps the last: refuse the ambiguity. A second
    parse, run on a file that passed every other check (so it is small: a Python hook runs per object)."""
    json.loads(data.decode("utf-8"), object_pairs_hook=_unique_keys)


def _reject_constant(name: str) -> None:
    raise TraceError(f"not valid JSON: {name} is not a number")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    doc = dict(pairs)
    if len(doc) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise TraceError(f"key {show(key)} appears twice in one object")
            seen.add(key)
    return doc


def parse(data: bytes) -> Trace:
    """Validate the bytes of a counterexample file into a `Trace` (see `load`)."""
    doc = parse_json(data)
    if not isinstance(doc, dict):
        raise TraceError("top level must be a JSON object")
    if doc.get("format") != FORMAT:
        raise TraceError(f"format must be {FORMAT!r}, got {show(doc.get('format'))}")
    if doc.get("version") != VERSION:
        raise TraceError(f"version {show(doc.get('version'))} is not supported (this kvlife reads version {VERSION})")
    _only_keys("top level", doc, TOP_LEVEL)
    config = _config(doc.get("config"))
    raw_steps = doc.get("steps")
    check_size(config, len(raw_steps) if isinstance(raw_steps, list) else 0)
    steps = _steps(raw_steps)
    seed = doc.get("seed")
    if seed is not None and not (_is_int(seed) and 0 <= seed < 1 << 64):
        raise TraceError(f"seed must be an integer in [0, 2^64) or null, got {show(seed)}")
    meta = _meta(doc.get("meta", {}))
    failure = _failure(doc.get("failure"), len(steps))
    refuse_duplicate_keys(data)
    return Trace(config, seed, steps, failure, meta)


def _only_keys(where: str, obj: dict[str, Any], allowed: tuple[str, ...]) -> None:
    extra = [key for key in obj if key not in allowed]
    if extra:
        raise TraceError(f"{where}: unexpected key {show(extra[0])} (known: {', '.join(allowed)})")


def _config(config: Any) -> dict[str, Any]:
    if not isinstance(config, dict):
        raise TraceError("config must be an object")
    unknown = [key for key in config if key not in CONFIG_SCHEMA]
    if unknown:
        raise TraceError(f"config.{unknown[0][:60]} is not a config key kvlife knows ({', '.join(CONFIG_SCHEMA)})")
    for key in REQUIRED_CONFIG:
        if key not in config:
            raise TraceError(f"config.{key} is missing: it must be {CONFIG_SCHEMA[key].what}")
    for key, value in config.items():
        rule = CONFIG_SCHEMA[key]
        if not rule.ok(value):
            raise TraceError(f"config.{key} must be {rule.what}, got {show(value)}")
    return {key: list(value) if isinstance(value, list) else value for key, value in config.items()}


def pool_bytes(config: dict[str, Any]) -> int:
    """About how many bytes a pool of this (validated) config takes: its `req_to_token` table, its rows and its
    pages (`ROW_BYTES`, `PAGE_BYTES`)."""
    rows = config["rows"] + config.get("pre_alloc_size", 0) + 1  # row 0 is padding
    pages = config["tokens"] // config["page_size"] + 1  # page 0 is reserved
    return rows * config["width"] * ROW_ENTRY_BYTES + rows * ROW_BYTES + pages * PAGE_BYTES


def check_size(config: dict[str, Any], steps: int) -> None:
    """Refuse a config whose pool would take more than `POOL_BYTES_LIMIT`, or a replay of more than
    `REPLAY_WORK_LIMIT` (steps times the pool), naming the fields."""
    need = pool_bytes(config)
    if need > POOL_BYTES_LIMIT:
        raise TraceError(
            f"config: a pool of {config['rows']} rows of width {config['width']} and "
            f"{config['tokens'] // config['page_size']} pages needs about {_size(need)}, more than the "
            f"{_size(POOL_BYTES_LIMIT)} limit (config.rows x config.width, config.tokens / config.page_size)"
        )
    if need * steps > REPLAY_WORK_LIMIT:
        raise TraceError(
            f"steps: {steps} steps on a pool of about {_size(need)} is about {_size(need * steps)} of replay work, "
            f"more than the {_size(REPLAY_WORK_LIMIT)} limit (fewer steps, or a smaller config)"
        )


def _size(n: int) -> str:
    for unit, shift in (("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.1f} {unit}"
    return f"{n} bytes"


def _steps(steps: Any) -> list[Step]:
    if not isinstance(steps, list):
        raise TraceError("steps must be a list")
    if len(steps) > MAX_STEPS:
        raise TraceError(f"steps: {len(steps)} steps is more than the {MAX_STEPS}-step limit")
    return [_step(i, s) for i, s in enumerate(steps)]


def _step(index: int, step: Any) -> Step:
    if not isinstance(step, dict):
        raise TraceError(f"step {index} must be an object")
    _only_keys(f"step {index}", step, STEP_KEYS)
    op, schema = step.get("op"), step_schema()
    shape = schema.get(op) if isinstance(op, str) else None
    if shape is None or not isinstance(op, str):
        raise TraceError(f"step {index}: unknown op {show(op)} (known: {', '.join(schema)})")
    args = _int_map(index, "args", step.get("args"), shape.args, required=True, optional=shape.optional)
    choice = _int_map(index, "choice", step.get("choice", {}), shape.choice, required=False)
    return Step(op, args, choice)


def _int_map(
    index: int, what: str, value: Any, rules: dict[str, Rule], required: bool, optional: frozenset[str] = frozenset()
) -> dict[str, int]:
    if not isinstance(value, dict):
        raise TraceError(f"step {index}: {what} must be an object")
    extra = [key for key in value if key not in rules]
    if extra:
        raise TraceError(f"step {index}: unexpected {what} {show(sorted(extra)[:3])}")
    missing = [key for key in rules if key not in value and key not in optional]
    if required and missing:
        raise TraceError(f"step {index}: missing {what} {sorted(missing)}")
    for key, v in value.items():
        if not rules[key].ok(v):
            raise TraceError(f"step {index}: {what}.{key} must be {rules[key].what}, got {show(v)}")
    return dict(value)


def _failure(failure: Any, n_steps: int) -> Failure | None:
    if failure is None:
        return None
    if not isinstance(failure, dict):
        raise TraceError("failure must be an object")
    _only_keys("failure", failure, ("step", "kind", "id", "message"))
    step = failure.get("step")
    if not _is_int(step) or not 0 <= step < max(n_steps, 1):
        raise TraceError(f"failure.step must be a step index in [0, {n_steps}), got {show(step)}")
    for key in ("kind", "id"):
        if not NAME.ok(failure.get(key)):
            raise TraceError(f"failure.{key} must be {NAME.what}, got {show(failure.get(key))}")
    message = failure.get("message")
    if not _is_text(message):
        raise TraceError(f"failure.message must be a string of at most {MAX_TEXT_CHARS} characters")
    return Failure(step, failure["kind"], failure["id"], message)


def _is_text(value: object) -> TypeGuard[str]:
    """A string kvlife can write back as UTF-8 (no lone surrogate) and of bounded length."""
    if not isinstance(value, str) or len(value) > MAX_TEXT_CHARS:
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _meta(meta: Any) -> dict[str, Any]:
    """Provenance: an object of names to JSON values, nested at most `MAX_META_DEPTH` deep, strings bounded."""
    if not isinstance(meta, dict):
        raise TraceError("meta must be an object")
    problem = _meta_problem(meta, MAX_META_DEPTH)
    if problem:
        raise TraceError(f"meta: {problem}")
    if _count(meta) > MAX_META_VALUES:
        raise TraceError(f"meta: more than {MAX_META_VALUES} values")
    return meta


def _count(value: Any) -> int:
    children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
    return 1 + sum(_count(child) for child in children)


def _meta_problem(value: Any, depth: int) -> str | None:
    if value is None or isinstance(value, bool | int):
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else "a number too large to write back as JSON"
    if isinstance(value, str):
        return None if _is_text(value) else f"a string longer than {MAX_TEXT_CHARS} characters, or not UTF-8"
    if depth == 0:
        return f"nested more than {MAX_META_DEPTH} deep"
    if isinstance(value, dict):
        bad = next((k for k in value if not _is_name(k)), None)
        if bad is not None:
            return f"key {show(bad)} must be {NAME.what}"
        value = list(value.values())
    return next((p for p in (_meta_problem(v, depth - 1) for v in value) if p), None)
