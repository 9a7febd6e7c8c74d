"""Prometheus metrics of one safemon deployment (README.md, "Reading the metrics"; the full
catalogue of names and labels is `tests/deploy/promql.py`, checked against this module).

`Metrics` creates the whole set on a registry it is given (tests pass a fresh
`CollectorRegistry`), with the prefix `safemon_`, base units, and counters ending in
`_total`. Label values never come from message content: channel names and policies come
from the `Config`, every other label from a fixed enum in this module (or the voter's and
the wire format's own enums). A value outside those sets raises `UnknownLabelError`, so a
bug or a hostile peer cannot blow up the series count. Every labelled series known in
advance is created at start-up, so dashboards show zeros instead of gaps.

Joining with DCGM
-----------------
Every per-channel metric carries, besides `channel`, the labels `gpu` (the CUDA device
index from the config) and `UUID` (the device's own UUID, `GPU-xxxxxxxx-...`), spelt as
dcgm-exporter spells them, so `on (UUID)` joins a channel with its GPU's DCGM series. Both
come from the config and from querying the device at start-up (`ChannelDevice`), never from
a message. A channel without a GPU (the NumPy backend) has both empty, which Prometheus
stores as "label absent". `safemon_channel_info` (value 1) carries the same labels plus the
placement and kernel variant, one series per channel.

prometheus_client's `_created` samples (one per counter and histogram child, about a sixth
of all series) are turned off process-wide when `Metrics` is built: they hold the start
time of each series, which Prometheus does not need to compute rates of counters that are
created at start-up and never reset within a process.

How figures of the channel processes reach the one endpoint
-----------------------------------------------------------
Kernel times and ECC counts are measured inside the channel processes, but only the
daemon serves metrics. The channels forward them in message headers and the daemon
observes them here:

- each RESULT header carries the kernel time of that request (`observe_kernel`); a lost
  result fails its request anyway, so nothing is double-counted or silently missing;
- each HEARTBEAT header carries the channel's *cumulative* ECC counts per buffer kind
  together with its incarnation (a restart counter or pid); `update_channel_ecc` adds the
  difference since the last heartbeat of the same incarnation, so a dropped heartbeat loses
  nothing and a restarted channel starts again from zero, as Prometheus counters expect.

Prometheus' multiprocess mode was rejected: it needs a shared writable directory of mmap
files (impossible for tcp:// channels on other hosts), per-pid file cleanup when a channel
crashes or restarts (exactly the events a safety monitor must survive), it cannot express
live gauges such as `channel_up` across processes, and channel processes would need the
environment set before `prometheus_client` is imported. Forwarding keeps a single
registry in a single process and lets the daemon validate every value first.
"""

from __future__ import annotations

import math
import platform
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum

import prometheus_client
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info

from safemon.config import Config
from safemon.errors import InvalidInputError

# The HTTP endpoint lives with the probes it also answers; re-exported here, where it began.
from safemon.health import MetricsServer, start_http_server
from safemon.hft import declared_hft
from safemon.models.layers import MAX_LAYERS
from safemon.patterns.controller import METRIC_KINDS, FaultKind
from safemon.patterns.voter import OUTCOMES as VOTE_OUTCOMES
from safemon.states import ChannelState, Mode, Policy
from safemon.transport.wire import RejectReason

__all__ = [
    "FAULT_REACTION_BUCKETS",
    "KERNEL_BUCKETS",
    "PREFIX",
    "REQUEST_OUTCOMES",
    "SELFTEST_BUCKETS",
    "VOTE_LATENCY_BUCKETS",
    "VOTE_OUTCOMES",
    "BufferKind",
    "ChannelDevice",
    "Metrics",
    "MetricsServer",
    "SelftestResult",
    "UnknownLabelError",
    "start_http_server",
]

PREFIX = "safemon"

#: HELP texts of the gauges a running daemon reads at scrape time
#: (`safemon.metrics_collector.RuntimeStateCollector`).
HELP_MODE = "1 for the current system mode, 0 for the others."
HELP_VOTES = "Voter decisions, by policy in force and outcome."
HELP_CHANNEL_UP = "1 while the channel votes (state UP), else 0."
HELP_HFT = ("Hardware fault tolerance (IEC 61508): declared by the configured policy, and "
            "effective for the voting set now, counting channels on one GPU as one.")

