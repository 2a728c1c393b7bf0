"""Fuzz targets for HypoFuzz, the optional alternative engine: one pytest test per campaign configuration.

HypoFuzz (`pip install hypofuzz`; non-commercial licence, so kvlife never requires it) replaces the pytest
command and spreads its time over every Hypothesis test it collects, guided by coverage:

    hypothesis fuzz -- fuzz/hypofuzz_targets.py

Each `test_<pool>__<swarm>` is the campaign's lockstep machine on that pool and swarm group, on the reference
pool with no fault, saving to the campaign's example database (`KVLIFE_CAMPAIGN_DB`, default
`.hypothesis/campaign`) under the campaign's own keys. A failure HypoFuzz finds is therefore replayed first by the
next `python -m fuzz campaign` on that database, which writes, shrinks, groups and reports it like its own. Under
plain pytest each target runs `KVLIFE_HYPOFUZZ_EXAMPLES` test cases (default 20). `make test` does not collect
this file (it lives outside `tests/`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import hypothesis
from hypothesis.stateful import get_state_machine_test

from fuzz.campaign.database import campaign_database
from fuzz.campaign.plan import STEPS_PER_CASE, configurations
from fuzz.environment import env_count, env_folder
from fuzz.machine import SWARMS, Recorder, build_machine
from fuzz.profiles import POOLS, Profile

# Checked like flags (`fuzz.environment`): a bad value stops collection with one line naming the variable.
DATABASE = env_folder("KVLIFE_CAMPAIGN_DB", Path(".hypothesis/campaign"))
EXAMPLES = env_count("KVLIFE_HYPOFUZZ_EXAMPLES", 20, 1_000_000)


def target(pool: str, swarm: str) -> Any:
    """The campaign's test for one configuration, keyed in the campaign's database as a unit would be."""
    config = {**POOLS[pool], "faults": []}
    profile = Profile("hypofuzz", EXAMPLES, STEPS_PER_CASE, derandomize=False, keep_database=False)
    database = campaign_database(DATABASE, pool, swarm, config["faults"])
    settings = hypothesis.settings(profile.hypothesis_settings(DATABASE), database=database)
    test = get_state_machine_test(build_machine(Recorder(config, swarm)), settings=settings)
    test.__name__ = test.__qualname__ = f"test_{pool.replace('-', '_')}__{swarm.replace('-', '_')}"
    return test


TARGETS = {
    f"test_{p.replace('-', '_')}__{s.replace('-', '_')}": target(p, s) for p, s in configurations(sorted(POOLS), SWARMS)
}
globals().update(TARGETS)
