"""The whole demo on the CPU: safemon keeps every result right while faults are injected."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from safemon.commands import demo as demo_cmd
from safemon.demo.report import JSON_KEYS


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_demo_json_protected_equals_clean_and_every_fault_detected(
    model_cache: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`safemon demo --json`: protected == clean accuracy, all faults detected, no wrong
    output released, and the unprotected run with the same faults is worse."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(model_cache.parent))
    # reuse the session's trained model: cache_dir() is $XDG_CACHE_HOME/safemon
    target = model_cache.parent / "safemon"
    if not target.exists():
        target.symlink_to(model_cache, target_is_directory=True)
    parser = argparse.ArgumentParser()
    demo_cmd.register(parser.add_subparsers())
    args = parser.parse_args(["demo", "--json", "--duration", "6"])
    code = args.handler(args)
    data = json.loads(capsys.readouterr().out)
    for key in JSON_KEYS:
        assert key in data
    assert data["faults_injected"] == 4
    assert data["faults_detected"] == data["faults_injected"], data["faults"]
    assert data["wrong_outputs_released"] == 0
    assert data["outputs_released"] > 0
    assert data["protected_accuracy"] == data["clean_accuracy"], data
    assert data["unprotected_faulty_accuracy"] < data["clean_accuracy"]
    assert code == 0
