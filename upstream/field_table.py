"""The field inventory of `docs/upstream-api.md` §13, written from `impl/upstream/fields.py`, never typed.

    python upstream/field_table.py [--write]

Prints the markdown: a summary of counts per class (observed / configured / irrelevant / not read, and how many
the lifecycle test checks are kept), then one table per class, one row per field with the versions that have it.
`--write` puts it between the markers in `docs/upstream-api.md` instead. Reads no sglang.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script: the repository's modules (standard library only, no sglang)

from impl.upstream.fields import CLASSES, KINDS, VERSIONS, Entry, fields_of  # noqa: E402

DOC = ROOT / "docs" / "upstream-api.md"
BEGIN, END = "<!-- fields:begin -->", "<!-- fields:end -->"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def versions_having(cls: str, name: str) -> str:
    """The versions whose instances of `cls` hold field `name`, as a table cell."""
    having = [v for v in VERSIONS if name in fields_of(cls, v)]
    return "both" if len(having) == len(VERSIONS) else ", ".join(having)


def summary() -> str:
    """One row per class: its versions, its field count, and the count of each kind."""
    header = ["class", "versions", "fields", *KINDS, "kept (checked)"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    totals = [0] * (len(KINDS) + 2)
    for cls, (versions, entries) in CLASSES.items():
        counts = [len(entries), *(sum(e.kind == kind for e in entries.values()) for kind in KINDS)]
        counts.append(sum(e.kept for e in entries.values()))
        totals = [t + c for t, c in zip(totals, counts, strict=True)]
        lines.append(f"| `{cls}` | {', '.join(versions)} | " + " | ".join(map(str, counts)) + " |")
    lines.append("| all | | " + " | ".join(map(str, totals)) + " |")
    return "\n".join(lines) + "\n"


def class_table(cls: str, entries: dict[str, Entry]) -> str:
    """The fields of one class, alphabetically."""
    lines = [f"#### `{cls}`", "", "| field | on | what reads it |", "|---|---|---|"]
    for name in sorted(entries):
        lines.append(f"| `{name}` | {versions_having(cls, name)} | {_cell(entries[name].line)} |")
    return "\n".join(lines) + "\n"


def text() -> str:
    """The whole generated part: the summary, then each class's table."""
    parts = [summary(), *(class_table(cls, entries) for cls, (_, entries) in CLASSES.items())]
    return "\n".join(parts)


def write(body: str, doc: Path = DOC) -> None:
    """Replace what lies between the markers of `doc` with `body`."""
    content = doc.read_text()
    start, end = content.index(BEGIN) + len(BEGIN), content.index(END)
    doc.write_text(content[:start] + "\n" + body + content[end:])


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"write the table into {DOC.relative_to(ROOT)}")
    args = parser.parse_args(argv)
    if args.write:
        write(text())
    else:
        print(text(), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
