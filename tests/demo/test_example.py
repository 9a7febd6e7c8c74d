"""examples/digits_mlp.py against a real daemon: whole-model requests, and the per-layer
fallback under 1oo1D (the deployments run this script as their sidecar's app)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from safemon.demo.app import DigitsMLP
from tests.runtime.helpers import make_config, system

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "digits_mlp.py"

#: The example app's run is what is tested, not the DTI rules: the test suite's 0.2 s DTI made
#: a start-up self-test on a starved 2-core CI machine overrun, and under 1oo1D an overrun
#: latches SAFE, so the voting set never formed (seen once, in a clean-clone CI run).
APP_TIMING = {"request_deadline_s": 10.0, "dti_s": 5.0, "selftest_deadline_s": 4.5,
              "ftti_s": 20.0, "heartbeat_timeout_s": 5.0, "heartbeat_interval_s": 0.1}


@pytest.mark.parametrize(("policy", "per_layer"), [("2oo3", 0), ("1oo1D", 12)])
def test_the_example_app_classifies_through_the_daemon(
        tmp_path: Path, model_cache: Path, trained: tuple[DigitsMLP, object, object],
        policy: str, per_layer: int) -> None:
    """2oo3: every batch is one whole-model request. 1oo1D: the daemon cannot vote a whole
    model, and the example's client sends every batch layer by layer instead. The accuracy
    is the trained model's either way."""
    cfg = make_config(tmp_path, policy, transport="ipc", extra={"timing": APP_TIMING})
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(json.loads(cfg.model_dump_json())))
    target = model_cache.parent / "safemon"  # the example's cache: $XDG_CACHE_HOME/safemon
    if not target.exists():
        target.symlink_to(model_cache, target_is_directory=True)
    with system(cfg):
        out = subprocess.run(
            [sys.executable, str(EXAMPLE), "--safemon", "--config", str(path)],
            capture_output=True, text=True, timeout=120,
            env={**os.environ, "XDG_CACHE_HOME": str(model_cache.parent)},
        )
    assert out.returncode == 0, out.stderr[-3000:]
    m = re.search(r"accuracy (\d\.\d+) on 360 .*\((\d+) batches layer by layer\)", out.stdout)
    assert m, out.stdout
    assert float(m.group(1)) > 0.9
    assert int(m.group(2)) == per_layer
