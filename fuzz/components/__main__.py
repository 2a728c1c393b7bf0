"""Entry point: `python -m fuzz.components` (see `fuzz.components.cli`)."""

import sys

from fuzz.components.cli import main

sys.exit(main(sys.argv[1:]))
