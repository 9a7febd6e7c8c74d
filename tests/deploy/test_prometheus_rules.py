"""The Prometheus scrape config and alert rules: promtool accepts them, `promtool test rules`
passes the unit tests of every alert (each has a firing and a silent case), and every alert
carries what an on-call engineer needs (severity, summary, description)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.deploy.conftest import PrometheusTools
from tests.deploy.promql import ALERTS_PATH, PROMETHEUS_CONFIG_PATH

ALERTS_TEST_PATH = ALERTS_PATH.parent / "alerts_test.yml"

REQUIRED_ALERTS = {
    "SafemonAbsent",
    "SafemonDown",
    "SafemonFaultHandlingOverFtti",
    "SafemonChannelFlapping",
    "SafemonSelfTestSmCoverageLow",
    "SafemonSafeStateEntered",
    "SafemonChannelDown",
    "SafemonSelfTestFailures",
    "SafemonDtiOverruns",
    "SafemonEccUncorrectable",
}


def _promtool(tools: PrometheusTools, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(tools.promtool), *args], capture_output=True, text=True, timeout=60, check=False
    )


def _alerts() -> dict[str, dict[str, Any]]:
    rules = yaml.safe_load(ALERTS_PATH.read_text(encoding="utf-8"))
    return {r["alert"]: r for g in rules["groups"] for r in g["rules"] if "alert" in r}


def test_promtool_accepts_alert_rules(prometheus_tools: PrometheusTools) -> None:
    proc = _promtool(prometheus_tools, "check", "rules", str(ALERTS_PATH))
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_promtool_accepts_scrape_config(prometheus_tools: PrometheusTools) -> None:
    """Also proves the rule_files path resolves: promtool checks the referenced rules too."""
    proc = _promtool(prometheus_tools, "check", "config", str(PROMETHEUS_CONFIG_PATH))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 rule files found" in proc.stdout + proc.stderr


def test_promtool_rejects_a_broken_rule(prometheus_tools: PrometheusTools, tmp_path: Path) -> None:
    """Guards the two tests above: promtool must really fail on bad PromQL."""
    bad = tmp_path / "bad.yml"
    bad.write_text("groups:\n- name: x\n  rules:\n  - alert: X\n    expr: rate(safemon_mode[5m]\n")
    assert _promtool(prometheus_tools, "check", "rules", str(bad)).returncode != 0


def test_promtool_unit_tests_of_the_rules_pass(prometheus_tools: PrometheusTools) -> None:
    proc = _promtool(prometheus_tools, "test", "rules", str(ALERTS_TEST_PATH))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout + proc.stderr


def test_promtool_unit_tests_can_fail(prometheus_tools: PrometheusTools, tmp_path: Path) -> None:
    """Guards the test above: a unit test expecting silence from a firing alert fails."""
    (tmp_path / "alerts.yml").write_text(ALERTS_PATH.read_text(encoding="utf-8"))
    wrong = tmp_path / "wrong_test.yml"
    wrong.write_text(
        "rule_files: [alerts.yml]\nevaluation_interval: 1m\ntests:\n"
        "- interval: 1m\n  input_series:\n"
        "  - {series: 'safemon_mode{job=\"safemon\", instance=\"a:1\", mode=\"SAFE\"}', values: '1x3'}\n"
        "  alert_rule_test:\n  - {eval_time: 2m, alertname: SafemonSafeStateEntered, exp_alerts: []}\n"
    )
    assert _promtool(prometheus_tools, "test", "rules", str(wrong)).returncode != 0


def test_every_alert_has_a_firing_and_a_silent_unit_test() -> None:
    cases = yaml.safe_load(ALERTS_TEST_PATH.read_text(encoding="utf-8"))
    assert cases["rule_files"] == [ALERTS_PATH.name]
    fires: set[str] = set()
    silent: set[str] = set()
    for test in cases["tests"]:
        for case in test.get("alert_rule_test", []):
            (fires if case.get("exp_alerts") else silent).add(case["alertname"])
    assert set(_alerts()) <= fires, sorted(set(_alerts()) - fires)
    assert set(_alerts()) <= silent, sorted(set(_alerts()) - silent)


def test_scrape_config_targets_the_daemon_default_address() -> None:
    config = yaml.safe_load(PROMETHEUS_CONFIG_PATH.read_text(encoding="utf-8"))
    (job,) = [j for j in config["scrape_configs"] if j["job_name"] == "safemon"]
    targets = [t for sc in job["static_configs"] for t in sc["targets"]]
    assert targets == ["127.0.0.1:17650"]
    assert (
        PROMETHEUS_CONFIG_PATH.parent / config["rule_files"][0]
    ).resolve() == ALERTS_PATH.resolve()


def test_required_alerts_exist_plus_one_on_disagreements() -> None:
    alerts = _alerts()
    assert alerts.keys() >= REQUIRED_ALERTS
    assert any("safemon_channel_disagreements_total" in a["expr"] for a in alerts.values())


def test_safe_state_and_channel_down_conditions() -> None:
    alerts = _alerts()
    assert (
        "".join(alerts["SafemonSafeStateEntered"]["expr"].split()) == 'safemon_mode{mode="SAFE"}==1'
    )
    down = alerts["SafemonChannelDown"]
    assert "".join(down["expr"].split()) == "safemon_channel_up==0"
    assert down["for"] == "1m"
    fails = alerts["SafemonSelfTestFailures"]["expr"]
    assert "increase(" in fails and 'result="fail"' in fails


def test_every_alert_has_severity_summary_and_description() -> None:
    alerts = _alerts()
    assert len(alerts) >= len(REQUIRED_ALERTS) + 1
    for name, alert in alerts.items():
        assert alert.get("labels", {}).get("severity") in {"critical", "warning"}, name
        assert alert.get("annotations", {}).get("summary", "").strip(), name
        assert alert.get("annotations", {}).get("description", "").strip(), name
