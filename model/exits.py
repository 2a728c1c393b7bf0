"""Exit statuses of kvlife's commands (`python -m model`, `python -m fuzz`), and how a failure of kvlife itself
is reported.

0 and 1 are answers (nothing found / the pool fails); 2 is refused input (a flag, a file, an environment
variable). A crash of kvlife itself is none of these: `EXIT_INTERNAL` (70, `EX_SOFTWARE` of sysexits.h), with
one line that says so and names the file holding the full traceback, so that a CI script never reads a bug of
the harness as a bug of the pool.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
import traceback
from typing import TextIO

from model.trace import one_line

EXIT_CLEAN = 0
EXIT_FOUND = 1
EXIT_INVALID = 2
EXIT_INTERNAL = 70


def save_traceback(text: str) -> str:
    """Write a traceback to a new file in the temporary folder (`TMPDIR`), readable by its owner only (a shared
    folder); its path, or why it could not be written."""
    try:
        fd, path = tempfile.mkstemp(prefix=f"kvlife-internal-error-{time.strftime('%Y%m%d-%H%M%S')}-", suffix=".txt")
        with os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace") as out:
            out.write(text)
    except OSError as exc:
        return f"nowhere (it could not be written: {exc.strerror})"
    return path


def internal_error(command: str, exc: BaseException, err: TextIO | None = None) -> int:
    """Report a crash of kvlife on one line (the traceback goes to a file) and return `EXIT_INTERNAL`."""
    where = save_traceback("".join(traceback.format_exception(exc)))
    what = one_line(f"{type(exc).__name__}: {exc}", limit=200)
    print(
        f"{command}: internal error (kvlife itself failed, not the pool; nothing was reproduced): {what}; "
        f"full traceback in {where}",
        file=err or sys.stderr,
        flush=True,
    )
    return EXIT_INTERNAL
