"""Counterexample files are untrusted input: every malformed file is rejected with a one-line reason."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from model.trace import Failure, Step, Trace, TraceError, dump, load, parse

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
