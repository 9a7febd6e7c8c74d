"""End to end (issues 7 and 19): a real Prometheus scrapes a running safemon daemon, with the
alert rules loaded, and every PromQL expression of the Grafana dashboard and of the alert rules
evaluates without a query error; those over metrics the daemon has really produced return data.

A CPU-only daemon has no GPU, so its `gpu`/`UUID` labels are empty. To cover those labels, the
DCGM join of the per-GPU view and the alerts that need faults, two more targets are scraped:
job `safemon-gpu` serves a `safemon.metrics.Metrics` built from a two-GPU config with device
UUIDs (the same class and HTTP server the daemon uses; it is driven into SAFE and given a fault
whose detection plus reaction exceeds the FTTI), and job `dcgm` serves the two DCGM series the
dashboard joins with, labelled the way dcgm-exporter labels them (a stand-in: no dcgm-exporter
can run without a GPU).

The daemon runs in this process (stream channels, ipc:// sockets in a tmp runtime dir) and serves
its real HTTP metrics endpoint on 127.0.0.1, on a port the OS picks (no pick-then-bind race).
Every wait is bounded; nothing asserts on timing, so a slow 2-core CI machine only waits longer.
"""

from __future__ import annotations

import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import pytest
from prometheus_client import CollectorRegistry, Gauge

from safemon.config import load_config
from safemon.gpu_identity import format_uuid
from safemon.metrics import ChannelDevice, Metrics, MetricsServer, start_http_server
from safemon.patterns.controller import FaultKind
from safemon.states import Mode
from tests.deploy.conftest import PrometheusTools
from tests.deploy.prometheus_server import instant_query, running_prometheus, wait_for_query
from tests.deploy.promql import (
    ALERTS_PATH,
    all_promql_expressions,
    dashboard_expressions,
    metric_names,
    rule_expressions,
)
from tests.runtime.helpers import make_config, operands, reference, same_bits, system

#: Requests sent through the Client before Prometheus starts, so counters and histograms exist.
N_REQUESTS: Final = 5
#: Bound on the wait for the first usable scrapes (target up, two samples of every series).
SCRAPE_WAIT_S: Final = 20.0
#: Bound on the wait for one expression's data, once scrapes are in (rules/rate windows settle).
DATA_WAIT_S: Final = 10.0

#: Metrics a healthy daemon that has answered requests always exports, so every *dashboard*
#: expression over them must return data:
#: - requests_total / votes_total: the requests sent above were voted and released;
#: - mode, channel_up, build_info: gauges set at start-up.
#: The other metrics only need to parse and evaluate, because their data depends on events this
#: test does not cause or that are not guaranteed on a slow machine: channel disagreements,
#: ECC corrections/uncorrectables, DTI overruns, rejected messages and fault reactions need
#: faults, bad peers or overload (their labelled series are absent until the first event); the
#: self-test counter and the latency/kernel/self-test histograms depend on scheduler and
#: channel timing, which a test must not bet on.
#: The alert rules over these metrics are conditions (`safemon_mode{mode="SAFE"} == 1`,
#: `safemon_channel_up == 0`) that are empty by design while the daemon is healthy, so for the
#: rules only "evaluates without error" is required (the dashboard covers the data side).
MUST_HAVE_DATA: Final = frozenset(
    {
        "safemon_requests_total",
        "safemon_votes_total",
        "safemon_mode",
        "safemon_channel_up",
        "safemon_build_info",
    }
)

_DASHBOARD: Final = frozenset(dashboard_expressions())
#: The dashboard's selection by job and deployment joins every panel with build_info; that
#: join alone does not make a panel's own metric present.
_JOIN: Final = "safemon_build_info"
CONFIGS: Final = Path(__file__).resolve().parents[2] / "configs"
#: The GPU target's devices (hft1 pins ch-a to GPU 0 and ch-b to GPU 1).
UUIDS: Final = {"ch-a": format_uuid(bytes([0xA]) * 16), "ch-b": format_uuid(bytes([0xB]) * 16)}
GPU_JOB: Final = "safemon-gpu"


def _must_have_data(expr: str) -> bool:
    """Dashboard expressions whose own metrics are all produced (the DCGM join has its
    stand-in target, so it must have data too; the SM-coverage metric is not exported yet)."""
    own = metric_names(expr) - {_JOIN} if metric_names(expr) != {_JOIN} else {_JOIN}
    return expr in _DASHBOARD and own <= MUST_HAVE_DATA | _DCGM_SERIES