#: `requests_total{outcome}`: the voter's outcomes plus requests refused at ingress.
#: busy: refused by admission control (limits.max_in_flight); client_timeout: the client's
#: own deadline passed first (the channels are not blamed); shutting_down: the daemon stopped;
#: model_unavailable: a whole-model request under an effective 1oo1D (ModelUnavailableError).
REQUEST_OUTCOMES: tuple[str, ...] = (
    *VOTE_OUTCOMES, "invalid_input", "busy", "client_timeout", "shutting_down",
    "model_unavailable")

# Buckets in seconds. Each histogram also gets the matching deadline from the config as a
# bucket edge, so "fraction over the deadline" is read exactly, not interpolated.
#: 50 µs (a loopback round trip) .. 1 s; 300 µs and 1 ms are the p50/p99 targets.
VOTE_LATENCY_BUCKETS: tuple[float, ...] = (
    50e-6, 75e-6, 100e-6, 150e-6, 200e-6, 300e-6, 500e-6, 750e-6,
    1e-3, 2e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 500e-3, 1.0,
)  # fmt: skip
#: 10 µs (an 80² kernel) .. 1 s (4096³ and beyond).
KERNEL_BUCKETS: tuple[float, ...] = (
    10e-6, 25e-6, 50e-6, 100e-6, 250e-6, 500e-6,
    1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 500e-3, 1.0,
)  # fmt: skip
SELFTEST_BUCKETS: tuple[float, ...] = (
    100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 500e-3, 1.0, 2.5,
)  # fmt: skip
#: Detection to safe reaction; compared with the FTTI (an edge added from the config).
FAULT_REACTION_BUCKETS: tuple[float, ...] = (
    100e-6, 1e-3, 5e-3, 10e-3, 50e-3, 100e-3, 250e-3, 500e-3, 1.0, 2.5, 5.0, 10.0,
)  # fmt: skip


class UnknownLabelError(ValueError):
    """A label value outside the set known from the config or the module's enums."""


#: Label names of every per-channel metric; `gpu` and `UUID` are dcgm-exporter's spelling.
CHANNEL_LABELS: tuple[str, ...] = ("channel", "gpu", "UUID")


@dataclass(frozen=True)
class ChannelDevice:
    """The GPU a channel runs on, as the `gpu` and `UUID` labels show it.

    gpu: the CUDA device index from the config, as a decimal string ("" without a GPU).
    uuid: the device's UUID as NVML and dcgm-exporter print it, "GPU-" and 36 characters
        of dashed hex ("" without a GPU, or when the device could not be asked).
    """

    gpu: str = ""
    uuid: str = ""


class SelftestResult(StrEnum):
    """`selftests_total{result}`."""

    PASS = "pass"
    FAIL = "fail"  # C or ES differed from the golden pattern
    TIMEOUT = "timeout"  # no verdict within timing.selftest_deadline_s


class BufferKind(StrEnum):
    """`ecc_*_total{buffer}`: the kind of protected buffer. Buffer *names* are chosen by
    the application, so they are not label values; the daemon maps each to its kind."""

    WEIGHTS = "weights"  # resident weights (scrubbed)
    INPUT = "input"  # an uploaded operand
    OUTPUT = "output"  # a result checked after download
    PATTERN = "pattern"  # golden-pattern data resident for self-tests


def _channel_labels(
    config: Config, devices: Mapping[str, ChannelDevice]
) -> dict[str, dict[str, str]]:
    """channel name -> its `CHANNEL_LABELS` values; `gpu` from the config (a null `gpu` on
    the GPU backend is device 0, as `devices` resolves it; empty on the NumPy backend)."""
    assert config.channels is not None  # resolved by Config's validator
    out: dict[str, dict[str, str]] = {}
    for ch in config.channels:
        dev = devices.get(ch.name, ChannelDevice())
        gpu = dev.gpu if ch.gpu is None else str(ch.gpu)
        out[ch.name] = {"channel": ch.name, "gpu": gpu, "UUID": dev.uuid if gpu else ""}
    return out


