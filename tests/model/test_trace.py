"""Counterexample files are untrusted input: every malformed file is rejected with a one-line reason, sizes that
are each in bounds are refused together when the pool would not fit, and written files follow the umask."""

from __future__ import annotations

import dataclasses
import json
import os
import stat
from pathlib import Path

import pytest

import fuzz.replay
from fuzz.replay import load_trace
from fuzz.targets import POOL_KEYS
from impl.engine import PoolConfig
from model.actions import CONTRACT, actions_for
from model.batch import batch_action
from model.trace import (
    CONFIG_SCHEMA,
    FAULT_ARGS,
    PAGE_BYTES,
    POOL_BYTES_LIMIT,
    REPLAY_WORK_LIMIT,
    ROW_BYTES,
    ROW_ENTRY_BYTES,
    Failure,
    Step,
    Trace,
    TraceError,
    dump,
    load,
    parse,
    pool_bytes,
    step_schema,
)

ADMIT_ARGS = {"req": 0, "prompt": 3, "n": 3, "family": 0, "prefix": 0}
GOOD = {
    "format": "kvlife-trace",
    "version": 1,
    "config": {
        "target": "reference",
        "device": "cpu",
        "rows": 4,
        "tokens": 64,
        "width": 32,
        "page_size": 1,
        "cache": "chunk",
        "faults": [],
    },
    "seed": 1,
    "steps": [
        {"op": "admit", "args": ADMIT_ARGS, "choice": {"row": 4, "dup": 0}},
        {"op": "finish", "args": {"req": 0}, "choice": {"dup": 0}},
    ],
    "failure": {"step": 1, "kind": "invariant", "id": "row-exclusive", "message": "m"},
}


def _doc(**changes: object) -> bytes:
    return json.dumps({**GOOD, **changes}).encode()


def _step(**changes: object) -> bytes:
    return _doc(steps=[{**GOOD["steps"][0], **changes}])  # type: ignore[index]


def _cfg(**changes: object) -> bytes:
    return _doc(config={**GOOD["config"], **changes})  # type: ignore[dict-item]


