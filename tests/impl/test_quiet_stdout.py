"""`quiet_stdout`: what upstream prints while it refuses (the tree dump of an out-of-memory refusal, which the Rust
tree core writes straight to file descriptor 1) stays out of a run's output, and output after the block is kept."""

from __future__ import annotations

import os
import sys

import pytest

from impl.upstream.target import quiet_stdout


def test_python_and_descriptor_writes_inside_are_dropped_and_output_after_is_kept(
    capfd: pytest.CaptureFixture[str],
) -> None:
    print("before", flush=True)
    with quiet_stdout():
        print("from python")
        sys.stdout.flush()
        os.write(1, b"from the descriptor\n")
    print("after", flush=True)
    os.write(1, b"descriptor after\n")
    out = capfd.readouterr().out
    assert "from python" not in out and "from the descriptor" not in out
    assert out.splitlines() == ["before", "after", "descriptor after"]


def test_the_descriptor_comes_back_when_the_block_raises(capfd: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(RuntimeError), quiet_stdout():
        os.write(1, b"dropped\n")
        raise RuntimeError("out of memory")
    os.write(1, b"kept\n")
    assert capfd.readouterr().out == "kept\n"
