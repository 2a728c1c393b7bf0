"""The findings x release table of `docs/upstream-findings.md`, generated from verification runs, never typed.

    python upstream/findings_matrix.py [--write] [--out reports/upstream]

Reads what `python -m fuzz verify-upstream` wrote for each release of `upstream/releases.txt`
(`OUT/VERSION/findings-outcomes.json`: each finding's replay there) and prints one row per finding of
`upstream/findings.json`, one column per release: `reproduces`, `passes`, or how else the replay failed; then a
row saying whether each release's verification matched the manifest. `--write` puts the table between the
markers in `docs/upstream-findings.md` instead. Standard library only (run with any python).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script: the repository's modules (standard library only, no sglang)

from impl.upstream.releases import published_releases  # noqa: E402

DOC = ROOT / "docs" / "upstream-findings.md"
FINDINGS = ROOT / "upstream" / "findings.json"
OUTCOMES = "findings-outcomes.json"  # fuzz/upstream_verify.py writes it under --out/VERSION
BEGIN, END = "<!-- findings-matrix:begin -->", "<!-- findings-matrix:end -->"


def outcomes_in(out: Path, version: str) -> dict[str, Any] | None:
    """What the verification of `version` wrote, or None where it has not run (into `out`)."""
    path = out / version / OUTCOMES
    if not path.is_file():
        return None
    doc: dict[str, Any] = json.loads(path.read_text())
    return doc if doc.get("sglang") == version else None


def table(findings: list[dict[str, Any]], runs: dict[str, dict[str, Any]]) -> str:
    """The markdown table: a finding per row, a release per column, and a last row of verdicts."""
    versions = list(runs)
    lines = ["| finding | triage | " + " | ".join(versions) + " |", "|---|---|" + "---|" * len(versions)]
    for finding in findings:
        cells = [runs[v]["findings"].get(finding["id"], "not run") for v in versions]
        lines.append(f"| `{finding['id']}` | {finding['triage']} | " + " | ".join(cells) + " |")
    verdicts = ["matches" if runs[v]["mismatches"] == 0 else f"{runs[v]['mismatches']} mismatches" for v in versions]
    lines.append("| *verify-sglang* | | " + " | ".join(verdicts) + " |")
    return "\n".join(lines) + "\n"


def write(text: str, doc: Path = DOC) -> None:
    """Replace what lies between the markers of `doc` with `text`."""
    content = doc.read_text()
    start, end = content.index(BEGIN) + len(BEGIN), content.index(END)
    doc.write_text(content[:start] + "\n" + text + content[end:])


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"write the table into {DOC.relative_to(ROOT)}")
    parser.add_argument("--out", type=Path, default=ROOT / "reports" / "upstream", help="verify-upstream's --out")
    args = parser.parse_args(argv)
    runs = {r.version: outcomes_in(args.out, r.version) for r in published_releases()}
    absent = [version for version, run in runs.items() if run is None]
    if absent:
        print(f"findings_matrix: no verification of {', '.join(absent)} in {args.out}", file=sys.stderr)
        return 2
    text = table(json.loads(FINDINGS.read_text())["findings"], {v: run for v, run in runs.items() if run})
    if args.write:
        write(text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
