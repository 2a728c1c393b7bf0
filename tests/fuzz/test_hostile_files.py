"""Hostile counterexample files: Hypothesis mutates valid traces (drop, retype, enlarge, nest, truncate, corrupt
bytes, huge step lists, extreme and combined sizes, strings built to escape) and kvlife's own commands run on
each, in-process, in a forked worker under an address-space limit (`Jail`).

Every file must end in exit 0, 1 or 2 within `TIME_BOUND_S`, a 2 with exactly one line on stderr, "reproduced"
only with a 1; `emit` must write an inert module (the emitted template's statements, nothing else) or refuse;
the campaign's re-check must agree with replay and never crash. `make test` runs `FILES_IN_TEST` files; the long
run is `make hostile-files N=100000` (`python -m tests.fuzz.test_hostile_files --files N`), which prints a summary.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import copy
import io
import json
import multiprocessing
import os
import re
import resource
import sys
import tempfile
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

from fuzz.emit import render
from fuzz.flags import whole
from fuzz.profiles import POOLS
from model.trace import CONFIG_SCHEMA, MAX_FILE_BYTES, MAX_NAME_CHARS, MAX_STEPS, MAX_TEXT_CHARS, step_schema

FILES_IN_TEST = 300
TIME_BOUND_S = 60.0  # per file, all its commands; the slowest valid files (pools near the limits) take seconds
# Address space the worker may add to what it has mapped after the fork: the loader's limits keep a replay's peak
# under about 2 GiB, so an estimate that let a larger pool through fails here as an allocation error (exit 70).
HEADROOM_BYTES = 3 << 30
EXIT_STATUSES = (0, 1, 2)
MAX_HOSTILE_BYTES = MAX_FILE_BYTES + (1 << 20)  # just past the loader's file limit: never exhausts the generator
BATCH_FILES = 100  # files generated, then judged, at a time in the long run: a batch can hold a few large ones
FAULT_CHOICES: tuple[list[str], ...] = (
    [],
    ["legacy_reuse_guard"],
    ["raw_row_free"],
    ["finish_skips_row_free"],
    ["no_such_fault"],
)
PLACEHOLDER = "\x00kvlife-raw-{}\x00"  # a string json.dumps writes as-is (escaped), spliced with raw JSON later
BREAKOUTS = (
    '"""',
    "'''",
    '"',
    "'",
    "\\",
    "\\n",
    "\n",
    "\r\n",
    "\x00",
    "{",
    "}",
    "{0}",
    "{trace}",
    "%s",
    "\u2028",
    "é",
    "日本",
    "\U0001f600",
    "\x1b[2J",
    "`",
    "|",
    "$(touch /tmp/kvlife-pwned)",
    "'); import os; os._exit(9) #",
    '"""; import os; os._exit(9); """',
    '\\"""',
    "\\x00",
    "</script>",
    "[link](http://x)",
)
RAW_JSON = (
    "NaN",
    "Infinity",
    "-Infinity",
    "1e999",
    "-0",
    "1" * 5000,
    "-" + "9" * 40,
    "[" * 50_000 + "]" * 50_000,
    '{"a":' * 3000 + "1" + "}" * 3000,
    '"\\ud800"',
    '"\\u0000"',
    "0.0",
    "1E2",
)
EXTREME_INTS = (0, -1, 1, 2**10, 2**20, 2**20 + 1, 2**24, 2**24 + 1, 2**31, 2**63, 2**64, 10**30)
OTHER_TYPES: tuple[Any, ...] = (None, True, False, 0, -1, 1.5, 1e308, "x", "", [], {}, [1], {"a": 1}, [[[]]])


# -- strategies -------------------------------------------------------------------------------------------


def breakout_text() -> st.SearchStrategy[str]:
    return st.lists(st.sampled_from(BREAKOUTS) | st.text(max_size=4), min_size=1, max_size=6).map("".join)


