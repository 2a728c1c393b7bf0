"""`python -m fuzz.upstream_campaign OUT`: judge an upstream campaign's findings (`OUT/report.json` of
`python -m fuzz campaign --target sglang`) against `upstream/findings.json` for the installed sglang.

Each finding group the campaign reports is known when a triaged finding of this release has its kind and id (on a
version no release names, any finding's); one line per group says which. Exit 0: every group is known; 1: some
group is not (a new upstream divergence to triage); 2: no report, or sglang or the manifest cannot be read; the
campaign's own failure (a crashed worker) stays 70.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from fuzz.targets import installed_sglang, sglang_problem
from fuzz.upstream_findings import ROOT, FindingsError, known, load_findings
from model.exits import EXIT_FOUND, EXIT_INTERNAL, EXIT_INVALID
from model.trace import Failure, one_line

FINDINGS = ROOT / "upstream" / "findings.json"


def judge(out: Path) -> int:
    """Print a line per finding group of the campaign in `out`; the exit status (see the module's docstring)."""
    version = installed_sglang()
    report_path = out / "report.json"
    if version is None or not report_path.is_file():
        print(f"upstream_campaign: {sglang_problem() or f'no campaign report at {report_path}'}", file=sys.stderr)
        return EXIT_INVALID
    try:
        findings = load_findings(FINDINGS)
    except FindingsError as exc:
        print(f"upstream_campaign: {exc}", file=sys.stderr)
        return EXIT_INVALID
    report = json.loads(report_path.read_text())
    if report.get("exit_code") == EXIT_INTERNAL:  # a worker crashed: the campaign failed, whatever it found
        return EXIT_INTERNAL
    new = 0
    for group in report.get("groups", []):
        hit = known(findings, Failure(0, str(group["kind"]), str(group["id"]), ""), version)
        what = f"{group['kind']} {group['id']} ({group['representative']})"
        print(one_line(f"upstream_campaign: sglang {version}: {f'known {hit.id}' if hit else 'NEW'}: {what}"))
        new += hit is None
    return EXIT_FOUND if new else 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: python -m fuzz.upstream_campaign OUT", file=sys.stderr)
        sys.exit(EXIT_INVALID)
    sys.exit(judge(Path(sys.argv[1])))
