"""The `kvlife` console command: `kvlife verify-sglang` verifies the sglang installed beside kvlife; any other
command is `python -m fuzz`'s (`kvlife run --target sglang ...`, `kvlife replay FILE`).

Installed, the harness folders sit under the `kvlife` package directory; this module puts that directory first on
`sys.path` and then imports the harness by its own absolute names. In a checkout (an editable install) the
folders sit beside this package, at the repository root, which goes first instead.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
USAGE = "usage: kvlife verify-sglang [--cases N] [--random N] [--out DIR] | kvlife FUZZ-COMMAND ..."


def harness_home() -> Path:
    """The directory that holds `model`, `impl`, `properties`, `fuzz` and `upstream`."""
    return HERE if (HERE / "fuzz").is_dir() else HERE.parent


def main(argv: list[str] | None = None) -> int:
    """Run a kvlife command; `verify-sglang` is `fuzz verify-upstream` with the installed findings manifest."""
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help"):
        print(USAGE, file=sys.stderr if not args else sys.stdout)
        return 2 if not args else 0
    home = harness_home()
    sys.path.insert(0, str(home))
    # sglang's modules warn at import about CUDA-only features; they say nothing about the pool classes.
    warnings.filterwarnings("ignore", category=UserWarning)
    from fuzz.__main__ import main as fuzz_main

    if args[0] == "verify-sglang":
        findings = home / "upstream" / "findings.json"
        return fuzz_main(["verify-upstream", "--findings", str(findings), *args[1:]])
    return fuzz_main(args)


if __name__ == "__main__":
    sys.exit(main())
