"""`python -m fuzz.walker`: see `fuzz.walker.cli`."""

from __future__ import annotations

import sys

from fuzz.walker.cli import main

if __name__ == "__main__":
    sys.exit(main())
