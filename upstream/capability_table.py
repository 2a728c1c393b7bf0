"""The capability x release table of `docs/upstream-api.md`, generated from the venvs, never typed.

    python upstream/capability_table.py [--write] [VENV ...]

Runs `python -m impl.upstream.capabilities --json` in every release's venv (`.venv-sglang-VERSION` at the
repository root, in `upstream/releases.txt`'s order) and in each further VENV given (a source checkout's), then
prints the markdown table: one row per capability, one column per venv (headed by its sglang version), and what
the capability is. `--write` puts it between the markers in `docs/upstream-api.md` instead.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script: the repository's modules (standard library only, no sglang)

from impl.upstream.capabilities import PROBES, cell, describe  # noqa: E402
from impl.upstream.releases import published_releases  # noqa: E402

DOC = ROOT / "docs" / "upstream-api.md"
BEGIN, END = "<!-- capability-table:begin -->", "<!-- capability-table:end -->"


def capabilities_in(venv: Path) -> dict[str, Any]:
    """The capabilities probed by `venv`'s python, as JSON values."""
    done = subprocess.run(
        [str(venv / "bin" / "python"), "-W", "ignore", "-m", "impl.upstream.capabilities", "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    caps: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return caps


def table(columns: list[dict[str, Any]]) -> str:
    """The markdown table of `columns` (one probe's JSON per venv)."""
    header = ["capability", *(str(caps["version"]) for caps in columns), "what it is"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for name in PROBES:
        row = [f"`{name}`", *(cell(caps[name]) for caps in columns), describe(name).replace("|", "\\|")]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def write(text: str, doc: Path = DOC) -> None:
    """Replace what lies between the markers of `doc` with `text`."""
    content = doc.read_text()
    start, end = content.index(BEGIN) + len(BEGIN), content.index(END)
    doc.write_text(content[:start] + "\n" + text + content[end:])


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"write the table into {DOC.relative_to(ROOT)}")
    parser.add_argument("venvs", nargs="*", type=Path, help="further venvs (source checkouts)")
    args = parser.parse_args(argv)
    venvs = [ROOT / f".venv-sglang-{release.version}" for release in published_releases()] + args.venvs
    absent = [str(venv) for venv in venvs if not (venv / "bin" / "python").exists()]
    if absent:
        print(f"capability_table: no venv at {', '.join(absent)}; build them with `make sglang-setup`", file=sys.stderr)
        return 2
    text = table([capabilities_in(venv) for venv in venvs])
    if args.write:
        write(text)
    else:
        print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