_DCGM_SERIES: Final = frozenset({"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_XID_ERRORS"})


@dataclass
class GpuTarget:
    """The `safemon-gpu` and `dcgm` scrape targets and what they serve."""

    metrics: Metrics
    server: MetricsServer
    dcgm: MetricsServer


@pytest.fixture(scope="module")
def gpu_target() -> Iterator[GpuTarget]:
    env = {"XDG_RUNTIME_DIR": "/run/user/1000", "SAFEMON_METRICS__PORT": "0"}
    config = load_config(CONFIGS / "hft1.yaml", env=env)
    devices = {ch: ChannelDevice(gpu=str(i), uuid=u) for i, (ch, u) in enumerate(UUIDS.items())}
    metrics = Metrics(config, CollectorRegistry(), backend="cupy", devices=devices)
    metrics.set_channel_up("ch-a", True)
    metrics.set_channel_up("ch-b", True)
    dcgm_registry = CollectorRegistry()
    labels = ["gpu", "UUID", "device", "modelName", "Hostname"]
    util = Gauge("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", labels,
                 registry=dcgm_registry)
    xid = Gauge("DCGM_FI_DEV_XID_ERRORS", "Value of the last XID error.", labels,
                registry=dcgm_registry)
    for i, u in enumerate(UUIDS.values()):
        lab = {"gpu": str(i), "UUID": u, "device": f"nvidia{i}", "modelName": "stand-in",
               "Hostname": "node-1"}
        util.labels(**lab).set(40 + i)
        xid.labels(**lab).set(0)
    with start_http_server(config, metrics.registry) as server, \
            start_http_server(config, dcgm_registry) as dcgm:
        yield GpuTarget(metrics=metrics, server=server, dcgm=dcgm)


@pytest.fixture(scope="module")
def scraped_daemon(
    prometheus_tools: PrometheusTools,
    tmp_path_factory: pytest.TempPathFactory,
    gpu_target: GpuTarget,
) -> Iterator[str]:
    """A running daemon that answered `N_REQUESTS` requests, scraped by a real Prometheus with
    the alert rules loaded; yields the Prometheus base URL once the scrapes are usable."""
    tmp = tmp_path_factory.mktemp("e2e")
    # ipc:// in tmp/rt (a private runtime dir); metrics.port 0 = a free port picked by the OS.
    cfg = make_config(tmp, "2oo3", transport="ipc")
    assert cfg.metrics.host == "127.0.0.1"
    x, w = operands(7)
    ref = reference(x, w, cfg)
    with system(cfg, serve_metrics=True) as (daemon, client):
        assert daemon.metrics_url is not None, "serve_metrics=True but no metrics endpoint"
        target = urllib.parse.urlsplit(daemon.metrics_url).netloc
        assert target.startswith("127.0.0.1:"), daemon.metrics_url
        wid = client.register_weight(w)
        for _ in range(N_REQUESTS):
            assert same_bits(client.matmul(x, wid, timeout=5.0), ref)
        with running_prometheus(
            target,
            tmp / "prometheus",
            rule_files=[ALERTS_PATH],
            extra_jobs={
                GPU_JOB: urllib.parse.urlsplit(gpu_target.server.url).netloc,
                "dcgm": urllib.parse.urlsplit(gpu_target.dcgm.url).netloc,
            },
            binary=prometheus_tools.prometheus,
        ) as url:
            deadline = time.monotonic() + SCRAPE_WAIT_S
            wait_for_query(
                url,
                'up{job="safemon"} == 1',
                timeout_s=max(1.0, deadline - time.monotonic()),
            )
            # Two samples of every requests series: rate()/increase() over them now have data.
            wait_for_query(
                url,
                'min(count_over_time(safemon_requests_total{job="safemon"}[1m])) >= 2',
                timeout_s=max(1.0, deadline - time.monotonic()),
            )
            wait_for_query(
                url,
                f'count_over_time(safemon_ftti_seconds{{job="{GPU_JOB}"}}[1m]) >= 2',
                timeout_s=max(1.0, deadline - time.monotonic()),
            )
            # Events after the first scrapes, so increase() over them sees them happen: a
            # fault whose detection (at the FTTI) plus reaction exceeds the FTTI, and SAFE.
            ftti = config_ftti(gpu_target)
            gpu_target.metrics.observe_fault_detection(FaultKind.SELFTEST_FAILED, ftti)
            gpu_target.metrics.observe_fault_reaction(FaultKind.SELFTEST_FAILED, ftti / 2)
            gpu_target.metrics.set_mode(Mode.SAFE)
            yield url