@st.composite
def valid_step(draw: st.DrawFn) -> dict[str, Any]:
    op = draw(st.sampled_from(sorted(step_schema())))
    shape = step_schema()[op]
    args = {name: draw(st.integers(0, 6 if name in ("req", "row") else 40)) for name in shape.args}
    choice = {name: draw(st.integers(0, 8)) for name in shape.choice if draw(st.booleans())}
    return {"op": op, "args": args, "choice": choice}


@st.composite
def valid_trace(draw: st.DrawFn) -> dict[str, Any]:
    """A file the loader accepts: a fuzzer pool, some faults, a few steps of any op, maybe a failure and meta."""
    config = {**POOLS[draw(st.sampled_from(sorted(POOLS)))], "faults": list(draw(st.sampled_from(FAULT_CHOICES)))}
    steps = draw(st.lists(valid_step(), max_size=12))
    doc: dict[str, Any] = {"format": "kvlife-trace", "version": 1, "config": config}
    doc |= {"seed": draw(st.none() | st.integers(0, 2**32)), "steps": steps}
    if steps and draw(st.booleans()):
        kind, ident = draw(st.sampled_from([("invariant", "row-exclusive"), ("accepted-forbidden", "reuse_released")]))
        doc["failure"] = {"step": len(steps) - 1, "kind": kind, "id": ident, "message": "m"}
    if draw(st.booleans()):
        doc["meta"] = {"source": "hostile", "shrunk": draw(st.booleans()), "excluded_ops": ["flush"]}
    return doc


def _children(value: Any) -> list[Any]:
    return list(value) if isinstance(value, dict) else list(range(len(value))) if isinstance(value, list) else []


def _walk(draw: st.DrawFn, doc: Any, want: type | None = None) -> tuple[Any, ...]:
    """A path into `doc` drawn by walking down from the root (never enumerating: a mutated document can hold
    millions of nodes); with `want`, the walk goes on until a value of that type or a leaf."""
    path: tuple[Any, ...] = ()
    value = doc
    while True:
        keys = _children(value)
        done = isinstance(value, want) if want else path and draw(st.integers(0, 2)) == 0
        if done or not keys:
            return path
        key = keys[draw(st.integers(0, len(keys) - 1))]
        path, value = (*path, key), value[key]


def _get(doc: Any, path: tuple[Any, ...]) -> Any:
    for key in path:
        doc = doc[key]
    return doc


@dataclass
class Hostile:
    """A document being mutated, its raw-JSON splices, and what was done to it (shown when a check fails)."""

    doc: Any
    raw: list[str] = field(default_factory=list)
    done: list[str] = field(default_factory=list)

    def splice(self, fragment: str) -> str:
        self.raw.append(fragment)
        return PLACEHOLDER.format(len(self.raw) - 1)

    def set(self, path: tuple[Any, ...], value: Any) -> None:
        if not path:
            self.doc = value
        else:
            _get(self.doc, path[:-1])[path[-1]] = value

    def serialize(self) -> bytes:
        text = json.dumps(self.doc)
        for index, fragment in enumerate(self.raw):
            text = text.replace(json.dumps(PLACEHOLDER.format(index)), fragment)
        return text.encode("utf-8", errors="surrogatepass")


def _mutate(draw: st.DrawFn, h: Hostile) -> None:
    path = _walk(draw, h.doc)
    how = draw(
        st.sampled_from(
            ["drop", "retype", "enlarge", "nest", "raw", "escape", "extra-key", "steps", "sizes", "sizes", "escape"]
        )
    )
    h.done.append(f"{how} at {path!r}"[:120])
    value = _get(h.doc, path)
    if how == "drop" and path:
        container = _get(h.doc, path[:-1])
        del container[path[-1]]
    elif how == "retype":
        h.set(path, copy.deepcopy(draw(st.sampled_from([v for v in OTHER_TYPES if type(v) is not type(value)]))))
    elif how == "enlarge":
        h.set(path, _enlarged(draw, value))
    elif how == "nest":
        depth = draw(st.integers(1, 40))
        h.set(path, _nested(value, depth, draw(st.booleans())))
    elif how == "raw":
        h.set(path, h.splice(draw(st.sampled_from(RAW_JSON))))
    elif how == "escape":
        _escape(draw, h)
    elif how == "extra-key":
        target = value if isinstance(value, dict) else h.doc if isinstance(h.doc, dict) else None
        if target is not None:
            target[draw(breakout_text() | st.sampled_from(["tree_core", "op", "seed", *CONFIG_SCHEMA]))] = 1
    elif how == "steps":
        _huge_steps(draw, h)
    elif how == "sizes":
        _extreme_sizes(draw, h)


