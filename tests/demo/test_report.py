"""The report: documented JSON keys and a readable table."""

from __future__ import annotations

import json

import pytest

from safemon.demo.report import JSON_KEYS, DemoReport, FaultRecord, percentiles_ms


def _report(**kw: object) -> DemoReport:
    base: dict[str, object] = dict(
        clean_accuracy=0.975,
        protected_accuracy=0.975,
        unprotected_faulty_accuracy=0.6,
        faults=(
            FaultRecord("bitflip-c", "ch1", 2, ("disagreement_minority",), 0),
            FaultRecord("hang", "ch1", 10, (), 2),
        ),
        wrong_outputs_released=0,
        outputs_released=30,
        requests_failed=2,
        latency_without_s=(0.001, 0.002, 0.003),
        latency_with_s=(0.010, 0.020),
        safe_state_events=0,
        restarts=1,
        samples=360,
        channel="ch1",
        policy="2oo3",
        backend="numpy",
        metrics_url="http://127.0.0.1:1/metrics",
        log_file="/tmp/x.log",
        duration_s=12.5,
    )
    base.update(kw)
    return DemoReport(**base)  # type: ignore[arg-type]


def test_json_has_every_documented_key_and_is_serialisable() -> None:
    """The documented keys are present with the right meaning; json.dumps works."""
    data = _report().as_json()
    for key in JSON_KEYS:
        assert key in data
    assert data["faults_injected"] == 2
    assert data["faults_detected"] == 1
    assert data["faults_masked"] == 1
    assert set(data["latency_ms"]) == {"without_safemon", "with_safemon"}
    assert set(data["latency_ms"]["with_safemon"]) == {"p50", "p90", "p99"}
    json.loads(json.dumps(data))


def test_percentiles_in_ms() -> None:
    """Seconds in, milliseconds out; empty input gives None."""
    p = percentiles_ms([0.001, 0.002, 0.003])
    assert p["p50"] == pytest.approx(2.0)
    assert percentiles_ms([]) == {"p50": None, "p90": None, "p99": None}


def test_table_names_every_fault_and_outcome() -> None:
    """The table shows the accuracies, each fault with its detection, and the undetected one."""
    text = _report().table()
    assert "97.50 %" in text and "60.00 %" in text
    assert "bitflip-c" in text and "disagreement_minority" in text and "masked" in text
    assert "NOT DETECTED" in text
    assert "http://127.0.0.1:1/metrics" in text
