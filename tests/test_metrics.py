"""Metrics: the whole set on a fresh registry, label guards, forwarding, the HTTP endpoint."""

from __future__ import annotations

import math
import platform
import shutil
import ssl
import subprocess
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

import safemon
from safemon.config import Config, load_config
from safemon.errors import InvalidInputError
from safemon.gpu_identity import channel_devices
from safemon.metrics import (
    REQUEST_OUTCOMES,
    VOTE_OUTCOMES,
    BufferKind,
    ChannelDevice,
    Metrics,
    SelftestResult,
    UnknownLabelError,
    start_http_server,
)
from safemon.patterns.controller import METRIC_KINDS, FaultKind
from safemon.states import ChannelState, Mode, Policy
from safemon.transport.wire import RejectReason

CONFIGS = Path(__file__).resolve().parent.parent / "configs"
ENV = {"XDG_RUNTIME_DIR": "/run/user/1000"}

#: Metric family -> its labels (the exposed sample names add `_total` for counters,
#: `_bucket/_count/_sum` for histograms, `_info` for build). Per-channel families carry
#: dcgm-exporter's `gpu` and `UUID` beside `channel`.
DESIGN_SET: dict[str, tuple[str, set[str]]] = {
    "safemon_requests": ("counter", {"outcome"}),
    "safemon_votes": ("counter", {"policy", "outcome"}),
    "safemon_channel_disagreements": ("counter", {"channel", "gpu", "UUID"}),
    "safemon_channel_up": ("gauge", {"channel", "gpu", "UUID"}),
    "safemon_selftests": ("counter", {"channel", "gpu", "UUID", "result"}),
    "safemon_selftest_duration_seconds": ("histogram", set()),
    "safemon_dti_overruns": ("counter", {"channel", "gpu", "UUID"}),
    "safemon_mode": ("gauge", {"mode"}),
    "safemon_ecc_corrected": ("counter", {"buffer"}),
    "safemon_ecc_uncorrectable": ("counter", {"buffer"}),
    "safemon_vote_latency_seconds": ("histogram", set()),
    "safemon_kernel_seconds": ("histogram", {"channel", "gpu", "UUID"}),
    "safemon_messages_rejected": ("counter", {"reason"}),
    "safemon_fault_reaction_seconds": ("histogram", {"kind"}),
    "safemon_fault_detection_seconds": ("histogram", {"kind"}),
    "safemon_hft": ("gauge", {"kind"}),
    "safemon_build": ("info", {"deployment", "version", "python", "backend"}),
    "safemon_ftti_seconds": ("gauge", set()),
    "safemon_channel_info": ("gauge", {"channel", "gpu", "UUID", "placement", "variant"}),
    # no sample until a GPU self-test reports its SMs; the design-set test sets one
    "safemon_selftest_sm_coverage_ratio": ("gauge", {"channel", "gpu", "UUID"}),
    "safemon_fault_injection_enabled": ("gauge", set()),
    "safemon_cuda_mps_found": ("gauge", set()),
    "safemon_fault_classes": ("counter", {"kind", "class"}),
    "safemon_evictions": ("counter", {"what"}),
    "safemon_loop_away_seconds": ("counter", set()),
    # no sample until a whole-model vote disagrees; the design-set test counts one
    "safemon_model_diverging_layer": ("counter", {"layer"}),
}


@pytest.fixture
def config() -> Config:
    return load_config(CONFIGS / "2oo3.yaml", env=ENV)


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


@pytest.fixture
def metrics(config: Config, registry: CollectorRegistry) -> Metrics:
    return Metrics(config, registry, backend="numpy")


