"""Regenerate the golden files, from the repository root: `.venv/bin/python -m tests.golden.regenerate`.

`counterexample.json` is the shrunk trace `fuzz run --profile ci --pool chunk-p1 --fault legacy_reuse_guard`
writes (the ci profile is derandomized: the same code and Hypothesis give the same trace); `replay.txt` and
`replay-verbose.txt` are what `fuzz replay` and `fuzz replay --verbose` print for it. Run it when a change to the
trace format or to what replay prints is intended, and review the diff.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from contextlib import redirect_stdout
from io import StringIO
from pathlib import Path

from fuzz.__main__ import main as fuzz_main

GOLDEN = Path(__file__).parent
COUNTEREXAMPLE = GOLDEN / "counterexample.json"
REPLAY = GOLDEN / "replay.txt"
REPLAY_VERBOSE = GOLDEN / "replay-verbose.txt"
REGENERATE = ".venv/bin/python -m tests.golden.regenerate"
RUN = ["run", "--profile", "ci", "--pool", "chunk-p1", "--fault", "legacy_reuse_guard"]


def replay_output(path: Path, verbose: bool) -> tuple[int, str]:
    """Exit status and stdout of `fuzz replay` on `path`."""
    out = StringIO()
    with redirect_stdout(out):
        code = fuzz_main(["replay", str(path), *(["--verbose"] if verbose else [])])
    return code, out.getvalue()


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        with redirect_stdout(StringIO()):
            fuzz_main([*RUN, "--out", tmp])
        found = sorted(Path(tmp).glob("*.json"))
        if len(found) != 1:
            print(f"regenerate: `fuzz {' '.join(RUN)}` wrote {len(found)} counterexamples, not one", file=sys.stderr)
            return 1
        shutil.copyfile(found[0], COUNTEREXAMPLE)
    REPLAY.write_text(replay_output(COUNTEREXAMPLE, verbose=False)[1])
    REPLAY_VERBOSE.write_text(replay_output(COUNTEREXAMPLE, verbose=True)[1])
    for path in (COUNTEREXAMPLE, REPLAY, REPLAY_VERBOSE):
        print(f"regenerate: wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
