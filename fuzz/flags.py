"""Checks of what a user types on the command line: bounded whole numbers and seconds (argparse types, so a bad
value is exit 2 with argparse's one-line error), and folders kvlife writes into (checked before any work)."""

from __future__ import annotations

import argparse
import math
import os
import re
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