def value(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    """A sample's value; a per-channel sample gets the empty `gpu`/`UUID` of a NumPy config
    unless the caller names them."""
    if "channel" in labels:
        labels = {"gpu": "", "UUID": "", **labels}
    return registry.get_sample_value(name, labels)


def series(registry: CollectorRegistry) -> list[tuple[str, tuple[tuple[str, str], ...]]]:
    """Every exposed (sample name, labels) pair, without the `_created` timestamps."""
    return sorted(
        (s.name, tuple(sorted(s.labels.items())))
        for f in registry.collect()
        for s in f.samples
        if not s.name.endswith("_created")
    )


# ------------------------------------------------------------------ the set


def test_families_types_and_labels_match_design(
    metrics: Metrics, registry: CollectorRegistry
) -> None:
    for ch in metrics.channels:  # no sample until a GPU self-test
        metrics.set_sm_coverage(ch, 1.0)
    metrics.count_diverging_layer(0)  # no sample until a whole-model vote disagrees
    families = {f.name: f for f in registry.collect()}
    assert set(families) == set(DESIGN_SET)
    for name, (kind, labels) in DESIGN_SET.items():
        fam = families[name]
        assert fam.type == kind, name
        sample_labels = {k for s in fam.samples for k in s.labels if k != "le"}
        assert sample_labels == labels, name
        if kind == "counter":
            assert {s.name for s in fam.samples} == {f"{name}_total"}


def test_every_known_series_starts_at_zero(
    metrics: Metrics, registry: CollectorRegistry, config: Config
) -> None:
    for o in REQUEST_OUTCOMES:
        assert value(registry, "safemon_requests_total", outcome=o) == 0.0
    for p in ("2oo3", "2oo2"):
        for o in VOTE_OUTCOMES:
            assert value(registry, "safemon_votes_total", policy=p, outcome=o) == 0.0
    for ch in config.channel_names:
        assert value(registry, "safemon_channel_disagreements_total", channel=ch) == 0.0
        assert value(registry, "safemon_channel_up", channel=ch) == 0.0
        assert value(registry, "safemon_dti_overruns_total", channel=ch) == 0.0
        assert value(registry, "safemon_kernel_seconds_count", channel=ch) == 0.0
        for r in ("pass", "fail", "timeout"):
            assert value(registry, "safemon_selftests_total", channel=ch, result=r) == 0.0
    for b in ("weights", "input", "output", "pattern"):
        assert value(registry, "safemon_ecc_corrected_total", buffer=b) == 0.0
        assert value(registry, "safemon_ecc_uncorrectable_total", buffer=b) == 0.0
    for reason in RejectReason:
        assert value(registry, "safemon_messages_rejected_total", reason=reason.value) == 0.0
    for k in METRIC_KINDS:
        assert value(registry, "safemon_fault_reaction_seconds_count", kind=k) == 0.0
    assert value(registry, "safemon_vote_latency_seconds_count") == 0.0
    assert value(registry, "safemon_selftest_duration_seconds_count") == 0.0


def test_policies_not_in_the_degradation_chain_have_no_series(
    metrics: Metrics, registry: CollectorRegistry
) -> None:
    assert value(registry, "safemon_votes_total", policy="1oo1D", outcome="released") is None
    with pytest.raises(UnknownLabelError, match="policy"):
        metrics.observe_vote(Policy.ONE_OO_ONE_D, "released", 0.001)


def test_hft_gauge_starts_with_the_declared_hft_and_claims_no_effective_hft(
    metrics: Metrics, registry: CollectorRegistry
) -> None:
    """2oo3 declares HFT 1; the effective HFT stays 0 until the daemon has assessed the
    hardware, so an unassessed deployment never shows more than it has."""
    assert value(registry, "safemon_hft", kind="declared") == 1.0
    assert value(registry, "safemon_hft", kind="effective") == 0.0
    metrics.set_hft(2, 1)
    assert value(registry, "safemon_hft", kind="declared") == 2.0
    assert value(registry, "safemon_hft", kind="effective") == 1.0


@pytest.mark.parametrize(("declared", "effective"), [(1, 2), (-1, 0), (1, True), (1.0, 0)])
def test_hft_gauge_refuses_impossible_values(
    metrics: Metrics, registry: CollectorRegistry, declared: object, effective: object
) -> None:
    with pytest.raises(InvalidInputError):
        metrics.set_hft(declared, effective)  # type: ignore[arg-type]
    assert value(registry, "safemon_hft", kind="declared") == 1.0


def test_build_info_and_initial_mode(metrics: Metrics, registry: CollectorRegistry) -> None:
    labels = {
        "deployment": "2oo3-demo",
        "version": safemon.__version__,
        "python": platform.python_version(),
        "backend": "numpy",
    }
    assert registry.get_sample_value("safemon_build_info", labels) == 1.0
    assert value(registry, "safemon_mode", mode="NORMAL") == 1.0
    assert value(registry, "safemon_mode", mode="DEGRADED") == 0.0
    assert value(registry, "safemon_mode", mode="SAFE") == 0.0


def test_ftti_gauge_is_the_configured_bound(
    metrics: Metrics, registry: CollectorRegistry, config: Config
) -> None:
    assert value(registry, "safemon_ftti_seconds") == config.timing.ftti_s


def test_channel_labels_follow_the_config(registry: CollectorRegistry) -> None:
    Metrics(load_config(CONFIGS / "hft1.yaml", env=ENV), registry)
    # hft1 pins ch-a to GPU 0 and ch-b to GPU 1; no device was asked, so UUID is empty.
    assert value(registry, "safemon_channel_up", channel="ch-a", gpu="0") == 0.0
    assert value(registry, "safemon_channel_up", channel="ch-b", gpu="1") == 0.0
    assert value(registry, "safemon_channel_up", channel="ch0") is None
    assert value(registry, "safemon_votes_total", policy="1oo1D", outcome="timeout") == 0.0


UUID_A = "GPU-0a1b2c3d-0000-1111-2222-333344445555"


def test_device_uuid_labels_every_channel_series(registry: CollectorRegistry) -> None:
    """The `UUID` label comes from the device map, `gpu` from the config, on every
    per-channel series and on the channel's info series."""
    config = load_config(CONFIGS / "hft1.yaml", env=ENV)
    metrics = Metrics(config, registry, devices={"ch-a": ChannelDevice(gpu="0", uuid=UUID_A)})
    metrics.observe_selftest("ch-a", SelftestResult.PASS, 0.001)
    metrics.observe_kernel("ch-a", 1e-4)
    a = {"channel": "ch-a", "gpu": "0", "UUID": UUID_A}
    assert value(registry, "safemon_selftests_total", **a, result="pass") == 1.0
    assert value(registry, "safemon_kernel_seconds_count", **a) == 1.0
    assert value(registry, "safemon_channel_disagreements_total", **a) == 0.0
    assert metrics.channel_labels("ch-a") == a
    assert metrics.channel_labels("ch-b") == {"channel": "ch-b", "gpu": "1", "UUID": ""}
    info = {s.labels["channel"]: s.labels for f in registry.collect()
            if f.name == "safemon_channel_info" for s in f.samples}
    assert info["ch-a"]["UUID"] == UUID_A and info["ch-a"]["placement"] == "process"
    assert value(registry, "safemon_channel_info", **info["ch-b"]) == 1.0


def test_a_null_gpu_is_the_default_device_on_the_gpu_backend(registry: CollectorRegistry) -> None:
    """`gpu: null` on the GPU backend runs on device 0 (the worker and the HFT count agree), so
    its labels name device 0 and that device's UUID, and the DCGM join finds it."""
    config = load_config(CONFIGS / "2oo3.yaml", env=ENV)
    devices = channel_devices(config, lambda index: {0: UUID_A}[index])
    metrics = Metrics(config, registry, devices=devices)
    assert metrics.channel_labels("ch0") == {"channel": "ch0", "gpu": "0", "UUID": UUID_A}


def test_a_null_gpu_has_no_gpu_labels_on_the_numpy_backend(registry: CollectorRegistry) -> None:
    config = load_config(CONFIGS / "2oo3.yaml", env=ENV)
    metrics = Metrics(config, registry, devices=channel_devices(config, None))
    assert metrics.channel_labels("ch0") == {"channel": "ch0", "gpu": "", "UUID": ""}


def test_no_created_series_are_exposed(metrics: Metrics, registry: CollectorRegistry) -> None:
    names = [s.name for f in registry.collect() for s in f.samples]
    assert names and not [n for n in names if n.endswith("_created")]


def test_deadlines_from_the_config_are_bucket_edges(
    metrics: Metrics, registry: CollectorRegistry, config: Config
) -> None:
    le = str(config.timing.request_deadline_s)
    assert value(registry, "safemon_vote_latency_seconds_bucket", le=le) == 0.0
    assert (
        value(
            registry,
            "safemon_fault_reaction_seconds_bucket",
            kind="disagreement",
            le=str(config.timing.ftti_s),
        )
        == 0.0
    )
    assert value(registry, "safemon_vote_latency_seconds_bucket", le="5e-05") == 0.0  # 50 µs
    assert value(registry, "safemon_vote_latency_seconds_bucket", le="1.0") == 0.0


def test_two_metric_sets_on_one_registry_are_refused(
    config: Config, registry: CollectorRegistry
) -> None:
    Metrics(config, registry)
    with pytest.raises(ValueError, match="Duplicated"):
        Metrics(config, registry)


# ------------------------------------------------------------------ recording


def test_observe_vote_counts_and_times(metrics: Metrics, registry: CollectorRegistry) -> None:
    metrics.observe_vote(Policy.TWO_OO_THREE, "released", 0.0002)
    metrics.observe_vote("2oo2", "disagreement", 0.004)
    assert value(registry, "safemon_votes_total", policy="2oo3", outcome="released") == 1.0
    assert value(registry, "safemon_votes_total", policy="2oo2", outcome="disagreement") == 1.0
    assert value(registry, "safemon_vote_latency_seconds_count") == 2.0
    assert value(registry, "safemon_vote_latency_seconds_bucket", le="0.0003") == 1.0
    assert value(registry, "safemon_vote_latency_seconds_sum") == pytest.approx(0.0042)


def test_request_outcomes(metrics: Metrics, registry: CollectorRegistry) -> None:
    metrics.count_request("released")
    metrics.count_request("invalid_input")
    metrics.count_request("invalid_input")
    assert value(registry, "safemon_requests_total", outcome="released") == 1.0
    assert value(registry, "safemon_requests_total", outcome="invalid_input") == 2.0


def test_set_mode_keeps_exactly_one_mode_at_one(
    metrics: Metrics, registry: CollectorRegistry
) -> None:
    metrics.set_mode(Mode.SAFE)
    assert [value(registry, "safemon_mode", mode=m.value) for m in Mode] == [0.0, 0.0, 1.0]
    metrics.set_mode("DEGRADED")
    assert [value(registry, "safemon_mode", mode=m.value) for m in Mode] == [0.0, 1.0, 0.0]


def test_channel_state_drives_channel_up(metrics: Metrics, registry: CollectorRegistry) -> None:
    metrics.set_channel_state("ch1", ChannelState.UP)
    assert value(registry, "safemon_channel_up", channel="ch1") == 1.0
    metrics.set_channel_state("ch1", ChannelState.QUARANTINED)
    assert value(registry, "safemon_channel_up", channel="ch1") == 0.0
    metrics.set_channel_up("ch2", True)
    assert value(registry, "safemon_channel_up", channel="ch2") == 1.0


def test_selftests_disagreements_overruns(metrics: Metrics, registry: CollectorRegistry) -> None:
    metrics.observe_selftest("ch0", SelftestResult.PASS, 0.003)
    metrics.observe_selftest("ch0", "timeout", None)  # a timeout has no measured duration
    metrics.count_disagreement("ch2")
    metrics.count_dti_overrun("ch1")
    assert value(registry, "safemon_selftests_total", channel="ch0", result="pass") == 1.0
    assert value(registry, "safemon_selftests_total", channel="ch0", result="timeout") == 1.0
    assert value(registry, "safemon_selftest_duration_seconds_count") == 1.0
    assert value(registry, "safemon_channel_disagreements_total", channel="ch2") == 1.0
    assert value(registry, "safemon_dti_overruns_total", channel="ch1") == 1.0


def test_kernel_rejections_fault_reaction_local_ecc(
    metrics: Metrics, registry: CollectorRegistry
) -> None:
    metrics.observe_kernel("ch1", 0.00002)
    metrics.count_rejected(RejectReason.STALE)
    metrics.count_rejected("bad_crc")
    metrics.observe_fault_reaction(FaultKind.HEARTBEAT_LOST, 0.6)
    metrics.count_ecc(BufferKind.OUTPUT, corrected=2, uncorrectable=1)
    assert value(registry, "safemon_kernel_seconds_count", channel="ch1") == 1.0
    assert value(registry, "safemon_kernel_seconds_bucket", channel="ch1", le="2.5e-05") == 1.0
    assert value(registry, "safemon_messages_rejected_total", reason="stale") == 1.0
    assert value(registry, "safemon_messages_rejected_total", reason="bad_crc") == 1.0
    assert value(registry, "safemon_fault_reaction_seconds_count", kind="heartbeat_lost") == 1.0
    assert value(registry, "safemon_ecc_corrected_total", buffer="output") == 2.0
    assert value(registry, "safemon_ecc_uncorrectable_total", buffer="output") == 1.0


@pytest.mark.parametrize(
    "call",
    [
        lambda m: m.count_disagreement("ch9"),
        lambda m: m.set_channel_up("CH0", True),
        lambda m: m.observe_kernel('evil"}', 0.1),
        lambda m: m.count_request("ok"),
        lambda m: m.observe_vote("2oo3", "maybe", 0.1),
        lambda m: m.observe_selftest("ch0", "passed", 0.1),
        lambda m: m.set_mode("PANIC"),
        lambda m: m.count_ecc("layer0.weight", corrected=1),
        lambda m: m.count_rejected("because"),
        lambda m: m.observe_fault_reaction("gremlins", 0.1),
    ],
)
def test_label_values_outside_the_config_are_refused(
    metrics: Metrics, registry: CollectorRegistry, call: Callable[[Metrics], object]
) -> None:
    before = series(registry)
    with pytest.raises(UnknownLabelError):
        call(metrics)
    assert series(registry) == before  # no new series appeared


@pytest.mark.parametrize("seconds", [-0.001, math.nan, math.inf, True, "0.1"])
def test_bad_durations_are_refused(metrics: Metrics, seconds: object) -> None:
    with pytest.raises(InvalidInputError):
        metrics.observe_vote("2oo3", "released", seconds)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError):
        metrics.observe_kernel("ch0", seconds)  # type: ignore[arg-type]


