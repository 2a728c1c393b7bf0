"""The theorem manifest (`model/manifest.json`): each theorem's expected outcome, what its proof assumes, and
the runtime of its last recorded run.

Its rows and the theorems in code are one set: a theorem with no row, or a row that names no theorem, fails
`python -m model prove` (under `--only` too), so a theorem cannot leave `make verify` unnoticed. A row's
assumptions must equal the theorem's (`Theorem.assumes`), so a proof that comes to assume more fails as well.
Runtimes are recorded (`--record-seconds`), never compared: they say what a run cost, not whether it passed.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from model.prove import Result
from model.theorems import Theorem

MANIFEST = Path(__file__).with_name("manifest.json")


@dataclass(frozen=True)
class Row:
    """One theorem's row: expected outcome (and depth, for a refutation), assumptions, last runtime."""

    outcome: str
    depth: int | None
    assumes: tuple[str, ...]
    seconds: float | None


def load(path: Path) -> dict[str, Row]:
    """The manifest's rows by theorem name; ValueError (one line) when it cannot be read or a row is malformed."""
    try:
        theorems = json.loads(path.read_text())["theorems"]
        if not isinstance(theorems, dict):
            raise TypeError("'theorems' is not an object")
        return {name: _row(name, fields) for name, fields in theorems.items()}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"cannot read manifest {path}: {exc}") from None


def _row(name: str, fields: Any) -> Row:
    if not isinstance(fields, dict) or not isinstance(fields.get("outcome"), str):
        raise TypeError(f"row {name!r} has no outcome")
    depth, assumes, seconds = fields.get("depth"), fields.get("assumes", []), fields.get("seconds")
    if depth is not None and (not isinstance(depth, int) or isinstance(depth, bool)):
        raise TypeError(f"row {name!r}: depth {depth!r} is not a whole number")
    if not isinstance(assumes, list) or not all(isinstance(a, str) for a in assumes):
        raise TypeError(f"row {name!r}: assumes is not a list of strings")
    if seconds is not None and (not isinstance(seconds, int | float) or isinstance(seconds, bool) or seconds < 0):
        raise TypeError(f"row {name!r}: seconds {seconds!r} is not a duration")
    return Row(fields["outcome"], depth, tuple(assumes), seconds)


def unpaired(rows: dict[str, Row], theorems: Iterable[Theorem]) -> list[str]:
    """Each theorem with no row and each row with no theorem, one line apiece."""
    names = [t.name for t in theorems]
    missing = [f"theorem {name} has no manifest row" for name in names if name not in rows]
    orphans = [f"manifest row {name} names no theorem" for name in rows if name not in names]
    return missing + orphans


def differences(theorem: Theorem, result: Result, row: Row | None) -> list[str]:
    """How a settled theorem differs from its row (empty when it matches)."""
    if row is None:
        return ["no manifest row"]
    out = []
    if result.outcome != row.outcome or (row.depth is not None and result.depth != row.depth):
        out.append(f"outcome {result.outcome}{_at(result.depth)}, the manifest expects {row.outcome}{_at(row.depth)}")
    extra = [a for a in theorem.assumes if a not in row.assumes]
    if extra:
        out.append(f"assumes what its row does not record: {', '.join(extra)}")
    dropped = [a for a in row.assumes if a not in theorem.assumes]
    if dropped:
        out.append(f"its row records assumptions the theorem no longer makes: {', '.join(dropped)}")
    return out


def _at(depth: int | None) -> str:
    return "" if depth is None else f"@{depth}"


def record_seconds(path: Path, results: Iterable[Result]) -> None:
    """Write each result's runtime into its row, leaving everything else in the file as it is."""
    doc = json.loads(path.read_text())
    for result in results:
        doc["theorems"][result.theorem]["seconds"] = round(result.seconds, 3)
    path.write_text(json.dumps(doc, indent=1) + "\n")