def _enlarged(draw: st.DrawFn, value: Any) -> Any:
    """A larger value of the same kind: an extreme integer, a string of up to just past the file limit, a list
    repeated (kept under `MAX_HOSTILE_BYTES`), an object with many keys."""
    if isinstance(value, str):
        length = draw(st.sampled_from([MAX_NAME_CHARS + 1, MAX_TEXT_CHARS + 1, 100_000, MAX_FILE_BYTES + 1]))
        return ((value or "A") * (length // max(len(value), 1) + 1))[:length]
    if isinstance(value, list) and value:
        times = min(draw(st.sampled_from([2, 70, 1100])), MAX_HOSTILE_BYTES // max(len(json.dumps(value)), 1))
        return value * max(times, 1)
    if isinstance(value, dict):
        return {**value, **{f"k{i}": i for i in range(draw(st.sampled_from([10, 1000])))}}
    return draw(st.sampled_from(EXTREME_INTS))


def _nested(value: Any, depth: int, as_list: bool) -> Any:
    for _ in range(depth):
        value = [value] if as_list else {"x": value}
    return value


def _escape(draw: st.DrawFn, h: Hostile) -> None:
    """Strings built to escape, in every string field the loader accepts free text in, or anywhere."""
    if not isinstance(h.doc, dict):
        return
    where = draw(st.sampled_from(["failure", "meta", "any"]))
    if where == "failure" and isinstance(h.doc.get("steps"), list) and h.doc["steps"]:
        step = len(h.doc["steps"]) - 1
        h.doc["failure"] = {"step": step, **{k: draw(breakout_text()) for k in ("kind", "id", "message")}}
    elif where == "meta":
        h.doc["meta"] = {draw(breakout_text()): draw(breakout_text()) for _ in range(draw(st.integers(1, 3)))}
    else:
        path = _walk(draw, h.doc, str)
        if isinstance(_get(h.doc, path), str):
            h.set(path, draw(breakout_text()))


def _huge_steps(draw: st.DrawFn, h: Hostile) -> None:
    if not isinstance(h.doc, dict):
        return
    steps = h.doc.get("steps") if isinstance(h.doc.get("steps"), list) else []
    unit = steps or [{"op": "flush", "args": {}, "choice": {}}]
    count = draw(st.sampled_from([MAX_STEPS, MAX_STEPS + 1, 5_000, 120_000]))
    count = min(count, MAX_HOSTILE_BYTES * len(unit) // max(len(json.dumps(unit)), 1))
    h.doc["steps"] = (unit * (count // len(unit) + 1))[:count]
    h.doc.pop("failure", None)


# Pools near the memory limit that the loader lets through: each builds a large pool (a second or more), so they
# are drawn rarely. Each is (rows, width, tokens, page_size).
NEAR_LIMIT = ((1 << 13, (1 << 12) - 64, 64, 1), ((1 << 18) - 4096, 32, 64, 1), (4, 32, (1 << 20) - (1 << 14), 1))


def _extreme_sizes(draw: st.DrawFn, h: Hostile) -> None:
    """Sizes each within the loader's bounds whose combination is huge, near the memory limit, or tiny."""
    config = h.doc.get("config") if isinstance(h.doc, dict) else None
    if not isinstance(config, dict):
        return
    if draw(st.integers(0, 15)) == 0:
        rows, width, tokens, page_size = draw(st.sampled_from(NEAR_LIMIT))
    else:
        rows = draw(st.sampled_from([1, 4, 2**12, 2**13, 2**14, 2**16, 2**20]))
        width = draw(st.sampled_from([1, 32, 2**10, 2**12, 2**14, 2**20]))
        page_size = draw(st.sampled_from([1, 4, 64, 1024, 3]))
        tokens = draw(st.sampled_from([64, 2**16, 2**20, 2**21, 2**24]))
    config |= {"rows": rows, "width": width, "page_size": page_size, "tokens": tokens}
    if draw(st.integers(0, 7)) == 0:
        config |= {"row_pool": "decode", "pre_alloc_size": draw(st.sampled_from([1, 2**10, 2**20]))}


@st.composite
def hostile_file(draw: st.DrawFn) -> tuple[bytes, list[str], bool]:
    """The bytes of one mutated file, what was done to it, and whether to also emit it."""
    h = Hostile(draw(valid_trace()))
    for _ in range(draw(st.integers(0, 3))):
        before = copy.deepcopy((h.doc, h.raw))
        _mutate(draw, h)
        if len(h.serialize()) > MAX_HOSTILE_BYTES:  # mutations compound: keep each file about the loader's size
            (h.doc, h.raw), h.done[-1] = before, h.done[-1] + " (undone: too large)"
    data = h.serialize()
    cut = draw(st.sampled_from(["none", "none", "none", "truncate", "corrupt", "insert", "duplicate-key"]))
    if cut == "truncate" and data:
        data = data[: draw(st.integers(0, len(data) - 1))]
    elif cut in ("corrupt", "insert") and data:
        at = draw(st.integers(0, len(data) - 1))
        junk = draw(st.sampled_from([b"\xff", b"\xc3", b"\x00", b"\xed\xa0\x80", b"}", b'"', b"\\", b"\n"]))
        data = data[:at] + junk + data[at + (cut == "corrupt") :]
    elif cut == "duplicate-key":
        data = data.replace(b"{", b'{"seed": 1, ', 1)
    if cut != "none":
        h.done.append(cut)
    return data, h.done, draw(st.integers(0, 3)) == 0


# -- the jail ---------------------------------------------------------------------------------------------


@dataclass
class Outcome:
    """What kvlife's commands did with one file."""

    replay: int
    replay_err: str
    replay_out: str
    emit: int | None = None
    emit_err: str = ""
    emitted: str | None = None
    recheck: str | None = None
    tracebacks: list[str] = field(default_factory=list)
    seconds: float = 0.0


def _vm_bytes() -> int:
    status = Path("/proc/self/status").read_text()
    return int(re.search(r"VmSize:\s+(\d+) kB", status).group(1)) * 1024  # type: ignore[union-attr]


def _run_command(argv: list[str]) -> tuple[int, str, str]:
    from fuzz.__main__ import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 2
        except BaseException:  # escaped kvlife's own handler: the worst case, reported as -1
            err.write(traceback.format_exc())
            code = -1
    return code, out.getvalue(), err.getvalue()


def _tracebacks(text: str) -> list[str]:
    """The traceback files named in an internal-error line, read back and removed."""
    found = []
    for name in re.findall(r"traceback in (\S+\.txt)", text):
        path = Path(name)
        if path.is_file():
            found.append(path.read_text()[-3000:])
            path.unlink()
    return found


def _judge_file(data: bytes, also_emit: bool, folder: Path) -> Outcome:
    from fuzz.campaign.resume import recheck

    path = folder / "trace.json"
    path.write_bytes(data)
    start = time.perf_counter()
    code, out, err = _run_command(["replay", str(path)])
    outcome = Outcome(code, err, out[-2000:])
    if also_emit:
        regressions = folder / "regressions"
        outcome.emit, _, outcome.emit_err = _run_command(["emit", str(path), "--out", str(regressions)])
        emitted = sorted(regressions.glob("*.py"))
        outcome.emitted = emitted[0].read_text() if emitted else None
        for stale in emitted:
            stale.unlink()
        (item,) = recheck(folder)
        outcome.recheck = item.status
    outcome.tracebacks = _tracebacks(err + outcome.emit_err + (outcome.recheck or ""))
    outcome.seconds = time.perf_counter() - start
    path.unlink()
    return outcome


def _worker(conn: Connection) -> None:
    """The jailed side: an address-space limit, one torch thread, then one file at a time until the pipe closes."""
    import torch

    torch.set_num_threads(1)
    limit = _vm_bytes() + HEADROOM_BYTES
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    parent = os.getppid()
    with tempfile.TemporaryDirectory(prefix="kvlife-hostile-") as folder:
        while os.getppid() == parent:  # a sibling's fork keeps the pipe open: watch the parent as well
            if not conn.poll(1.0):
                continue
            try:
                data, also_emit = conn.recv()
            except EOFError:
                return
            conn.send(_judge_file(data, also_emit, Path(folder)))


class Jail:
    """One forked worker under an address-space limit; a file that kills it or outlives `TIME_BOUND_S` is
    reported as such and the worker is replaced."""

    def __init__(self) -> None:
        self.conn: Connection
        self.proc: Any
        self.started = 0.0
        self._start()

    def _start(self) -> None:
        context = multiprocessing.get_context("fork")
        self.conn, child = context.Pipe()
        self.proc = context.Process(target=_worker, args=(child,), daemon=True)
        self.proc.start()
        child.close()

    def submit(self, data: bytes, also_emit: bool) -> None:
        self.started = time.monotonic()
        with contextlib.suppress(OSError):  # a worker that died already: `collect` says so
            self.conn.send((data, also_emit))

    def collect(self) -> Outcome | str:
        """The outcome, or why there is none ('died: ...', 'timeout'); call once `conn` is ready, the worker has
        died, or `TIME_BOUND_S` has passed."""
        with contextlib.suppress(EOFError, OSError):  # a dead worker's pipe reads as EOF or a reset
            if self.conn.poll(0):
                return self.conn.recv()
        self.proc.join(1.0)  # a worker whose pipe just closed may not be reaped yet
        why = "timeout" if self.proc.is_alive() else f"died: exit code {self.proc.exitcode}"
        self.close()
        self._start()
        return why

    def judge(self, data: bytes, also_emit: bool) -> Outcome | str:
        self.submit(data, also_emit)
        self.conn.poll(TIME_BOUND_S)
        return self.collect()

    def close(self) -> None:
        self.conn.close()
        self.proc.kill()
        self.proc.join()


# -- the verdict ------------------------------------------------------------------------------------------


def _skeleton(tree: ast.Module) -> str:
    """The module's statements with the three things an emitted module may vary blanked: the docstring, the
    TRACE literal and the test's name."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            node.value = ""
        if isinstance(node, ast.FunctionDef):
            node.name = "test_"
    return ast.dump(tree)


TEMPLATE = _skeleton(ast.parse(render("{}", "x", "", "")))


def inert_problem(source: str) -> str | None:
    """Why an emitted module is not the emitter's template (its docstring, one import, TRACE = a string literal,
    a test whose only statement is `replay_regression(TRACE)`), or None."""
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        return f"not valid Python: {exc.msg}"
    if _skeleton(tree) != TEMPLATE:
        return f"its statements differ from the template's: {ast.unparse(tree)[:300]}"
    return None


def problems(outcome: Outcome | str) -> list[str]:
    """Everything wrong with what kvlife did on one file (empty: all is well)."""
    if isinstance(outcome, str):
        return [outcome]
    found = [f"internal error: {tb.strip().splitlines()[-1]}" for tb in outcome.tracebacks]
    if outcome.replay not in EXIT_STATUSES:
        found.append(f"replay exit {outcome.replay}: {outcome.replay_err.strip()[-500:]}")
    if outcome.replay == 2 and len(outcome.replay_err.strip().splitlines()) != 1:
        found.append(f"replay exit 2 with {len(outcome.replay_err.strip().splitlines())} lines on stderr")
    if ("reproduced" in outcome.replay_out) != (outcome.replay == 1):
        found.append(f"replay exit {outcome.replay} {'with' if outcome.replay != 1 else 'without'} 'reproduced'")
    if outcome.emit is not None:
        found += _emit_problems(outcome)
    return found


def _emit_problems(outcome: Outcome) -> list[str]:
    found = []
    if outcome.emit not in (0, 2):
        found.append(f"emit exit {outcome.emit}: {outcome.emit_err.strip()[-500:]}")
    if outcome.emit == 2 and (outcome.replay != 2 or len(outcome.emit_err.strip().splitlines()) != 1):
        found.append(f"emit refused a file replay took (exit {outcome.replay}), or on more than one line")
    if outcome.emit == 0:
        problem = inert_problem(outcome.emitted or "") if outcome.emitted else "no module written"
        found += [f"emitted module: {problem}"] if problem else []
    status = outcome.recheck or ""
    agrees = {0: status == "no longer reproduces", 1: status == "reproduces", 2: status.startswith("invalid: ")}
    if not agrees.get(outcome.replay, False):
        found.append(f"re-check says {status[:200]!r} where replay exited {outcome.replay}")
    return found


# -- make test --------------------------------------------------------------------------------------------

_JAIL: list[Jail] = []


def _jail() -> Jail:
    if not _JAIL:
        _JAIL.append(Jail())
    return _JAIL[0]


@settings(
    max_examples=FILES_IN_TEST,
    derandomize=True,
    database=None,
    deadline=None,
    phases=(Phase.explicit, Phase.generate, Phase.shrink),
    suppress_health_check=list(HealthCheck),
)
@given(hostile_file())
def test_every_hostile_file_ends_in_0_1_or_2_with_one_line_reasons(case: tuple[bytes, list[str], bool]) -> None:
    data, done, also_emit = case
    found = problems(_jail().judge(data, also_emit))
    assert not found, f"{found} (mutations: {done}; first bytes: {data[:300]!r})"


FINDINGS = Path(__file__).resolve().parents[2] / "upstream" / "findings.json"


@st.composite
def hostile_findings(draw: st.DrawFn) -> bytes:
    """The findings manifest, mutated as the trace files are."""
    h = Hostile(json.loads(FINDINGS.read_text()))
    for _ in range(draw(st.integers(1, 3))):
        _mutate(draw, h)
    return h.serialize()


@settings(max_examples=100, derandomize=True, database=None, deadline=None, suppress_health_check=list(HealthCheck))
@given(hostile_findings())
def test_a_hostile_findings_manifest_is_loaded_or_refused_in_one_line(data: bytes) -> None:
    from fuzz.upstream_findings import FindingsError, load_findings

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "findings.json"
        path.write_bytes(data)
        try:
            findings = load_findings(path)
        except FindingsError as exc:
            assert "\n" not in str(exc) and str(exc).isprintable()
            return
    assert all(f.replay.is_file() and f.replay.is_relative_to(FINDINGS.parents[1]) for f in findings)


def test_the_jail_reports_a_file_that_kills_the_worker() -> None:
    jail = Jail()
    try:
        jail.submit(b"", False)
        jail.proc.kill()
        jail.conn.poll(TIME_BOUND_S)
        assert str(jail.collect()).startswith("died: exit code")
        assert isinstance(jail.judge(b"{}", False), Outcome), "the replaced worker judges the next file"
    finally:
        jail.close()


def test_the_verdict_catches_what_it_exists_to_catch() -> None:
    bad = Outcome(2, "line one\nline two\n", "")
    assert problems(bad) == ["replay exit 2 with 2 lines on stderr"]
    assert problems(Outcome(70, "x\n", "")) == ["replay exit 70: x"]
    assert problems(Outcome(0, "", "reproduced: step 1")) == ["replay exit 0 with 'reproduced'"]
    assert inert_problem('"""d"""\nimport os\nTRACE = "x"\ndef test_x():\n    replay_regression(TRACE)\n')
    assert inert_problem("TRACE = 1 +") == "not valid Python: invalid syntax"


# -- the long run -----------------------------------------------------------------------------------------


@dataclass
class Tally:
    """The long run's counts: replay's exit statuses, emitted modules checked, and every kind of problem."""

    files: int = 0
    exits: Counter[int] = field(default_factory=Counter)
    emitted: int = 0
    internal_errors: int = 0
    deaths: int = 0
    timeouts: int = 0
    long_reasons: int = 0
    slowest_s: float = 0.0
    bad: list[str] = field(default_factory=list)

    def add(self, outcome: Outcome | str, done: list[str], data: bytes) -> None:
        self.files += 1
        found = problems(outcome)
        if isinstance(outcome, Outcome):
            self.exits[outcome.replay] += 1
            self.emitted += outcome.emit == 0 and not any(p.startswith("emitted module") for p in found)
            self.internal_errors += bool(outcome.tracebacks) or outcome.replay not in EXIT_STATUSES
            self.long_reasons += any("lines on stderr" in p or "more than one line" in p for p in found)
            self.slowest_s = max(self.slowest_s, outcome.seconds)
        else:
            self.timeouts += outcome == "timeout"
            self.deaths += outcome != "timeout"
        if found:
            self.bad.append(f"{found} (mutations: {done}; first bytes: {data[:200]!r})")

    def summary(self, seconds: float) -> str:
        exits = ", ".join(f"exit {code}: {self.exits[code]}" for code in sorted(self.exits))
        return (
            f"hostile files: {self.files} files in {seconds:.0f} s; {exits}; {self.emitted} emitted tests inert; "
            f"crashes: {self.internal_errors} internal errors, {self.deaths} workers died, {self.timeouts} over "
            f"{TIME_BOUND_S:.0f} s; {self.long_reasons} reasons longer than one line; slowest file "
            f"{self.slowest_s:.1f} s; {len(self.bad)} files with any problem"
        )


def _batch(count: int, batch_seed: int) -> list[tuple[bytes, list[str], bool]]:
    cases: list[tuple[bytes, list[str], bool]] = []

    @seed(batch_seed)
    @settings(
        max_examples=count,
        database=None,
        deadline=None,
        phases=(Phase.generate,),
        suppress_health_check=list(HealthCheck),
    )
    @given(hostile_file())
    def collect(case: tuple[bytes, list[str], bool]) -> None:
        cases.append(case)

    collect()
    return cases


def _run_long(files: int, workers: int, base_seed: int) -> Tally:
    tally, jails = Tally(), [Jail() for _ in range(workers)]
    start, batch_index = time.monotonic(), 0
    try:
        while tally.files < files:
            pending = _batch(min(BATCH_FILES, files - tally.files), base_seed + batch_index)
            batch_index += 1
            _judge_all(pending, jails, tally)
            if batch_index % 10 == 0:
                print(f"  {tally.summary(time.monotonic() - start)}", flush=True)
    finally:
        for jail in jails:
            jail.close()
    return tally


def _judge_all(cases: list[tuple[bytes, list[str], bool]], jails: list[Jail], tally: Tally) -> None:
    """Judge `cases` on every jail at once, each jail one file at a time."""
    queue, busy = list(reversed(cases)), dict[Jail, tuple[bytes, list[str], bool]]()
    while queue or busy:
        for jail in jails:
            if jail not in busy and queue:
                case = queue.pop()
                jail.submit(case[0], case[2])
                busy[jail] = case
        wait([jail.conn for jail in busy], timeout=1.0)
        for jail in list(busy):
            if jail.conn.poll(0) or not jail.proc.is_alive() or time.monotonic() - jail.started >= TIME_BOUND_S:
                data, done, _ = busy.pop(jail)
                tally.add(jail.collect(), done, data)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.fuzz.test_hostile_files")
    parser.add_argument("--files", type=whole(1, 10**8), default=100_000)
    parser.add_argument("--workers", type=whole(1, 64), default=min(64, os.cpu_count() or 1))
    parser.add_argument("--seed", type=whole(0, 2**32 - 1), default=int.from_bytes(os.urandom(4), "little"))
    args = parser.parse_args(argv)
    print(f"hostile files: {args.files} files on {args.workers} jailed workers, seed {args.seed}", flush=True)
    start = time.monotonic()
    tally = _run_long(args.files, args.workers, args.seed)
    for line in tally.bad[:20]:
        print(f"  PROBLEM {line}")
    print(tally.summary(time.monotonic() - start))
    return 0 if not tally.bad else 1


if __name__ == "__main__":
    sys.exit(main())