# ------------------------------------------------------------------ forwarded channel figures


def test_channel_ecc_totals_are_folded_as_differences(
    metrics: Metrics, registry: CollectorRegistry
) -> None:
    metrics.update_channel_ecc("ch0", 1, {"weights": 3}, {"weights": 0})
    metrics.update_channel_ecc("ch0", 1, {"weights": 3}, {"weights": 0})  # repeated heartbeat
    metrics.update_channel_ecc("ch0", 1, {"weights": 5}, {"weights": 1})
    metrics.update_channel_ecc("ch1", "pid-77", {"weights": 2}, {})
    assert value(registry, "safemon_ecc_corrected_total", buffer="weights") == 7.0
    assert value(registry, "safemon_ecc_uncorrectable_total", buffer="weights") == 1.0


def test_a_restarted_channel_counts_from_zero_again(
    metrics: Metrics, registry: CollectorRegistry
) -> None:
    metrics.update_channel_ecc("ch2", 1, {"pattern": 4}, {})
    metrics.update_channel_ecc("ch2", 2, {"pattern": 1}, {})  # new incarnation: +1, not -3
    assert value(registry, "safemon_ecc_corrected_total", buffer="pattern") == 5.0


def test_a_decreasing_total_records_nothing(metrics: Metrics, registry: CollectorRegistry) -> None:
    metrics.update_channel_ecc("ch0", 1, {"weights": 4}, {})
    with pytest.raises(InvalidInputError, match="went down"):
        metrics.update_channel_ecc("ch0", 1, {"input": 9, "weights": 2}, {})
    assert value(registry, "safemon_ecc_corrected_total", buffer="input") == 0.0
    metrics.update_channel_ecc("ch0", 1, {"weights": 5}, {})  # baseline was kept at 4
    assert value(registry, "safemon_ecc_corrected_total", buffer="weights") == 5.0


