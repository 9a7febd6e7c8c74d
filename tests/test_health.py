"""/healthz and /readyz on the metrics port: `assess` judges, the real HTTP server answers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from safemon.config import load_config
from safemon.health import HealthReport, assess
from safemon.metrics import Metrics, MetricsServer, start_http_server
from safemon.states import Mode

ENV = {"XDG_RUNTIME_DIR": "/run/user/1000", "SAFEMON_METRICS__PORT": "0"}


def get(url: str) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return int(resp.status), json.loads(resp.read())
    except urllib.error.HTTPError as err:
        with err:
            return err.code, json.loads(err.read())


class Probe:
    """A settable probe standing in for the daemon's `health` method."""

    def __init__(self) -> None:
        self.report = HealthReport(live=True, ready=False, reason="starting")
        self.fail = False

    def __call__(self) -> HealthReport:
        if self.fail:
            raise RuntimeError("boom")
        return self.report


@pytest.fixture
def served() -> Iterator[tuple[MetricsServer, Probe]]:
    config = load_config(env=ENV)
    registry = CollectorRegistry()
    Metrics(config, registry)
    probe = Probe()
    with start_http_server(config, registry, health=probe) as server:
        yield server, probe


def base(server: MetricsServer) -> str:
    return server.url.removesuffix("/metrics")


def test_ready_only_after_start_up_self_tests() -> None:
    r = assess(mode=Mode.NORMAL, voting=(), formed=False, loop_age_s=0.1)
    assert r.live and not r.ready and "self-tests" in r.reason
    r = assess(mode=Mode.NORMAL, voting=("ch0", "ch1"), formed=True, loop_age_s=0.1)
    assert r.live and r.ready and r.reason == ""


def test_safe_mode_is_not_ready_but_alive() -> None:
    r = assess(mode=Mode.SAFE, voting=("ch0",), formed=True, loop_age_s=0.1)
    assert r.live and not r.ready and "SAFE" in r.reason


def test_degraded_mode_with_a_voting_set_is_ready() -> None:
    assert assess(mode=Mode.DEGRADED, voting=("ch0",), formed=True, loop_age_s=0.0).ready


def test_an_empty_voting_set_after_forming_is_not_ready() -> None:
    r = assess(mode=Mode.NORMAL, voting=(), formed=True, loop_age_s=0.0)
    assert not r.ready and "no channel" in r.reason


def test_a_stale_event_loop_fails_liveness() -> None:
    r = assess(mode=Mode.NORMAL, voting=("ch0",), formed=True, loop_age_s=11.0, stale_after_s=10.0)
    assert not r.live and not r.ready and "event loop" in r.reason
    assert assess(mode=Mode.NORMAL, voting=(), formed=False, loop_age_s=None).live


def test_probes_answer_on_the_metrics_port(served: tuple[MetricsServer, Probe]) -> None:
    server, probe = served
    assert get(base(server) + "/healthz")[0] == 200
    status, body = get(base(server) + "/readyz")
    assert status == 503 and body["reason"] == "starting"
    probe.report = assess(mode=Mode.NORMAL, voting=("ch0",), formed=True, loop_age_s=0.0)
    assert get(base(server) + "/readyz") == (200, probe.report.as_dict())
    probe.report = assess(mode=Mode.SAFE, voting=("ch0",), formed=True, loop_age_s=0.0)
    status, body = get(base(server) + "/readyz")
    assert status == 503 and body["mode"] == "SAFE"
    assert get(base(server) + "/healthz")[0] == 200
    with urllib.request.urlopen(server.url, timeout=10) as resp:  # /metrics unchanged
        assert b"safemon_mode" in resp.read()


def test_a_raising_probe_fails_both_checks(served: tuple[MetricsServer, Probe]) -> None:
    server, probe = served

    probe.fail = True
    status, body = get(base(server) + "/healthz")
    assert status == 503 and "probe failed" in body["reason"]
    assert get(base(server) + "/readyz")[0] == 503


def test_without_a_probe_both_checks_pass() -> None:
    config = load_config(env=ENV)
    registry = CollectorRegistry()
    Metrics(config, registry)
    with start_http_server(config, registry) as server:
        assert get(base(server) + "/healthz")[0] == 200
        assert get(base(server) + "/readyz")[0] == 200


def test_health_check_command_exit_codes(tmp_path: Path) -> None:
    """`python -m safemon.health` against a real server: 0 when ready, 1 when not (SAFE) or
    unreachable, 2 for a bad config; --live asks /healthz."""
    config_path = tmp_path / "c.yaml"
    config = load_config(env=ENV)
    registry = CollectorRegistry()
    Metrics(config, registry)
    probe = Probe()
    with start_http_server(config, registry, health=probe) as server:
        port = int(server.url.rsplit(":", 1)[1].split("/")[0])
        config_path.write_text(f"metrics: {{host: 0.0.0.0, port: {port}}}\n", encoding="utf-8")
        env = {**os.environ, "SAFEMON_CONFIG": str(config_path)}

        def run(*args: str) -> int:
            return subprocess.run([sys.executable, "-m", "safemon.health", *args], env=env,
                                  capture_output=True, timeout=60, check=False).returncode

        probe.report = assess(mode=Mode.SAFE, voting=("ch0",), formed=True, loop_age_s=0.0)
        assert run() == 1 and run("--live") == 0
        probe.report = assess(mode=Mode.NORMAL, voting=("ch0",), formed=True, loop_age_s=0.0)
        assert run() == 0
    assert run() == 1  # nothing listens any more
    config_path.write_text("metrics: {port: -1}\n", encoding="utf-8")
    assert run() == 2
