"""Print the exact pins (`name==version`) that the installed sglang declares for the packages named in argv.

`upstream/setup.sh --freeze` adds them to its constraints, so that a release's light dependencies are the
versions that release asks for (transformers, openai, ...) while the rest of its declared dependencies stays
uninstalled. Extras' requirements are left out; names compare as PEP 503 normalises them.
"""

from __future__ import annotations

import re
import sys
from importlib.metadata import requires

_PIN = re.compile(r"^(?P<name>[A-Za-z0-9._-]+)\s*(\[[^\]]*\])?\s*==\s*(?P<version>[^;,\s]+)\s*(;(?P<marker>.*))?$")


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def declared_pins(names: list[str]) -> list[str]:
    """The `==` requirements of sglang's metadata on `names`, outside any extra."""
    wanted = {normalise(name) for name in names}
    pins = []
    for requirement in requires("sglang") or []:
        match = _PIN.match(requirement.strip())
        if match and normalise(match["name"]) in wanted and "extra" not in (match["marker"] or ""):
            pins.append(f"{match['name']}=={match['version']}")
    return pins


if __name__ == "__main__":
    print("\n".join(declared_pins(sys.argv[1:])))