@pytest.mark.parametrize(
    ("corrected", "error"),
    [
        ({"weights": -1}, InvalidInputError),
        ({"weights": 1.5}, InvalidInputError),
        ({"layer0": 1}, UnknownLabelError),
    ],
)
def test_bad_channel_ecc_reports_are_refused(
    metrics: Metrics, corrected: dict[str, int], error: type[Exception]
) -> None:
    with pytest.raises(error):
        metrics.update_channel_ecc("ch0", 1, corrected, {})


# ------------------------------------------------------------------ the HTTP endpoint


def test_scrape_the_http_endpoint(registry: CollectorRegistry) -> None:
    config = load_config(env={**ENV, "SAFEMON_METRICS__PORT": "0"})  # 0: a free port
    metrics = Metrics(config, registry)
    metrics.set_channel_up("ch0", True)
    with start_http_server(config, registry) as server:
        assert server.url.startswith("http://127.0.0.1:")
        assert not server.url.endswith(":0/metrics")
        with urllib.request.urlopen(server.url, timeout=10) as resp:
            body = resp.read().decode()
    assert 'safemon_channel_up{UUID="",channel="ch0",gpu=""} 1.0' in body
    assert 'safemon_mode{mode="NORMAL"} 1.0' in body
    assert "safemon_build_info{" in body


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")
def test_scrape_over_tls(registry: CollectorRegistry, tmp_path: Path) -> None:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    env = {
        **ENV,
        "SAFEMON_METRICS__PORT": "0",
        "SAFEMON_METRICS__TLS_CERT": str(cert),
        "SAFEMON_METRICS__TLS_KEY": str(key),
    }
    config = load_config(env=env)
    Metrics(config, registry)
    server = start_http_server(config, registry)
    try:
        assert server.url.startswith("https://127.0.0.1:")
        ctx = ssl.create_default_context(cafile=str(cert))  # verifies the certificate
        with urllib.request.urlopen(server.url, timeout=10, context=ctx) as resp:
            assert "safemon_requests_total" in resp.read().decode()
    finally:
        server.stop()
    server.stop()  # idempotent


def test_the_diverging_layer_label_is_a_bounded_index(config: Config,
                                                      registry: CollectorRegistry) -> None:
    """`count_diverging_layer` takes a layer index below MAX_LAYERS and nothing else, so a
    malformed digest frame cannot grow the label set."""
    from safemon.models.layers import MAX_LAYERS

    m = Metrics(config, registry=registry)
    m.count_diverging_layer(3)
    m.count_diverging_layer(3)
    assert m.model_diverging_layer.labels(layer="3")._value.get() == 2
    for bad in (-1, MAX_LAYERS, True, "3", 2.0):
        with pytest.raises(UnknownLabelError):
            m.count_diverging_layer(bad)  # type: ignore[arg-type]


def test_loop_away_adds_up_seconds_and_refuses_bad_ones(metrics: Metrics, registry: CollectorRegistry) -> None:
    assert value(registry, "safemon_loop_away_seconds_total") == 0.0
    metrics.observe_loop_away(2.0)
    metrics.observe_loop_away(0.25)
    assert value(registry, "safemon_loop_away_seconds_total") == 2.25
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(InvalidInputError):
            metrics.observe_loop_away(bad)