BAD = {
    "empty": (b"", "empty"),
    "blank": (b"  \n", "empty"),
    "invalid-json": (b"{not json", "not valid JSON"),
    "nan": (b'{"format": NaN}', "not a number"),
    "not-object": (b"[1, 2]", "JSON object"),
    "wrong-format": (_doc(format="pickle"), "format must be"),
    "wrong-version": (_doc(version=2), "version 2 is not supported"),
    "unknown-op": (_step(op="format_disk"), "unknown op"),
    "absurd-req": (_step(args={**ADMIT_ARGS, "req": 10**30}), "args.req must be an integer"),
    "negative-len": (_step(args={**ADMIT_ARGS, "n": -1}), "args.n must be an integer"),
    "float-arg": (_step(args={**ADMIT_ARGS, "n": 1.5}), "args.n must be an integer"),
    "bool-arg": (_step(args={**ADMIT_ARGS, "req": True}), "args.req must be an integer"),
    "extra-arg": (_step(args={**ADMIT_ARGS, "x": 1}), "unexpected args"),
    "missing-arg": (_step(args={"req": 0}), "missing args"),
    "extra-choice": (_step(choice={"row": 4, "dup": 0, "freed": 1}), "unexpected choice"),
    "absurd-rows": (_cfg(rows=10**12), "config.rows must be an integer"),
    "string-tokens": (_cfg(tokens="64"), "config.tokens must be an integer"),
    "bad-device": (_cfg(device="tpu"), "config.device must be one of"),
    "faults-not-list": (_cfg(faults="legacy_reuse_guard"), "config.faults must be a list"),
    "failure-step": (_doc(failure={"step": 99, "kind": "k", "id": "i", "message": "m"}), "failure.step"),
    "steps-not-list": (_doc(steps={}), "steps must be a list"),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_malformed_trace_is_rejected_with_a_reason(name: str) -> None:
    data, reason = BAD[name]
    with pytest.raises(TraceError, match=reason) as info:
        parse(data)
    assert "\n" not in str(info.value)


def test_deep_nesting_is_rejected() -> None:
    with pytest.raises(TraceError):
        parse(b"[" * 100_000 + b"]" * 100_000)


def test_oversized_file_is_rejected_before_reading(tmp_path: Path) -> None:
    big = tmp_path / "big.json"
    with big.open("wb") as f:
        f.truncate(17 << 20)
    with pytest.raises(TraceError, match="limit"):
        load(big)


def test_missing_file_is_a_trace_error(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="cannot read"):
        load(tmp_path / "nope.json")


def test_round_trip(tmp_path: Path) -> None:
    trace = Trace(
        GOOD["config"],
        7,
        [Step("admit", ADMIT_ARGS, {"row": 4, "dup": 0})],  # type: ignore[arg-type]
        Failure(0, "invariant", "x", "y"),
        {"source": "test"},
    )
    dump(trace, tmp_path / "t.json")
    assert load(tmp_path / "t.json") == trace
    assert not list(tmp_path.glob(".*tmp"))


# -- sizes, schema and strings ------------------------------------------------------------------------------


def test_a_pool_too_large_for_the_limit_is_refused_naming_the_fields_and_the_limit() -> None:
    with pytest.raises(TraceError) as info:
        parse(_cfg(rows=1 << 20, width=1 << 20))  # each in its bounds, together 4 TiB
    reason = str(info.value)
    assert "config.rows x config.width" in reason and "256.0 MiB limit" in reason and "4.0 TiB" in reason


def test_pages_count_towards_the_pool_limit() -> None:
    with pytest.raises(TraceError, match=r"config.tokens / config.page_size"):
        parse(_cfg(tokens=1 << 24, page_size=1))
    assert parse(_cfg(tokens=1 << 24, page_size=1 << 10)).config["tokens"] == 1 << 24


def test_many_steps_on_a_large_pool_exceed_the_replay_work_limit() -> None:
    big = {**GOOD["config"], "rows": 1 << 12, "width": 1 << 13}  # type: ignore[dict-item]
    assert pool_bytes(big) <= POOL_BYTES_LIMIT < REPLAY_WORK_LIMIT
    steps = [GOOD["steps"][1]] * (REPLAY_WORK_LIMIT // pool_bytes(big) + 1)  # type: ignore[index]
    with pytest.raises(TraceError, match=r"^steps: .* replay work, more than the 1.0 GiB limit"):
        parse(_doc(config=big, steps=steps, failure=None))


def test_pool_bytes_counts_the_row_table_rows_and_pages() -> None:
    config = {"rows": 3, "width": 10, "tokens": 64, "page_size": 4, "pre_alloc_size": 2}
    assert pool_bytes(config) == 6 * 10 * ROW_ENTRY_BYTES + 6 * ROW_BYTES + 17 * PAGE_BYTES


def test_an_unknown_config_key_is_refused_by_name() -> None:
    with pytest.raises(TraceError, match=r"^config.tree_shape is not a config key"):
        parse(_cfg(tree_shape=True))


def test_the_config_schema_is_poolconfigs_fields_with_the_target_and_faults() -> None:
    fields = {f.name for f in dataclasses.fields(PoolConfig)}
    harness = {"target", "faults", "fault_rate"}
    assert set(CONFIG_SCHEMA) == fields | harness, "a new PoolConfig field needs a CONFIG_SCHEMA rule"
    assert set(POOL_KEYS) <= set(CONFIG_SCHEMA)


def test_the_step_schema_is_the_action_table() -> None:
    batch = batch_action(actions_for())
    executable = {"batch", "retract_decode", "decode_round", "pause_retract", "prefill_round"}
    assert set(step_schema()) == {a.name for a in CONTRACT} | executable | {"differential", "drain"}
    for action in (*CONTRACT, batch):
        params = {name for name, _ in action.params}
        assert set(step_schema()[action.name].args) == params - set(action.choice) | set(FAULT_ARGS)
        assert set(step_schema()[action.name].choice) == set(action.choice)


def test_a_key_the_lockstep_does_not_pass_to_the_pool_is_refused_at_replay(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As a build whose lockstep does not pass `row_pool` would refuse it (today every config key is passed)."""
    assert set(CONFIG_SCHEMA) - {"target", "faults", "fault_rate"} <= set(POOL_KEYS)
    path = tmp_path / "t.json"
    unpassed = "row_pool"
    monkeypatch.setattr(fuzz.replay, "_PASSED", fuzz.replay._PASSED - {unpassed})
    default = next(f.default for f in dataclasses.fields(PoolConfig) if f.name == unpassed)
    other = {bool: lambda v: not v, int: lambda v: v + 1, str: lambda v: "decode" if v == "req" else "req"}
    path.write_bytes(_cfg(**{unpassed: other[type(default)](default)}))
    with pytest.raises(TraceError, match=f"config.{unpassed} = .* is not passed to the pool"):
        load_trace(path, None)
    path.write_bytes(_cfg(**{unpassed: default}))  # its default changes nothing: accepted
    assert load_trace(path, None).config[unpassed] == default


STRICT = {
    "duplicate-key": (_doc(seed=1).replace(b'"seed": 1', b'"seed": 1, "seed": 2'), "key 'seed' appears twice"),
    "huge-int": (_cfg(rows=10**40), r"config.rows must be an integer in \[1, 1048576\], got 1000000000000"),
    "thousands-of-digits": (b'{"format": ' + b"9" * 5000 + b"}", "an integer of thousands of digits"),
    "not-utf8": (b'{"format": "\xff"}', "not UTF-8"),
    "lone-surrogate": (_doc(failure={**GOOD["failure"], "message": "\ud800"}), "failure.message"),  # type: ignore[dict-item]
    "control-in-kind": (_doc(failure={**GOOD["failure"], "kind": "a\nb"}), "failure.kind"),  # type: ignore[dict-item]
    "top-level-extra": (_doc(payload=1), "unexpected key 'payload'"),
    "step-extra": (_step(code="x"), "unexpected key 'code'"),
    "meta-deep": (_doc(meta={"a": [[[[["x"]]]]]}), "nested more than 4"),
    "meta-infinite": (b'{"format":"kvlife-trace","version":1,"config":{},"meta":{"x":1e999}}', "config"),
    "negative-seed": (_doc(seed=-1), "seed must be"),
    "too-many-steps": (_doc(steps=[GOOD["steps"][1]] * 1001, failure=None), "1001 steps is more than"),  # type: ignore[index]
}


@pytest.mark.parametrize("name", sorted(STRICT))
def test_strict_json_and_schema_refusals_are_one_line(name: str) -> None:
    data, reason = STRICT[name]
    with pytest.raises(TraceError, match=reason) as info:
        parse(data)
    assert "\n" not in str(info.value) and str(info.value).isprintable()


def test_a_non_finite_meta_number_is_refused() -> None:
    data = _doc(meta={"x": 1}).replace(b'{"x": 1}', b'{"x": 1e999}')
    with pytest.raises(TraceError, match="meta: a number too large"):
        parse(data)


def test_breakout_strings_are_accepted_in_free_text_and_shown_escaped_in_reasons() -> None:
    breakout = "\"\"\"'''\\\n{x}\x00é\x1b[2J"
    trace = parse(_doc(failure={**GOOD["failure"], "message": breakout}, meta={"source": breakout}))  # type: ignore[dict-item]
    assert trace.failure is not None and trace.failure.message == breakout and trace.meta["source"] == breakout
    with pytest.raises(TraceError) as info:
        parse(_cfg(device=breakout))
    assert "\x1b" not in str(info.value) and "\\x1b" in str(info.value)


def test_a_fifo_or_a_folder_is_refused_without_waiting(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    for path, reason in ((fifo, "not a regular file"), (tmp_path, "not a regular file")):
        with pytest.raises(TraceError, match=reason):
            load(path)


@pytest.mark.parametrize(("umask", "mode"), [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_written_files_have_the_mode_the_umask_gives(tmp_path: Path, umask: int, mode: int) -> None:
    old = os.umask(umask)
    try:
        dump(Trace(GOOD["config"], None, []), tmp_path / "t.json")  # type: ignore[arg-type]
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "t.json").stat().st_mode) == mode
    assert [p.name for p in tmp_path.iterdir()] == ["t.json"], "the temporary file is gone"
