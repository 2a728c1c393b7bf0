"""Checks of what a user types on the command line: bounded whole numbers and seconds (argparse types, so a bad
value is exit 2 with argparse's one-line error), folders kvlife writes into (checked before any work), and
the one torch thread every command steps its pools with."""

from __future__ import annotations

import argparse
import math
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path

from model.trace import one_line

MAX_SECONDS = 7 * 24 * 3600.0  # a week: longer than any campaign or mutant budget anyone runs
_WHOLE = re.compile(r"\s*([0-9]{1,20})\s*")


def whole(low: int, high: int) -> Callable[[str], int]:
    """An argparse type: a whole number in [low, high], ASCII digits only."""

    def convert(text: str) -> int:
        match = _WHOLE.fullmatch(text)
        if not match or not low <= int(match.group(1)) <= high:
            raise argparse.ArgumentTypeError(f"expected a whole number in [{low}, {high}], got {text!r}")
        return int(match.group(1))

    return convert


def seconds(text: str) -> float:
    """An argparse type: a positive, finite number of seconds, at most `MAX_SECONDS`."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and 0 < value <= MAX_SECONDS):
        raise argparse.ArgumentTypeError(f"a budget must be a number of seconds in (0, {MAX_SECONDS:g}], got {text!r}")
    return value


def folder_problem(path: Path) -> str | None:
    """Why kvlife could not create or write into the folder `path` (one line), or None. Nothing is created."""
    try:
        if path.exists():
            if not path.is_dir():
                return f"{one_line(str(path))} exists and is not a folder"
            probe = path
        else:
            probe = next((p for p in path.absolute().parents if p.exists()), Path("/"))
            if not probe.is_dir():
                return f"{one_line(str(path))} cannot be created: {one_line(str(probe))} is not a folder"
    except (OSError, ValueError) as exc:
        return f"{one_line(str(path))} is not a usable folder path: {getattr(exc, 'strerror', None) or exc}"
    if not os.access(probe, os.W_OK | os.X_OK):
        return f"{one_line(str(path))} cannot be written: {one_line(str(probe))} is not writable"
    return None


def one_torch_thread() -> None:
    """Run torch's CPU ops on one thread: the lockstep's pools are tiny, and a second intra-op thread costs more than
    it gives (`torch.repeat_interleave` on a 12-token extend takes about 0.8 ms with two threads on a busy 2-core
    machine, 17 us with one); parallelism comes from one process per core (`fuzz campaign`). Torch is not
    imported for this (a command that refuses its input never loads it): an `OMP_NUM_THREADS` the user set wins."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch = sys.modules.get("torch")
    if torch is not None and os.environ["OMP_NUM_THREADS"] == "1":
        torch.set_num_threads(1)
