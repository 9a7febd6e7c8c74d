"""The short fault campaign (issue 11): `scripts/fault-campaign` with 210 faults (30 of each
kind) through a real 2oo3 daemon process with a concurrent client stream meets every
target: no wrong product, no unanswered request, no daemon crash, no channel left stuck.
The long one (>= 5,000 faults) is run outside CI; see docs/ROBUSTNESS.md."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "fault-campaign"


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_short_fault_campaign_meets_every_target(tmp_path: Path) -> None:
    """210 faults, every kind 30 times, one at a time: all four targets are 0."""
    r = subprocess.run([sys.executable, str(SCRIPT), "--faults", "210", "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=3000)
    data = json.loads((tmp_path / "campaign.json").read_text())
    assert data["faults_injected"] == 210, r.stdout[-2000:]
    assert all(v.get("injected") == 30 for v in data["per_kind"].values()), data["per_kind"]
    assert data["wrong_products"] == 0
    assert data["unanswered"] == 0
    assert data["daemon_crashes"] == 0
    assert data["stuck"] == 0, data["stuck_details"]
    assert data["requests"].get("released", 0) > 0
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
