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


def test_fault_injected_after_safe_is_reported_not_exercised_not_undetected() -> None:
    """A fault injected while SAFE was latched, and not reported, is "not exercised:
    injected after SAFE" in the table and the JSON, never NOT DETECTED or undetected."""
    rep = _report(
        faults=(
            FaultRecord("bitflip-c", "ch0", 2, ("channel_error",), 2, "NORMAL"),
            FaultRecord("hang", "ch0", 10, (), 2, "SAFE"),
        ),
        safe_state_events=1,
    )
    text = rep.table()
    assert "not exercised: injected after SAFE" in text
    assert "NOT DETECTED" not in text
    assert "2 request(s) refused (already SAFE)" in text
    data = rep.as_json()
    assert data["faults_detected"] == 1
    assert data["faults_undetected"] == 0
    assert data["faults_injected_in_safe"] == 1
    assert [f["injected_in_safe"] for f in data["faults"]] == [False, True]
    assert data["faults"][1]["mode_at_injection"] == "SAFE"


@pytest.mark.parametrize("mode", ["NORMAL", "DEGRADED", None])
def test_fault_missed_while_not_safe_still_says_not_detected(mode: str | None) -> None:
    """A fault the daemon missed while it could release outputs (or in an unknown mode)
    is NOT DETECTED and counts in faults_undetected."""
    rep = _report(faults=(FaultRecord("hang", "ch1", 10, (), 0, mode),))
    assert "NOT DETECTED" in rep.table()
    assert "not exercised" not in rep.table()
    assert rep.as_json()["faults_undetected"] == 1


def test_protected_accuracy_is_over_released_samples_with_refused_shown_apart() -> None:
    """Refused samples (no output: the safe behaviour) are not counted as wrong: the
    protected accuracy is over the released samples, and the refused count is shown."""
    rep = _report(protected_accuracy=47 / 48, samples_refused=312, requests_failed=13)
    text = rep.table()
    assert "97.92 % of 48 released samples" in text
    assert "refused (no output, not counted)    312 of 360 samples" in text
    data = rep.as_json()
    assert data["protected_accuracy"] == round(47 / 48, 6)
    assert data["samples_released"] == 48 and data["samples_refused"] == 312


def test_protected_accuracy_is_null_when_nothing_was_released() -> None:
    rep = _report(protected_accuracy=None, samples_refused=360, outputs_released=0)
    assert rep.as_json()["protected_accuracy"] is None
    assert "no output released" in rep.table()


def test_the_demo_fails_when_safe_came_before_any_detected_fault() -> None:
    """A review (2026-12-07): with the 'not exercised' label, a daemon already in SAFE
    before the first injection (every fault not exercised, nothing detected, nothing
    released) made `safemon demo` exit 0. It is a pass only when a detected fault latched
    SAFE (as the bit flip does under 1oo1D) or no fault fell into SAFE."""
    from safemon.commands.demo import demo_passed

    latched_by_a_fault = _report(faults=(
        FaultRecord("bitflip-c", "ch0", 2, ("channel_error",), 2, "NORMAL"),
        FaultRecord("hang", "ch0", 10, (), 2, "SAFE")), safe_state_events=1)
    assert demo_passed(latched_by_a_fault.as_json())
    safe_all_along = _report(faults=(
        FaultRecord("bitflip-c", "ch0", 2, (), 2, "SAFE"),
        FaultRecord("hang", "ch0", 10, (), 2, "SAFE")), safe_state_events=1,
        protected_accuracy=None, outputs_released=0)
    assert safe_all_along.as_json()["faults_undetected"] == 0
    assert not demo_passed(safe_all_along.as_json())
    assert demo_passed(_report().as_json()) is False  # its hang went undetected in NORMAL
    assert not demo_passed(_report(wrong_outputs_released=1, faults=(
        FaultRecord("bitflip-c", "ch1", 2, ("disagreement_minority",), 0),)).as_json())
