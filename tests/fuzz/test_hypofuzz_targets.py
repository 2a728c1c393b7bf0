"""The HypoFuzz targets (fuzz/hypofuzz_targets.py) are plain pytest tests, one per campaign configuration, and
save under the campaign's own database keys, so that a campaign replays what HypoFuzz found. HypoFuzz itself is
not installed: these tests run the targets under pytest, which is how HypoFuzz collects them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from fuzz.campaign.plan import configurations
from fuzz.machine import SWARMS
from fuzz.profiles import POOLS

ROOT = Path(__file__).resolve().parents[2]


def _pytest(db: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KVLIFE_CAMPAIGN_DB": str(db), "KVLIFE_HYPOFUZZ_EXAMPLES": "3"}
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "fuzz/hypofuzz_targets.py", *args]
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, check=False, timeout=300)


def test_there_is_one_target_per_campaign_configuration(tmp_path: Path) -> None:
    done = _pytest(tmp_path / "db", "--collect-only")
    assert done.returncode == 0, done.stdout + done.stderr
    names = {line.split("::")[1] for line in done.stdout.splitlines() if "::" in line}
    expected = {f"test_{p}__{s}".replace("-", "_") for p, s in configurations(sorted(POOLS), SWARMS)}
    assert names == expected and len(names) == len(POOLS) * len(SWARMS)


def test_a_target_runs_and_saves_under_the_campaign_keys(tmp_path: Path) -> None:
    targets_db, campaign_db = tmp_path / "targets", tmp_path / "campaign"
    done = _pytest(targets_db, "-k", "chunk_p1__all")
    assert done.returncode == 0 and "1 passed" in done.stdout, done.stdout + done.stderr
    campaign = [sys.executable, "-m", "fuzz", "campaign", "--budget", "4s", "--workers", "1", "--examples", "3"]
    campaign += ["--engines", "hypothesis", "--db", str(campaign_db), "--out", str(tmp_path / "out")]
    subprocess.run(campaign, cwd=ROOT, capture_output=True, check=True, timeout=300)
    saved = {p.name for p in targets_db.iterdir()}
    assert saved and saved <= {p.name for p in campaign_db.iterdir()}  # the campaign's first unit: chunk-p1/all
