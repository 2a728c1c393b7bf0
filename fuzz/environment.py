"""The environment variables kvlife reads, checked like any other input: a bad value is refused with one line
naming the variable (`BadEnvironment`), never a traceback from deep inside.

  KVLIFE_REGRESSION_FAULTS  emitted regression tests: comma-separated fault names to turn on (default none)
  KVLIFE_CAMPAIGN_DB        fuzz/hypofuzz_targets.py: the campaign's example database folder
  KVLIFE_HYPOFUZZ_EXAMPLES  fuzz/hypofuzz_targets.py: test cases per target under plain pytest, 1 to 1,000,000
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

from model.trace import one_line, show

MAX_ENV_CHARS = 4096
_WHOLE = re.compile(r"[0-9]{1,9}")


class BadEnvironment(ValueError):
    """An environment variable kvlife reads holds a value it refuses; the message says which and why."""

    def __init__(self, message: str) -> None:
        super().__init__(one_line(message))


def _raw(name: str, env: Mapping[str, str] | None) -> str | None:
    value = (os.environ if env is None else env).get(name)
    if value is not None and len(value) > MAX_ENV_CHARS:
        raise BadEnvironment(f"{name} is {len(value)} characters long, more than {MAX_ENV_CHARS}")
    return value


def env_count(name: str, default: int, high: int, env: Mapping[str, str] | None = None) -> int:
    """A whole number in [1, `high`], or `default` when the variable is unset or empty."""
    value = _raw(name, env)
    if value is None or not value.strip():
        return default
    text = value.strip()
    if not _WHOLE.fullmatch(text) or not 1 <= int(text) <= high:
        raise BadEnvironment(f"{name} must be a whole number in [1, {high}], got {show(value)}")
    return int(text)


def env_folder(name: str, default: Path, env: Mapping[str, str] | None = None) -> Path:
    """A folder path (it need not exist yet), or `default` when unset or empty."""
    value = _raw(name, env)
    if value is None or not value.strip():
        return default
    if "\x00" in value:
        raise BadEnvironment(f"{name} must be a folder path, got {show(value)}")
    path = Path(value)
    if path.exists() and not path.is_dir():
        raise BadEnvironment(f"{name} must be a folder, but {show(value)} is not one")
    return path


def env_names(name: str, known: Iterable[str], env: Mapping[str, str] | None = None) -> list[str]:
    """Comma-separated names, each one of `known`; none when unset or empty."""
    value = _raw(name, env) or ""
    names = [n.strip() for n in value.split(",") if n.strip()]
    allowed = sorted(known)
    unknown = [n for n in names if n not in allowed]
    if unknown:
        raise BadEnvironment(f"{name} names {show(unknown[0])}, which is not one of {', '.join(allowed)}")
    return names