def _buckets(base: Iterable[float], *extra: float) -> tuple[float, ...]:
    return tuple(sorted({*base, *extra}))


def _check_seconds(what: str, seconds: float) -> float:
    # A negative or NaN duration is a clock bug; recording it would corrupt the histogram.
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise InvalidInputError(f"{what}: seconds must be a number, got {seconds!r}")
    if not math.isfinite(seconds) or seconds < 0:
        raise InvalidInputError(f"{what}: seconds must be finite and >= 0, got {seconds!r}")
    return float(seconds)


def _check_count(what: str, count: int) -> int:
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise InvalidInputError(f"{what}: count must be an int >= 0, got {count!r}")
    return count


class Metrics:
    """The safemon metric set on `registry`, with label values fixed by `config`.

    Args:
        config: the deployment; its channel names, policy chain and deadlines are used.
        registry: where to register (a fresh `CollectorRegistry` in tests; the daemon
            passes its own, or `prometheus_client.REGISTRY`).
        backend: the backend actually in use ("numpy" or "cupy"), for `build_info`;
            None = `config.backend` (which may say "auto").
        mode: the mode gauge's initial value.
        devices: each channel's GPU identity (`gpu_identity.channel_devices`); a channel
            left out gets `gpu` from the config and an empty `UUID`.

    Raises:
        ValueError: (from prometheus_client) a metric of the same name already exists on
            `registry`.
    """

    def __init__(
        self,
        config: Config,
        registry: CollectorRegistry,
        *,
        backend: str | None = None,
        mode: Mode = Mode.NORMAL,
        devices: Mapping[str, ChannelDevice] | None = None,
    ) -> None:
        # Process-wide: the start time of a series created at start-up adds nothing.
        prometheus_client.disable_created_metrics()  # type: ignore[no-untyped-call]
        self.registry = registry
        self.channels: tuple[str, ...] = config.channel_names
        self.policies: tuple[Policy, ...] = config.policy_chain()
        self._channel_set = frozenset(self.channels)
        self._channel_labels = _channel_labels(config, devices or {})
        #: kernel_seconds' child per configured channel (made by `_preinitialise`: a
        #: RESULT then costs no label look-up)
        self._kernel_seconds_of: dict[str, Histogram] = {}
        #: the `requests` child of each outcome, resolved once (counted per request)
        self._requests_of: dict[str, Counter] = {}
        self._policy_values = frozenset(p.value for p in self.policies)
        self._lock = threading.Lock()
        # (channel, buffer kind, "corrected"|"uncorrectable") -> (incarnation, last total)
        self._ecc_seen: dict[tuple[str, str, str], tuple[str, int]] = {}

        def name(short: str) -> str:
            return f"{PREFIX}_{short}"

        t = config.timing
        self.requests = Counter(
            name("requests_total"), "Requests answered, by outcome.", ["outcome"], registry=registry
        )
        self.votes = Counter(
            name("votes_total"),
            HELP_VOTES,
            ["policy", "outcome"],
            registry=registry,
        )
        self.channel_disagreements = Counter(
            name("channel_disagreements_total"),
            "Votes in which the channel was in the minority or mismatched.",
            CHANNEL_LABELS,
            registry=registry,
        )
        self.channel_up = Gauge(
            name("channel_up"),
            HELP_CHANNEL_UP,
            CHANNEL_LABELS,
            registry=registry,
        )
        self.selftests = Counter(
            name("selftests_total"),
            "Golden-pattern self-tests, by channel and result.",
            [*CHANNEL_LABELS, "result"],
            registry=registry,
        )
        self.selftest_duration = Histogram(
            name("selftest_duration_seconds"),
            "Self-test duration from dispatch to verdict.",
            buckets=_buckets(SELFTEST_BUCKETS, t.selftest_deadline_s),
            registry=registry,
        )
        self.dti_overruns = Counter(
            name("dti_overruns_total"),
            "Self-tests that did not complete within their deadline (DTI overruns).",
            CHANNEL_LABELS,
            registry=registry,
        )
        self.mode = Gauge(
            name("mode"),
            HELP_MODE,
            ["mode"],
            registry=registry,
        )
        self.ecc_corrected = Counter(
            name("ecc_corrected_total"),
            "Single-bit errors corrected by SEC-DED.",
            ["buffer"],
            registry=registry,
        )
        self.ecc_uncorrectable = Counter(
            name("ecc_uncorrectable_total"),
            "Uncorrectable (double-bit) errors detected by SEC-DED.",
            ["buffer"],
            registry=registry,
        )
        self.vote_latency = Histogram(
            name("vote_latency_seconds"),
            "Time from request ingress to the vote's answer.",
            buckets=_buckets(VOTE_LATENCY_BUCKETS, t.request_deadline_s),
            registry=registry,
        )
        self.kernel_seconds = Histogram(
            name("kernel_seconds"),
            "Protected kernel time per request, as reported by the channel.",
            CHANNEL_LABELS,
            buckets=KERNEL_BUCKETS,
            registry=registry,
        )
        self.messages_rejected = Counter(
            name("messages_rejected_total"),
            "Received messages dropped, by reason.",
            ["reason"],
            registry=registry,
        )
        self.fault_reaction = Histogram(
            name("fault_reaction_seconds"),
            "Time from fault detection to the completed safe reaction.",
            ["kind"],
            buckets=_buckets(FAULT_REACTION_BUCKETS, t.ftti_s),
            registry=registry,
        )
        self.fault_detection = Histogram(
            name("fault_detection_seconds"),
            "Time from fault occurrence to its detection, for faults whose occurrence time is "
            "known (injected ones).",
            ["kind"],
            buckets=_buckets(FAULT_REACTION_BUCKETS, t.ftti_s),
            registry=registry,
        )
        self.channel_info = Gauge(
            name("channel_info"),
            "1 per configured channel; labels say where and how it runs.",
            [*CHANNEL_LABELS, "placement", "variant"],
            registry=registry,
        )
        self.ftti = Gauge(
            name("ftti_seconds"),
            "The configured fault tolerant time interval (timing.ftti_s); alerts compare "
            "detection plus reaction times with it.",
            registry=registry,
        )
        self.ftti.set(t.ftti_s)
        self.hft = Gauge(
            name("hft"),
            HELP_HFT,
            ["kind"],
            registry=registry,
        )
        self.sm_coverage = Gauge(
            name("selftest_sm_coverage_ratio"),
            "Share of the channel's GPU SMs that ran a block of a passed self-test within the "
            "last DTI (set at each self-test result; absent without a GPU).",
            CHANNEL_LABELS,
            registry=registry,
        )
        # Info appends `_info`: the exposed series is safemon_build_info{...} 1.
        self.build = Info(name("build"), "safemon build and runtime.", registry=registry)

        self._preinitialise()
        from safemon import __version__  # late: safemon/__init__ may import this module

        self.build.info(
            {
                "deployment": config.name,
                "version": __version__,
                "python": platform.python_version(),
                "backend": backend if backend is not None else config.backend,
            }
        )
        self.set_mode(mode)
        assert config.channels is not None  # resolved by Config's validator
        for ch_cfg in config.channels:
            lab = self._channel_labels[ch_cfg.name]
            v = ch_cfg.variant
            variant = f"{v.checksum or 'none'}/{v.level or '-'}/{v.mode}/{v.tile}"
            self.channel_info.labels(**lab, placement=ch_cfg.placement, variant=variant).set(1)
        self.fault_injection = Gauge(
            name("fault_injection_enabled"),
            "1 when testing.fault_injection is on (a test configuration), else 0.",
            registry=registry,
        )
        self.fault_injection.set(1 if config.testing.fault_injection else 0)
        self.cuda_mps = Gauge(
            name("cuda_mps_found"),
            "1 when, as the daemon started, a CUDA MPS control daemon accepted connections in "
            "the pipe directory its channel processes inherit (safemon.mps), else 0 (always 0 "
            "on the NumPy backend).",
            registry=registry,
        )
        self.cuda_mps.set(0)
        self.fault_classes = Counter(
            name("fault_classes_total"),
            "Faults reported to the safe-state controller, by kind and class "
            "(transient / permanent after retests, or unclassified).",
            ["kind", "class"],
            registry=registry,
        )
        for k in METRIC_KINDS:
            for c in ("transient", "permanent", "unclassified"):
                self.fault_classes.labels(kind=k, **{"class": c})
        self.evictions = Counter(
            name("evictions_total"),
            "Registered weights and models evicted, least recently used first, to make room "
            "in a full budget (limits.max_weights / max_weight_total_bytes; MAX_MODELS / "
            "max_model_total_bytes); "
            "their clients register them again on their next request.",
            ["what"],
            registry=registry,
        )
        for what in ("weight", "model"):
            self.evictions.labels(what=what)
        self.loop_away = Counter(
            name("loop_away_seconds_total"),
            "Seconds in which the daemon's loop read no channel message, counted in stretches "
            "longer than 0.05 s (busy, stalled or descheduled; safemon.loop_attention). The "
            "channels' open deadlines were moved by them, and a channel that failed meanwhile "
            "was found that much later.",
            registry=registry,
        )
        self.model_diverging_layer = Counter(
            name("model_diverging_layer_total"),
            "Disagreeing whole-model votes, by the first layer (0-based) at which two "
            "channels' per-layer digests differ.",
            ["layer"],
            registry=registry,
        )

    def count_eviction(self, what: str) -> None:
        """One registered weight or model (`what`) evicted to make room (`safemon.eviction`).

        Raises:
            UnknownLabelError: `what` is neither "weight" nor "model".
        """
        if what not in ("weight", "model"):
            raise UnknownLabelError(f"eviction of {what!r}: 'weight' or 'model'")
        self.evictions.labels(what=what).inc()

    def observe_loop_away(self, seconds: float) -> None:
        """The daemon's loop read no channel message for `seconds` at a stretch."""
        self.loop_away.inc(_check_seconds("loop away", seconds))

    def count_diverging_layer(self, layer: int) -> None:
        """One disagreeing whole-model vote whose first diverging layer is `layer` (an index
        below `safemon.models.layers.MAX_LAYERS`, so the label set stays bounded).

        Raises:
            UnknownLabelError: any other value.
        """
        if isinstance(layer, bool) or not isinstance(layer, int) or not 0 <= layer < MAX_LAYERS:
            raise UnknownLabelError(f"diverging layer {layer!r}: an index in [0, {MAX_LAYERS})")
        self.model_diverging_layer.labels(layer=str(layer)).inc()

    def count_fault_class(self, kind: FaultKind | str, fault_class: str) -> None:
        """One fault of `kind` (a controller `FaultKind`, or its `metric_kind`) with class
        `fault_class`."""
        k = self._fault_kind(kind)
        c = self._member("fault class", fault_class, ("transient", "permanent", "unclassified"))
        self.fault_classes.labels(kind=k, **{"class": c}).inc()

    def _fault_kind(self, kind: FaultKind | str) -> str:
        """The metrics' `kind` label of `kind` (`FaultKind.metric_kind`; a str must
        already be one of `METRIC_KINDS`). Raises UnknownLabelError otherwise."""
        label = kind.metric_kind if isinstance(kind, FaultKind) else kind
        return self._member("fault kind", label, METRIC_KINDS)

    def _preinitialise(self) -> None:
        for o in REQUEST_OUTCOMES:
            self._requests_of[o] = self.requests.labels(outcome=o)
        for p in self.policies:
            for o in VOTE_OUTCOMES:
                self.votes.labels(policy=p.value, outcome=o)
        for ch in self.channels:
            lab = self._channel_labels[ch]
            self.channel_disagreements.labels(**lab)
            self.channel_up.labels(**lab).set(0)
            for r in SelftestResult:
                self.selftests.labels(**lab, result=r.value)
            self.dti_overruns.labels(**lab)
            self._kernel_seconds_of[ch] = self.kernel_seconds.labels(**lab)
        for b in BufferKind:
            self.ecc_corrected.labels(buffer=b.value)
            self.ecc_uncorrectable.labels(buffer=b.value)
        for reason in RejectReason:
            self.messages_rejected.labels(reason=reason.value)
        for k in METRIC_KINDS:
            self.fault_reaction.labels(kind=k)
            self.fault_detection.labels(kind=k)
        # Effective 0 until the daemon has assessed the hardware: claim nothing unverified.
        self.set_hft(declared_hft(self.policies[0]), 0)

    # ------------------------------------------------------------------ label guards

    def _channel(self, channel: str) -> dict[str, str]:
        """The label set (`CHANNEL_LABELS`) of a configured channel."""
        if channel not in self._channel_set:
            raise UnknownLabelError(
                f"unknown channel {channel!r}; configured: {', '.join(self.channels)}"
            )
        return self._channel_labels[channel]

    def channel_labels(self, channel: str) -> dict[str, str]:
        """`channel`'s `channel`, `gpu` and `UUID` label values (a copy).

        Raises:
            UnknownLabelError: `channel` is not configured.
        """
        return dict(self._channel(channel))

    @staticmethod
    def _member(kind: str, value: str, allowed: Iterable[str]) -> str:
        allowed = tuple(allowed)
        if value not in allowed:
            raise UnknownLabelError(f"unknown {kind} {value!r}; known: {', '.join(allowed)}")
        return str(value)

    # ------------------------------------------------------------------ recording

    def count_request(self, outcome: str) -> None:
        """One request answered with `outcome` (one of `REQUEST_OUTCOMES`)."""
        child = self._requests_of.get(outcome)
        if child is None:
            raise UnknownLabelError(f"unknown request outcome {outcome!r}; known: "
                                    f"{', '.join(REQUEST_OUTCOMES)}")
        child.inc()

    def observe_vote(self, policy: Policy | str, outcome: str, seconds: float) -> None:
        """One voter decision under `policy` with `outcome` (the voter's `OUTCOMES`) that
        took `seconds` from ingress to answer."""
        p = self._member("policy", str(policy), sorted(self._policy_values))
        o = self._member("vote outcome", outcome, VOTE_OUTCOMES)
        self.votes.labels(policy=p, outcome=o).inc()
        self.observe_vote_latency(seconds)

    def observe_vote_latency(self, seconds: float) -> None:
        """One answered request took `seconds` from ingress to its vote's answer (a running
        daemon counts the votes themselves in its voter, read at scrape time)."""
        self.vote_latency.observe(_check_seconds("vote latency", seconds))

    def count_disagreement(self, channel: str) -> None:
        """`channel` was outvoted or mismatched in one vote."""
        self.channel_disagreements.labels(**self._channel(channel)).inc()

    def set_channel_up(self, channel: str, up: bool) -> None:
        """Whether `channel` currently votes."""
        self.channel_up.labels(**self._channel(channel)).set(1 if up else 0)

    def set_channel_state(self, channel: str, state: ChannelState) -> None:
        """Record a channel state change: only UP counts as up."""
        self.set_channel_up(channel, ChannelState(state) is ChannelState.UP)

    def set_sm_coverage(self, channel: str, ratio: float | None) -> None:
        """Set `selftest_sm_coverage_ratio{channel}`; None (no SM count known) leaves it unset."""
        if ratio is not None:
            self.sm_coverage.labels(**self._channel(channel)).set(ratio)

    def observe_selftest(
        self, channel: str, result: SelftestResult | str, seconds: float | None
    ) -> None:
        """One self-test verdict for `channel`; `seconds` from dispatch to verdict (None
        for a timeout, whose duration is the deadline by definition and not measured)."""
        r = self._member("self-test result", str(result), [v.value for v in SelftestResult])
        lab = self._channel(channel)
        if seconds is not None:
            self.selftest_duration.observe(_check_seconds("self-test", seconds))
        self.selftests.labels(**lab, result=r).inc()

    def count_dti_overrun(self, channel: str) -> None:
        """`channel`'s self-test did not complete within its deadline (a DTI overrun)."""
        self.dti_overruns.labels(**self._channel(channel)).inc()

    def set_mode(self, mode: Mode | str) -> None:
        """Set the mode gauge: 1 for `mode`, 0 for every other mode."""
        current = Mode(self._member("mode", str(mode), [m.value for m in Mode]))
        for m in Mode:
            self.mode.labels(mode=m.value).set(1 if m is current else 0)

    def set_hft(self, declared: int, effective: int) -> None:
        """Set `hft{kind}`: the declared and the effective HFT (see `safemon.hft`).

        Raises:
            InvalidInputError: not ints, negative, or effective above declared.
        """
        for what, v in (("declared", declared), ("effective", effective)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise InvalidInputError(f"{what} HFT must be an int >= 0, got {v!r}")
        if effective > declared:
            raise InvalidInputError(f"effective HFT {effective} above declared {declared}")
        self.hft.labels(kind="declared").set(declared)
        self.hft.labels(kind="effective").set(effective)

    def count_ecc(
        self, buffer: BufferKind | str, *, corrected: int = 0, uncorrectable: int = 0
    ) -> None:
        """Add ECC events found in the daemon's own process (e.g. on the host after download)."""
        b = self._member("buffer kind", str(buffer), [v.value for v in BufferKind])
        c = _check_count("ecc corrected", corrected)
        u = _check_count("ecc uncorrectable", uncorrectable)
        if c:
            self.ecc_corrected.labels(buffer=b).inc(c)
        if u:
            self.ecc_uncorrectable.labels(buffer=b).inc(u)

    def update_channel_ecc(
        self,
        channel: str,
        incarnation: str | int,
        corrected: Mapping[str, int],
        uncorrectable: Mapping[str, int],
    ) -> None:
        """Fold a channel's *cumulative* ECC counts (from its heartbeat) into the counters.

        Args:
            channel: the reporting channel.
            incarnation: identifies one run of the channel process; a new value means the
                process restarted and its totals start again from zero.
            corrected, uncorrectable: totals since the incarnation started, by buffer kind.

        Raises:
            UnknownLabelError: unknown channel or buffer kind.
            InvalidInputError: a negative total, or a total that went down within one
                incarnation (the header is corrupt or forged; nothing is recorded).
        """
        ch = self._channel(channel)["channel"]
        inc = str(incarnation)
        with self._lock:  # heartbeats of one channel may be handled on different threads
            updates: list[tuple[Counter, str, tuple[str, str, str], int, int]] = []
            for kind, counter, totals in (
                ("corrected", self.ecc_corrected, corrected),
                ("uncorrectable", self.ecc_uncorrectable, uncorrectable),
            ):
                for buffer, total in totals.items():
                    b = self._member("buffer kind", str(buffer), [v.value for v in BufferKind])
                    n = _check_count(f"ecc {kind} total", total)
                    key = (ch, b, kind)
                    prev_inc, prev = self._ecc_seen.get(key, (inc, 0))
                    if prev_inc != inc:
                        prev = 0  # a restarted process counts from zero again
                    elif n < prev:
                        raise InvalidInputError(
                            f"channel {ch!r} ECC {kind} total for {b!r} went down from {prev} "
                            f"to {n} within incarnation {inc!r}"
                        )
                    updates.append((counter, b, key, n, n - prev))
            # Everything was validated first: a bad report records nothing.
            for counter, b, key, n, delta in updates:
                self._ecc_seen[key] = (inc, n)
                if delta:
                    counter.labels(buffer=b).inc(delta)

    def observe_kernel(self, channel: str, seconds: float) -> None:
        """One protected kernel time reported by `channel` in a RESULT header."""
        self._channel(channel)  # raises UnknownLabelError
        self._kernel_seconds_of[channel].observe(_check_seconds("kernel", seconds))

    def count_rejected(self, reason: RejectReason | str) -> None:
        """One received message dropped for `reason` (usable as the wire format's
        reject-counter hook)."""
        r = self._member("reject reason", str(reason), [v.value for v in RejectReason])
        self.messages_rejected.labels(reason=r).inc()

    def observe_fault_detection(self, kind: FaultKind | str, seconds: float) -> None:
        """A fault of `kind` that occurred at a known time was detected `seconds` later."""
        k = self._fault_kind(kind)
        self.fault_detection.labels(kind=k).observe(_check_seconds("fault detection", seconds))

    def observe_fault_reaction(self, kind: FaultKind | str, seconds: float) -> None:
        """A fault of `kind` was detected and the reaction completed `seconds` later."""
        k = self._fault_kind(kind)
        self.fault_reaction.labels(kind=k).observe(_check_seconds("fault reaction", seconds))