def config_ftti(target: GpuTarget) -> float:
    value = target.metrics.registry.get_sample_value("safemon_ftti_seconds")
    assert value is not None and value > 0
    return value


def test_gpu_and_uuid_labels_survive_the_scrape(scraped_daemon: str) -> None:
    for i, (channel, uuid) in enumerate(UUIDS.items()):
        for metric in ("safemon_channel_up", "safemon_channel_info", "safemon_dti_overruns_total"):
            sel = f'{metric}{{job="{GPU_JOB}", channel="{channel}", gpu="{i}", UUID="{uuid}"}}'
            assert instant_query(scraped_daemon, sel), sel


def test_channel_info_of_the_cpu_daemon(scraped_daemon: str) -> None:
    """Without a GPU the labels are empty, which Prometheus stores as absent."""
    result = instant_query(scraped_daemon, 'safemon_channel_info{job="safemon"}')
    assert sorted(r["metric"]["channel"] for r in result) == ["c0", "c1", "c2"]
    assert all("UUID" not in r["metric"] and "gpu" not in r["metric"] for r in result)


def test_dcgm_join_on_uuid_returns_each_gpu(scraped_daemon: str) -> None:
    (expr,) = [e for e in dashboard_expressions() if e.startswith("DCGM_FI_DEV_GPU_UTIL")]
    result = wait_for_query(scraped_daemon, expr, timeout_s=DATA_WAIT_S)
    assert sorted(r["metric"]["UUID"] for r in result) == sorted(UUIDS.values())


@pytest.mark.parametrize("alert", ["SafemonSafeStateEntered", "SafemonFaultHandlingOverFtti"])
def test_alert_fires_on_the_gpu_target(scraped_daemon: str, alert: str) -> None:
    expr = f'ALERTS{{alertname="{alert}", alertstate="firing", job="{GPU_JOB}"}}'
    (firing,) = wait_for_query(scraped_daemon, expr, timeout_s=SCRAPE_WAIT_S)
    if alert == "SafemonFaultHandlingOverFtti":
        assert firing["metric"]["kind"] == FaultKind.SELFTEST_FAILED.metric_kind


def test_monitor_alerts_stay_silent_while_targets_are_up(scraped_daemon: str) -> None:
    assert instant_query(scraped_daemon, 'ALERTS{alertname=~"SafemonAbsent|SafemonDown"}') == []


def test_alert_rules_are_loaded(scraped_daemon: str) -> None:
    result = wait_for_query(
        scraped_daemon, "sum(prometheus_rule_group_rules)", timeout_s=DATA_WAIT_S
    )
    assert result[0]["value"][1] == str(len(rule_expressions()))


def test_target_is_the_daemon(scraped_daemon: str) -> None:
    """The scrape hit safemon's endpoint (not some other exporter on the port)."""
    result = instant_query(scraped_daemon, 'safemon_build_info{job="safemon"}')
    assert len(result) == 1 and result[0]["metric"]["backend"] == "numpy"
    outcomes = instant_query(
        scraped_daemon, 'safemon_requests_total{job="safemon", outcome="released"}'
    )
    assert [r["value"][1] for r in outcomes] == [str(N_REQUESTS)]


def test_required_metrics_are_covered_by_the_dashboard() -> None:
    """The data check below is not vacuous: each required metric is on the dashboard."""
    used = set().union(*(metric_names(e) for e in _DASHBOARD))
    assert sorted(MUST_HAVE_DATA - used) == []


@pytest.mark.parametrize("expr", all_promql_expressions())
def test_every_expression_evaluates(scraped_daemon: str, expr: str) -> None:
    """No PromQL error for any expression (instant_query raises on one); data where the daemon
    has produced the metrics (`MUST_HAVE_DATA`, dashboard expressions)."""
    result = instant_query(scraped_daemon, expr)
    if _must_have_data(expr) and not result:
        # Bounded re-try: on a slow machine a scrape may still be settling.
        result = wait_for_query(scraped_daemon, expr, timeout_s=DATA_WAIT_S)
    if _must_have_data(expr):
        assert result, f"no data for {expr!r}"
