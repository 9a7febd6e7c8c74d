"""The daemon: the process shell that wires the sans-IO roles to sockets and timers.

One loop thread owns everything: the ingress ROUTER (clients), the control ROUTER
(operators: status, reset, inject, clear, selftest), the events PUB socket (typed
controller `Notify` events), one DEALER per channel (requests, self-tests, scrubs, weight
uploads out; results, heartbeats, registrations, scrub reports in), and the timers. It
feeds the `Voter`, the DTI `Scheduler`, the `SafeStateController` and the `Supervisor`,
and carries out their instructions (the wiring notes of their authors):

- voter Release/Fail → the client's reply (exactly one per request); Disagreement →
  Fault(disagreement_minority per minority channel in 2oo3 with a majority, else
  disagreement_unresolved on no channel); DeadlineMiss → Fault(deadline_miss);
  ChannelFailed → Fault(ecc_uncorrectable | channel_error); RequestSelfTest → RunNow;
- scheduler StartSelfTest → a golden pattern into the channel's own queue; StartScrub →
  a scrub command into the same queue; SelfTestFailed → controller SelfTestResult(False);
  SelfTestPassed → SelfTestResult(True) for channels that are not UP (the rejoin gate)
  and for UP channels only for tests started on demand (RunNow) after a mismatch;
  DtiOverrun → Fault(dti_overrun); DtiLate (the daemon's own lateness) is only logged;
  ScrubFindings uncorrectable → Fault(ecc);
- controller SetMode(SAFE) → voter EnterSafe (every open request fails at once), leaving
  SAFE → voter Reset; SetVoting → the voting set of later Submits; RestartChannel →
  scheduler ChannelLeft + supervisor restart (ChannelJoined once it registers again);
  IsolateChannel → ChannelLeft + stop; Notify → events socket; RunHook → the hook;
  RecordReaction → `safemon_fault_reaction_seconds`.

Per-request checks under an effective 1oo1D (no second channel to compare with): C must
be finite and pass the row and column checksum test of every C tile (Huang-Abraham ABFT,
`safemon.kernels.abft`: the same rule and rounding bound as the device check) against x
and the daemon's copy of the weight, so a flipped exponent bit is never released. Timing
rule: every request gets exactly one answer, by the client's own deadline or the channels'
work budget, whichever comes first (`safemon.admission.work_budget_s`; only the budget
judges the channels; docs/ROBUSTNESS.md).
"""

from __future__ import annotations

import collections
import contextlib
import functools
import hashlib
import heapq
import json
import os
import random
import shlex
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt
import structlog
import zmq
from prometheus_client import CollectorRegistry

from safemon import admission
from safemon.channels.launcher import Launcher, RealLauncher
from safemon.channels.link import LINK_FIELD, link_ok, link_token
from safemon.config import Config
from safemon.daemon_lock import DaemonLock, needs_lock
from safemon.errors import ConfigError, InvalidInputError, PatternError
from safemon.fault_classes import Classifier, FaultClass
from safemon.fdlimit import ensure_fd_budget
from safemon.gpu_identity import channel_devices, cuda_uuid
from safemon.health import HealthReport
from safemon.health import assess as assess_health
from safemon.hft import HftAssessment, assess, channel_hardware
from safemon.kernels.abft import abft_passes  # issue 15: the one ABFT
from safemon.kernels.api import resolve_backend
from safemon.kernels.catalog import Variant
from safemon.metrics import Metrics, MetricsServer, SelftestResult, start_http_server
from safemon.model_registry import ModelRegistry, RegisteredModel
from safemon.models.forward import first_diverging_layer
from safemon.patterns import controller as ctl
from safemon.patterns import scheduler as sch
from safemon.patterns import voter as vot
from safemon.states import ChannelState, Mode, Policy
from safemon.supervisor import Lost, Supervisor
from safemon.systemd import Notifier, sd_notify
from safemon.transport import (
    CurveServerKeys,
    Kind,
    Limits,
    Message,
    RejectCounter,
    Rejected,
    RejectReason,
    StalenessFilter,
    ZapAuthenticator,
    encode,
    make_socket,
    recv_message,
    send_message,
)
from safemon.transport.sockets import Context, Socket, SocketOptions
from safemon.weight_delivery import WeightDelivery
from safemon.weight_id import weight_id_of

__all__ = ["Daemon", "GoldenPatternLike", "sd_notify", "weight_id_of"]

log = structlog.get_logger("safemon.daemon")

#: error_type names on the wire → what the client raises (see `safemon.client`).
FAIL_ERRORS: dict[str, str] = {
    "safe_state": "SafeStateError",
    "timeout": "VoteTimeoutError",
    "disagreement": "DisagreementError",
    # A channel reported it could not compute and no agreeing quorum is left: no
    # trustworthy result could be formed, which is what VoteTimeoutError means.
    "channel_error": "VoteTimeoutError",
}

#: Whole-model requests whose per-layer digests are kept to name a diverging layer.
MODEL_DIGESTS_KEPT = 1024

#: After a drain, how long the daemon keeps answering requests already queued on its
#: ingress socket with ShuttingDownError before it closes it (seconds).
DRAIN_SWEEP_S = 0.1

#: Error texts built from request content are cut to this many characters, so an error
#: reply always fits the header limit (a long weight id or command cannot break it).
MAX_QUOTE = 80


def _quote(value: object) -> str:
    """repr(value), cut to `MAX_QUOTE` characters: safe to put in any error reply."""
    text = repr(value)
    return text if len(text) <= MAX_QUOTE else text[: MAX_QUOTE - 3] + "..."

#: Faults classified by retest before the reaction (`safemon.fault_classes`).
_RETESTED = frozenset({ctl.FaultKind.SELFTEST_FAILED, ctl.FaultKind.DISAGREEMENT_MINORITY})

_FAULT_TO_METRIC: dict[ctl.FaultKind, str] = {
    ctl.FaultKind.DISAGREEMENT_MINORITY: "disagreement",
    ctl.FaultKind.DISAGREEMENT_UNRESOLVED: "disagreement",
    ctl.FaultKind.DEADLINE_MISS: "deadline_miss",
    ctl.FaultKind.SELFTEST_FAILED: "selftest_fail",
    ctl.FaultKind.DTI_OVERRUN: "selftest_fail",
    ctl.FaultKind.HEARTBEAT_LOST: "heartbeat_lost",
    ctl.FaultKind.CRASH: "channel_crash",
    ctl.FaultKind.ECC_UNCORRECTABLE: "ecc_uncorrectable",
    # A channel that reports it cannot compute is, for the reaction, a failed channel.
    ctl.FaultKind.CHANNEL_ERROR: "channel_crash",
}


class GoldenPatternLike(Protocol):
    """What the daemon needs of `safemon.patterns.golden.GoldenPattern`."""

    @property
    def id(self) -> str: ...
    @property
    def a(self) -> npt.NDArray[np.float32]: ...
    @property
    def b(self) -> npt.NDArray[np.float32]: ...
    @property
    def variant(self) -> Variant: ...

    def check(self, c: Any, es: Any) -> bool: ...


def _digest(a: npt.NDArray[Any]) -> bytes:
    h = hashlib.blake2b(digest_size=16)
    h.update(f"{a.dtype.str}{a.shape}".encode())
    h.update(np.ascontiguousarray(a).reshape(-1).view(np.uint8).data)
    return h.digest()


def load_patterns_for(config: Config, sm_count: int | None = None) -> list[GoldenPatternLike]:
    """The golden patterns of `config` (`safemon.patterns.golden.load_patterns`; with the
    GPU's SM count, the device-covering shape too).

    Raises:
        PatternError: missing or tampered pattern files (or the module is missing).
    """
    try:
        from safemon.patterns import golden
    except ImportError as exc:  # pragma: no cover - ships with the package
        raise PatternError(f"golden patterns are unavailable: {exc}") from None
    return list(golden.load_patterns(config, sm_count=sm_count))


@dataclass
class _Live:
    """A client request in flight."""

    identity: bytes
    client_seq: int
    submitted: float
    x: npt.NDArray[np.float32]
    weight_id: str
    policy: Policy
    #: per voting channel, the incarnation the work was sent to: a fresh incarnation is
    #: never blamed for what its predecessor left unanswered.
    incarnations: dict[str, int] = field(default_factory=dict)
    results: dict[str, npt.NDArray[np.float32]] = field(default_factory=dict)
    kernel_seconds: dict[str, float] = field(default_factory=dict)
    #: a whole-model request's model (None: a matmul request on `weight_id`)
    model: RegisteredModel | None = None


@dataclass
class _Test:
    channel: str
    test_id: int
    pattern: GoldenPatternLike
    started: float


class Daemon:
    """One safemon daemon.

    Args:
        config: the resolved deployment.
        context: the zmq context to use (tests pass theirs so inproc:// clients can reach
            the daemon); None = a fresh `zmq.Context()` owned by the daemon.
        patterns: golden patterns; None = `load_patterns_for(config)`.
        registry: the metrics registry; None = a fresh `CollectorRegistry`.
        serve_metrics: start the HTTP endpoint of `config.metrics`.
        launcher: starts channels; None = `RealLauncher` (process or stream per config).
        clock: monotonic seconds.

    Raises (from `start`):
        ConfigError: unusable GPU ids, bad keys (a `KeyPermissionError` is a ConfigError),
            sockets that cannot be bound.
        PatternError: missing/tampered golden patterns, or none for a channel's variant.
    """

    def __init__(
        self,
        config: Config,
        *,
        context: Context | None = None,
        patterns: Sequence[GoldenPatternLike] | None = None,
        registry: CollectorRegistry | None = None,
        serve_metrics: bool = False,
        launcher: Launcher | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        assert config.channels is not None
        self.config = config
        self.clock = clock
        self._own_ctx = context is None
        self.ctx: Context = zmq.Context() if context is None else context
        self._patterns_in = patterns
        self.registry = CollectorRegistry() if registry is None else registry
        self._serve_metrics = serve_metrics
        self._launcher = launcher
        # 62 random bits: a restarted daemon never reuses an epoch (anti-replay).
        self.epoch = random.SystemRandom().getrandbits(62) or 1
        self.backend = "numpy"
        self._sm_count: int | None = None  # of the channels' GPU, when self-tests cover it
        self.metrics: Metrics | None = None
        self.metrics_server: MetricsServer | None = None
        self.ready = threading.Event()
        self.stopped = threading.Event()
        self._stop_requested = threading.Event()
        self._seq = 0
        self._limits = Limits()  # channel links: results can be as large as any product
        # Client messages: nothing larger than the biggest request or weight admitted, so an
        # oversized one is refused (counted, logged, answered) before it is looked at.
        lim = config.limits
        biggest = max(lim.max_request_bytes, lim.max_weight_bytes)
        self._client_limits = Limits(max_frame_bytes=min(biggest, Limits().max_frame_bytes),
                                     max_total_bytes=min(2 * biggest, Limits().max_total_bytes))
        self._rejects = RejectCounter(self._count_reject)
        self._staleness = StalenessFilter(self.epoch)
        self._weights: dict[str, npt.NDArray[np.float32]] = {}
        self._models = ModelRegistry()
        #: whole-model requests: seq -> {channel: digest frame}, the newest MODEL_DIGESTS_KEPT,
        #: to name the first diverging layer when the vote's findings come.
        self._model_digests: collections.OrderedDict[int, dict[str, tuple[int, ...]]] = (
            collections.OrderedDict())
        self._live: dict[int, _Live] = {}
        self._tests: dict[int, _Test] = {}
        self._ondemand: set[int] = set()
        self._runnow_at: dict[str, float] = {}
        self._injected_at: dict[str, float] = {}
        self._injected_expiry: dict[str, float] = {}  # set when a fault is cleared
        self._gpu_uuids: dict[str, str] = {}  # channel -> its GPU's UUID (CuPy, read at start)
        self._ctl_queue: collections.deque[ctl.ControllerEvent] = collections.deque()
        self._in_controller = False
        self._states: dict[str, ChannelState] = {
            c.name: ChannelState.STARTING for c in config.channels
        }
        self._mode = Mode.NORMAL
        self._voting: tuple[str, ...] = ()
        self._policy = Policy(config.policy)
        self._hooks: list[subprocess.Popen[bytes]] = []
        self._sockets: dict[str, Socket] = {}
        self._chan_socks: dict[str, Socket] = {}
        self._zap: ZapAuthenticator | None = None
        self.log = log.bind(epoch=self.epoch)
        self.voter = vot.Voter()
        self.controller = ctl.SafeStateController(self._controller_config())
        self.scheduler: sch.Scheduler | None = None
        self.supervisor: Supervisor | None = None
        self._by_channel: dict[str, list[GoldenPatternLike]] = {}
        self._drain_deadline: float | None = None
        self._sock_incarnation: dict[str, int] = {}
        # systemd and health probes (safemon/systemd.py, safemon/health.py)
        self._notifier = Notifier()
        self._loop_at: float | None = None
        #: (client deadline, seq): when a client's own timeout ends its wait. The channels'
        #: budget (the voter's deadline) is separate and never shorter than the config says.
        self._client_deadlines: list[tuple[float, int]] = []
        #: seq -> {channel: incarnation} of requests still open in the voter.
        self._sent_to: dict[int, tuple[float, dict[str, int]]] = {}
        self._weight_bytes = 0
        self._deliveries = {n: WeightDelivery() for n in config.channel_names}
        #: per channel, live work sent and not answered: seq -> (item cost s, budget end).
        self._queued: dict[str, dict[int, tuple[float, float]]] = {
            n: {} for n in config.channel_names}
        #: channels registered and waiting for their weights before they join the schedule
        self._awaiting_join: set[str] = set()
        #: weight id -> (clients waiting for register_weight's reply, channels still owing
        #: the acknowledgement)
        self._weight_waits: dict[str, tuple[list[tuple[bytes, int]], set[str]]] = {}
        self._link_key: bytes | None = None
        self._zap_denied_seen = 0
        #: retests before the reaction (fault classification); a pending fault is the
        #: arguments of `_fault_now`.
        self._classifier: Classifier[tuple[ctl.FaultKind, float, str]] = Classifier(
            config.classification.retests)
        self._class_of: dict[int, FaultClass] = {}  # id(ctl.Fault) -> its class
        #: the last faults that led to a reaction, newest last (for `status`).
        self._fault_history: collections.deque[dict[str, Any]] = collections.deque(maxlen=20)
        self._lock: DaemonLock | None = None
        self._ipc_files: list[str] = []
        self.injection_enabled = bool(config.testing.fault_injection)
        self._safe_reason: str | None = None

    # ================================================================== lifecycle

    def _controller_config(self) -> ctl.ControllerConfig:
        c = self.config
        degraded = c.degraded_policy if c.policy is Policy.TWO_OO_THREE else None
        return ctl.ControllerConfig(
            channels=c.channel_names,
            policy=Policy(c.policy),
            degraded_policy=degraded or Policy.TWO_OO_TWO,
            max_restarts=c.restart.max_restarts,
            restart_window=c.restart.window_s,
            backoff_initial=c.restart.backoff_initial_s,
            backoff_factor=c.restart.backoff_factor,
            backoff_max=c.restart.backoff_max_s,
            restart=c.actions.restart,
            isolate=c.actions.isolate,
            notify=c.actions.notify,
            hook=c.actions.hook is not None,
        )

    def _check_gpus(self) -> None:
        assert self.config.channels is not None
        wanted = [(i, ch.gpu) for i, ch in enumerate(self.config.channels) if ch.gpu is not None]
        if not wanted:
            return
        if self.backend != "cupy":
            raise ConfigError(f"channels.{wanted[0][0]}.gpu: set, but the backend is {self.backend}")
        from safemon.kernels.compiler import import_cupy

        count = int(import_cupy().cuda.runtime.getDeviceCount())
        for i, gpu in wanted:
            if gpu >= count:
                raise ConfigError(
                    f"channels.{i}.gpu: device {gpu} is not usable here ({count} CUDA device(s))"
                )

    def _assign_patterns(self, patterns: Sequence[GoldenPatternLike]) -> tuple[str, ...]:
        """Per channel, the patterns of its own variant; the scheduler's ids index them."""
        assert self.config.channels is not None
        from safemon.patterns.golden import channel_pattern_shapes

        for ch in self.config.channels:
            # Its own covering shape (sized for its tile), not another channel's.
            shapes = channel_pattern_shapes(self.config, ch, self._sm_count)
            mine: list[GoldenPatternLike] = []
            for m, n, k in shapes:
                v = ch.variant.to_variant(m, n)
                mine += [p for p in patterns
                         if p.variant == v and p.a.shape == (m, k) and p.b.shape == (k, n)]
            if not mine:
                raise PatternError(
                    f"no golden pattern for channel {ch.name!r} (variant "
                    f"{ch.variant.to_variant(*shapes[0][:2]).name}, dims {self.config.patterns.dims})"
                )
            self._by_channel[ch.name] = mine
        n = min(len(v) for v in self._by_channel.values())
        return tuple(f"p{i}" for i in range(n))

    def start(self) -> None:
        """Validate, bind, start the channels. Raises ConfigError / PatternError."""
        cfg = self.config
        try:
            self.backend = resolve_backend(cfg.backend)
        except Exception as exc:
            raise ConfigError(f"backend: {exc}") from None
        self._check_gpus()
        if self.backend == "cupy" and self._patterns_in is None and cfg.patterns.cover is not False:
            from safemon.patterns.sm_coverage import device_sm_count

            self._sm_count = device_sm_count(ch.gpu or 0 for ch in cfg.channels or [])
        patterns = (self._patterns_in if self._patterns_in is not None
                    else load_patterns_for(cfg, self._sm_count))
        ids = self._assign_patterns(patterns)
        t = cfg.timing
        self.scheduler = sch.Scheduler(sch.SchedulerConfig(
            dti=t.dti_s, selftest_deadline=t.selftest_deadline_s, patterns=ids,
            jitter=t.dti_jitter,
            scrub_interval=t.scrub_interval_s if cfg.weights.ecc else None,
        ), rng=random.Random())
        ensure_fd_budget(cfg.limits.max_connections)
        if needs_lock(cfg):
            assert cfg.endpoints.runtime_dir is not None
            # Before any socket file is bound or unlinked: a second daemon of this name
            # must fail here and leave the first one's sockets alone.
            self._lock = DaemonLock.acquire(cfg.endpoints.runtime_dir, cfg.name)
        devices = channel_devices(cfg, cuda_uuid if self.backend == "cupy" else None)
        self._gpu_uuids = {n: d.uuid for n, d in devices.items() if d.uuid}
        self.metrics = Metrics(cfg, self.registry, backend=self.backend, devices=devices)
        self.metrics.set_mode(Mode.NORMAL)
        self._report_hft(at_start=True)
        curve = self._curve()
        ep = cfg.endpoints
        for key, kind, address in (("ingress", zmq.ROUTER, ep.ingress),
                                   ("control", zmq.ROUTER, ep.control),
                                   ("events", zmq.PUB, ep.events)):
            use = curve if address.startswith("tcp://") or (curve and address.startswith("ipc://")) else None
            # Replies wait in the ROUTER's per-client queue until the client reads them: room
            # for every reply a client can be owed (its admitted requests and the refusals
            # of what it pipelined meanwhile), so a reply is never dropped for lack of it.
            opts = SocketOptions(sndhwm=4 * cfg.limits.max_in_flight) if kind == zmq.ROUTER else None
            try:
                self._sockets[key] = make_socket(self.ctx, kind, address, bind=True, curve=use,
                                                 options=opts)
            except zmq.ZMQError as exc:
                self._close_sockets()
                self._release_lock()
                raise ConfigError(f"endpoints.{key}: cannot bind {address}: {exc}") from None
            if address.startswith("ipc://"):
                self._ipc_files.append(address[len("ipc://"):])
        if self._serve_metrics:
            self.metrics_server = start_http_server(cfg, self.registry, health=self.health)
        launcher = self._launcher or RealLauncher(cfg, self.ctx)
        # The key of the channel-link tokens; a launcher without one (a test's fake) runs
        # its channels without link checks.
        link_key = getattr(launcher, "link_key", None)
        self._link_key = link_key if isinstance(link_key, bytes) else None
        self.supervisor = Supervisor(cfg, launcher, self.epoch)
        now = self.clock()
        # Connect before the channels bind: DEALERs reconnect until the peer appears.
        for name in cfg.channel_names:
            self._chan_socks[name] = self._connect_channel(name)
        self.supervisor.start_all(now)
        self._sock_incarnation = {n: self.supervisor.incarnation(n) for n in cfg.channel_names}
        self.log.info("daemon_started", backend=self.backend, policy=self._policy.value,
                      sockets=self.sockets(), metrics_url=self.metrics_url,
                      fault_injection=self.injection_enabled)
        if self.injection_enabled:
            self.log.warning("fault_injection_enabled",
                             detail="testing.fault_injection is on: not for production")

    def _curve(self) -> CurveServerKeys | None:
        sec = self.config.security
        if not sec.curve:
            return None
        assert sec.keys_dir is not None
        keys = CurveServerKeys.from_file(sec.keys_dir / "server.key_secret")
        self._zap = ZapAuthenticator(self.ctx, sec.keys_dir / "allowed_clients")
        self._zap.start()
        return keys

    def _connect_channel(self, name: str) -> Socket:
        inc = self.supervisor.incarnation(name) if self.supervisor is not None else 0
        address = self.config.channel_address(name, max(inc, 0))
        curve = None
        if address.startswith("tcp://"):
            from safemon.transport import CurveClientKeys

            kd = self.config.security.keys_dir
            assert kd is not None
            curve = CurveClientKeys.from_files(kd / "client.key_secret", kd / "server.key")
        return make_socket(self.ctx, zmq.DEALER, address, bind=False, curve=curve)

    @property
    def metrics_url(self) -> str | None:
        return None if self.metrics_server is None else self.metrics_server.url

    def sockets(self) -> dict[str, str]:
        ep = self.config.endpoints
        return {"ingress": ep.ingress, "control": ep.control, "events": ep.events}

    def request_stop(self) -> None:
        """Begin draining (thread- and signal-safe): new requests are refused, in-flight
        ones are answered, then `run` returns (within `timing.drain_timeout_s`)."""
        self._stop_requested.set()

    def run(self) -> None:
        """The loop; returns after a drain. `start()` must have been called."""
        assert self.scheduler is not None and self.supervisor is not None
        try:
            while True:
                now = self.clock()
                self._loop_at = now
                if self._stop_requested.is_set() and self._drain_deadline is None:
                    self._drain_deadline = now + self.config.timing.drain_timeout_s
                    self._notifier.stopping()
                    self.log.info("drain_started", in_flight=len(self._live))
                if self._drain_deadline is not None and (
                    not self._live or now >= self._drain_deadline
                ):
                    self._finish_drain()
                    return
                if self._notifier.watchdog_due(now):
                    self._notifier.watchdog(now)
                self._poll_once(self._timeout_ms(now))
                self._advance(self.clock())
        finally:
            self._shutdown()

    def _timeout_ms(self, now: float) -> int:
        assert self.scheduler is not None and self.supervisor is not None
        wake = [w for w in (self.voter.next_deadline(), self.scheduler.next_wakeup(),
                            self.supervisor.next_wakeup(), self._drain_deadline) if w is not None]
        until = min(wake) - now if wake else 0.05
        return max(0, min(50, int(until * 1000) + 1))

    def _finish_drain(self) -> None:
        now = self.clock()
        for seq in list(self._live):
            self._count_outcome("shutting_down")
            self._answer_error(seq, "ShuttingDownError", "the daemon stopped before the vote completed")
        for wid, (waiting, _owing) in list(self._weight_waits.items()):
            for identity, seq in waiting:
                self._error_to("ingress", identity, seq, "ShuttingDownError",
                               f"the daemon stopped before weight {wid} reached every channel")
        self._weight_waits.clear()
        # Requests already queued on the ingress socket get their answer too (a typed
        # ShuttingDownError), so that nothing sent before the stop is left unanswered.
        sweep_end = time.monotonic() + DRAIN_SWEEP_S
        ing = self._sockets["ingress"]
        while time.monotonic() < sweep_end:
            got = recv_message(ing, limits=self._client_limits, timeout_ms=10, counter=self._rejects,
                               on_reject=functools.partial(self._on_rejected, "ingress"))
            if got is None:
                break
            assert got.identity is not None
            self._guarded("ingress", got.identity, got.message,
                          functools.partial(self._on_ingress, got.identity))
        self.log.info("drained", at=now)

    def close(self) -> None:
        """Stop everything `start` began (channels, sockets, lock) without running the loop:
        for a start that was interrupted. `run` does this itself when it returns."""
        self._shutdown()

    def _shutdown(self) -> None:
        if self.supervisor is not None:
            self.supervisor.stop_all()
        self._close_sockets()
        if self._zap is not None:
            self._zap.stop()
        if self.metrics_server is not None:
            self.metrics_server.stop()
        for p in self._hooks:
            if p.poll() is None:
                p.kill()
        if self._own_ctx:
            self.ctx.term()
        self._remove_socket_files()
        self._release_lock()
        self.stopped.set()

    def _remove_socket_files(self) -> None:
        """Unlink the ipc:// socket files this daemon bound (only while it holds the lock,
        so a second daemon's files are never touched)."""
        if self._lock is None:
            return
        for path in self._ipc_files:
            with contextlib.suppress(OSError):
                os.unlink(path)
        self._ipc_files.clear()

    def _release_lock(self) -> None:
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def _close_sockets(self) -> None:
        for s in [*self._sockets.values(), *self._chan_socks.values()]:
            s.close(linger=0)
        self._sockets.clear()
        self._chan_socks.clear()

    # ================================================================== I/O

    def _next_seq(self) -> int:
        self._seq += 1
        return self._seq

    def _poll_once(self, timeout_ms: int) -> None:
        poller = zmq.Poller()
        for s in (self._sockets["ingress"], self._sockets["control"], *self._chan_socks.values()):
            poller.register(s, zmq.POLLIN)
        ready = dict(poller.poll(timeout_ms))
        for name, s in list(self._chan_socks.items()):
            while s in ready and self._chan_socks.get(name) is s:
                got = recv_message(s, limits=self._limits, timeout_ms=0, counter=self._rejects,
                                   staleness=self._staleness)
                if got is None:
                    break
                self._guarded("channel", None, got.message, functools.partial(self._on_channel, name))
        for key, handler in (("ingress", self._on_ingress), ("control", self._on_control)):
            sock = self._sockets[key]
            while sock in ready:
                got = recv_message(sock, limits=self._client_limits, timeout_ms=0, counter=self._rejects,
                                   on_reject=functools.partial(self._on_rejected, key))
                if got is None:
                    break
                ident = got.identity
                assert ident is not None
                self._guarded(key, ident, got.message, functools.partial(handler, ident))

    def _guarded(self, sock: str, identity: bytes | None, msg: Message,
                 handle: Callable[[Message], None]) -> None:
        """Handle one message; an exception is a bug in handling *this* message, not a
        reason to stop serving everyone: it is counted, logged and, where a reply address
        exists, answered with a typed `InternalError`."""
        try:
            handle(msg)
        except Exception as exc:  # the loop must survive any one message
            if self.metrics is not None:
                self.metrics.count_rejected("handler_error")
            self.log.exception("message_handling_failed", socket=sock, kind=msg.kind.value,
                               seq=msg.seq, error=_quote(exc))
            if identity is not None and sock in ("ingress", "control"):
                self._error_to(sock, identity, msg.seq, "InternalError",
                               f"the daemon could not handle this message: {type(exc).__name__}")

    def _count_reject(self, reason: Any) -> None:
        if self.metrics is not None:
            self.metrics.count_rejected(reason)

    def _on_rejected(self, sock: str, identity: bytes | None, rejected: Rejected,
                     frames: Sequence[Any]) -> None:
        """A client message the transport dropped (already counted by reason): log it
        (the first 10 of each reason, then every power of two) and, when its header names
        a seq, answer the sender with a typed InvalidInputError so it does not wait."""
        n = self._rejects[rejected.reason]
        if n <= 10 or n & (n - 1) == 0:
            self.log.warning("message_rejected", socket=sock, reason=rejected.reason.value,
                             detail=_quote(rejected.detail), count=n)
        if identity is None or not frames or rejected.reason is RejectReason.UNAUTHENTICATED:
            return
        seq = _header_seq(frames[0], self._limits.max_header_bytes)
        if seq is not None:
            self._error_to(sock, identity, seq, "InvalidInputError",
                           f"message rejected ({rejected.reason.value}): {_quote(rejected.detail)}")

    def _link_token(self, name: str) -> str | None:
        """The current incarnation's link token of channel `name` (None: no link checks)."""
        if self._link_key is None or self.supervisor is None:
            return None
        return link_token(self._link_key, name, self.supervisor.incarnation(name))

    def _send_channel(self, name: str, kind: Kind, seq: int, meta: dict[str, Any],
                      arrays: tuple[npt.NDArray[Any], ...] = ()) -> bool:
        token = self._link_token(name)
        if token is not None:
            meta = {**meta, LINK_FIELD: token}
        frames = encode(kind, epoch=self.epoch, seq=seq, channel=name, meta=meta, arrays=arrays)
        try:
            send_message(self._chan_socks[name], frames, flags=zmq.NOBLOCK)
        except zmq.ZMQError:
            # Not connected (down, restarting): the deadline / overrun reports it.
            return False
        return True

    def _reply(self, sock: str, identity: bytes, kind: Kind, seq: int, meta: dict[str, Any],
               arrays: tuple[npt.NDArray[Any], ...] = ()) -> None:
        frames = encode(kind, epoch=self.epoch, seq=seq, meta=meta, arrays=arrays)
        try:
            send_message(self._sockets[sock], frames, identity=identity, flags=zmq.NOBLOCK)
        except zmq.ZMQError as exc:  # the client went away: nobody is left to answer
            self.log.warning("reply_undeliverable", socket=sock, error=str(exc))

    # ================================================================== ingress

    def _error_to(self, sock: str, identity: bytes, seq: int, error_type: str, message: str) -> None:
        self._reply(sock, identity, Kind.ERROR, seq, {"error_type": error_type, "message": message})

    def _count_outcome(self, outcome: str) -> None:
        if self.metrics is not None:
            self.metrics.count_request(outcome)

    def _on_ingress(self, identity: bytes, msg: Message) -> None:
        now = self.clock()
        if msg.kind is Kind.CONTROL and msg.meta.get("command") == "hello":
            self._reply("ingress", identity, Kind.REPLY, msg.seq, {"ok": True, "outcome": "hello"})
            return
        if self._drain_deadline is not None:
            self._count_outcome("shutting_down")
            self._error_to("ingress", identity, msg.seq, "ShuttingDownError",
                           "the daemon is shutting down")
            return
        if msg.kind is Kind.CONTROL and msg.meta.get("command") == "register_weight":
            self._register_weight(identity, msg)
            return
        if msg.kind is Kind.CONTROL and msg.meta.get("command") == "register_model":
            self._register_model(identity, msg)
            return
        if msg.kind is not Kind.REQUEST:
            self._error_to("ingress", identity, msg.seq, "InvalidInputError",
                           f"unexpected message kind {msg.kind.value!r} on ingress")
            return
        problem = self._validate_request(msg)
        if problem is not None:
            kind, text = problem
            if kind == "InvalidInputError":
                self._count_outcome("invalid_input")
            self._error_to("ingress", identity, msg.seq, kind, text)
            return
        model = self._models.get(msg.meta.get("model_id"))
        wid = model.model_id if model is not None else str(msg.meta["weight_id"])
        x = np.ascontiguousarray(msg.arrays[0])
        m, k = x.shape
        n = model.max_dim if model is not None else self._weights[wid].shape[1]
        voters = self._voting if self._mode is not Mode.SAFE else tuple(
            self.config.channel_names[: self._policy.channels])
        queued_s = max((self._queued_s(ch, now) for ch in voters), default=0.0)
        refusal = admission.check_request(self.config, x.shape, n, self.voter.open_requests,
                                          queued_s)
        if (refusal is None and model is not None and self._mode is not Mode.SAFE
                and self._policy is Policy.ONE_OO_ONE_D):
            # 1oo1D's per-request check is the host ABFT test of C against x and W, which a
            # model's intermediate layers never reach: no trustworthy model output exists.
            refusal = admission.Refusal(
                "VoteTimeoutError", "whole-model requests need two or more voting channels "
                "(the 1oo1D per-request check cannot see a model's intermediate layers)",
                "channel_error")
        if refusal is not None:
            self._count_outcome(refusal.outcome)
            self._error_to("ingress", identity, msg.seq, refusal.error_type, refusal.message)
            return
        if self._mode is not Mode.SAFE and not self._voting:
            self._error_to("ingress", identity, msg.seq, "VoteTimeoutError",
                           "no voting set yet: channels are still passing their start-up self-tests")
            return
        # The channels are judged by their own budget for this work item (the work queued
        # ahead of it included), never by the client's timeout: a client that gives up
        # earlier gets VoteTimeoutError, alone.
        if model is None:
            budget_s = admission.work_budget_s(self.config, m, k, n, queued_s)
            cost_s = admission.item_cost_s(self.config, m, k, n)
        else:
            budget_s = model.budget_s(self.config, m, queued_s)
            cost_s = model.cost_s(self.config, m)
        client_s = _client_deadline_s(msg.meta.get("deadline_ms"), budget_s)
        seq = self._next_seq()
        for ch in voters:
            self._queued[ch][seq] = (cost_s, now + budget_s)
        assert self.supervisor is not None
        incs = {ch: self.supervisor.incarnation(ch) for ch in voters}
        self._live[seq] = _Live(identity, msg.seq, now, x, wid, self._policy, incarnations=incs,
                                model=model)
        self._sent_to[seq] = (now + budget_s, incs)
        if client_s < budget_s:
            heapq.heappush(self._client_deadlines, (now + client_s, seq))
        self._voter(vot.Submit(seq, now, now + budget_s, voters, self._policy))
        if seq in self._live:
            for ch in voters:
                if model is None:
                    self._send_channel(ch, Kind.REQUEST, seq, {
                        "weight_id": wid, "deadline_ms": budget_s * 1000.0, "job": "live"}, (x,))
                else:
                    self._send_channel(ch, Kind.REQUEST, seq, {
                        "model_id": wid, "deadline_ms": budget_s * 1000.0, "job": "model"},
                        (x, model.spec, model.biases))

    def _queued_s(self, ch: str, now: float) -> float:
        """Seconds of work (item costs) sent to `ch` and not answered, within its budget."""
        return sum(c for c, d in self._queued[ch].values() if d >= now)

    def _expire_client_deadlines(self, now: float) -> None:
        """Answer each request whose client's own deadline passed with VoteTimeoutError;
        the vote goes on (its channels' results still judge them), only the reply is gone."""
        while self._client_deadlines and self._client_deadlines[0][0] <= now:
            _, seq = heapq.heappop(self._client_deadlines)
            if seq in self._live:
                self._count_outcome("client_timeout")
                self._answer_error(seq, "VoteTimeoutError",
                                   "the client's deadline passed before the vote completed")
        horizon = now - 1.0  # the voter closed these at their deadline (voter Tick first)
        for seq in [s for s, (d, _) in self._sent_to.items() if d < horizon]:
            del self._sent_to[seq]
        for q in self._queued.values():
            for seq in [s for s, (_c, d) in q.items() if d < now]:
                del q[seq]

    def _validate_request(self, msg: Message) -> tuple[str, str] | None:
        if len(msg.arrays) != 1:
            return "InvalidInputError", f"a request carries one array x, got {len(msg.arrays)}"
        x = msg.arrays[0]
        if "model_id" in msg.meta:
            model = self._models.get(msg.meta.get("model_id"))
            if model is None:
                return ("UnknownModelError",
                        f"model id {_quote(msg.meta.get('model_id'))} is not registered with this daemon")
            k_in = model.k_in
        else:
            wid = msg.meta.get("weight_id")
            if not isinstance(wid, str) or wid not in self._weights:
                return "UnknownWeightError", f"weight id {_quote(wid)} is not registered with this daemon"
            k_in = self._weights[wid].shape[0]
        if x.dtype != np.float32 or x.ndim != 2 or x.size == 0:
            return "InvalidInputError", f"x must be a non-empty 2-D float32 array, got {x.dtype} {x.shape}"
        if x.shape[1] != k_in:
            return "InvalidInputError", f"x is {x.shape}, the input needs {k_in} columns: inner dimensions differ"
        if not np.isfinite(x).all():
            return "InvalidInputError", "x contains NaN or infinity (non-finite inputs are rejected)"
        return None

    def _register_weight(self, identity: bytes, msg: Message) -> None:
        if len(msg.arrays) != 1:
            self._error_to("ingress", identity, msg.seq, "InvalidInputError", "register_weight needs one array")
            return
        w = msg.arrays[0]
        if w.dtype != np.float32 or w.ndim != 2 or w.size == 0 or not np.isfinite(w).all():
            self._error_to("ingress", identity, msg.seq, "InvalidInputError",
                           f"a weight must be a non-empty, finite, 2-D float32 array, got {w.dtype} {w.shape}")
            return
        wid = weight_id_of(w)
        if wid not in self._weights:
            refusal = admission.check_weight(self.config, w.shape, len(self._weights),
                                             self._weight_bytes)
            if refusal is not None:
                self.log.warning("weight_refused", shape=list(w.shape), reason=refusal.message)
                self._error_to("ingress", identity, msg.seq, refusal.error_type, refusal.message)
                return
            self._weights[wid] = np.array(w, dtype=np.float32, order="C", copy=True)
            self._weight_bytes += int(w.nbytes)
            assert self.supervisor is not None
            owing = {ch for ch in self.config.channel_names if self.supervisor.registered(ch)}
            if owing:
                self._weight_waits[wid] = ([], owing)
            for ch in owing:
                self._deliveries[ch].add(wid)
                self._pump_weights(ch, self.clock())
            self.log.info("weight_registered", weight_id=wid, shape=list(w.shape))
        wait = self._weight_waits.get(wid)
        if wait is not None and wait[1]:
            wait[0].append((identity, msg.seq))  # answered once every channel holds it
            return
        self._reply("ingress", identity, Kind.REPLY, msg.seq, {"ok": True, "outcome": wid})

    def _register_model(self, identity: bytes, msg: Message) -> None:
        """`Client.register_model`: frames [spec, biases]; answered with the model id or a
        typed InvalidInputError naming the layer at fault."""
        shapes = {wid: tuple(w.shape) for wid, w in self._weights.items()}
        try:
            model = self._models.register(tuple(msg.arrays), shapes)
        except InvalidInputError as exc:
            self._error_to("ingress", identity, msg.seq, "InvalidInputError", _quote_long(exc))
            return
        self.log.info("model_registered", model_id=model.model_id, layers=len(model.layers))
        self._reply("ingress", identity, Kind.REPLY, msg.seq, {"ok": True, "outcome": model.model_id})

    def _layer_note(self, seq: int) -> str:
        """For a whole-model request: ", first diverging layer i" when two channels' per-layer
        digests differ (the lowest such layer over every pair), else ""."""
        frames = list(self._model_digests.get(seq, {}).values())
        layers = [first_diverging_layer(a, b) for i, a in enumerate(frames) for b in frames[i + 1:]]
        found = [x for x in layers if x is not None]
        return f", first diverging layer {min(found)}" if found else ""

    def _weight_budget_s(self, wid: str) -> float:
        """How long a channel may take to acknowledge weight `wid`: the work budget of an
        8-row work item on it (storing it, ECC encoding included, is that order of work)."""
        k, n = self._weights[wid].shape
        return admission.work_budget_s(self.config, 8, k, n)

    def _pump_weights(self, ch: str, now: float) -> None:
        """Send what the window allows of the weights `ch` is owed; once it holds them all,
        a channel waiting to join the self-test schedule joins (and is asked for its test)."""
        d = self._deliveries[ch]
        while (wid := d.next_to_send()) is not None:
            if wid not in self._weights:
                d.sent(wid, now)
                d.ack(wid)
                continue
            if not self._send_channel(ch, Kind.CONTROL, self._next_seq(),
                                      {"command": "weight", "args": wid}, (self._weights[wid],)):
                break  # the socket is full or gone: retried on the next loop turn
            d.sent(wid, now + self._weight_budget_s(wid))
        if d.idle and ch in self._awaiting_join:
            self._awaiting_join.discard(ch)
            assert self.scheduler is not None
            self._sched(sch.ChannelJoined(ch, now))
            if self._mode is not Mode.SAFE and self.controller.channel_state(ch) is ChannelState.STARTING:
                self._run_now(ch, now)

    def _weight_acked(self, ch: str, wid: str) -> None:
        wait = self._weight_waits.get(wid)
        if wait is None:
            return
        wait[1].discard(ch)
        if not wait[1]:
            del self._weight_waits[wid]
            for identity, seq in wait[0]:
                self._reply("ingress", identity, Kind.REPLY, seq, {"ok": True, "outcome": wid})

    def _drop_delivery(self, ch: str) -> None:
        """`ch` is being restarted or isolated: it owes nothing more (its next incarnation
        gets every weight afresh), and no client waits for it."""
        self._deliveries[ch].begin(())
        self._awaiting_join.discard(ch)
        for wid in list(self._weight_waits):
            self._weight_acked(ch, wid)

    def _check_deliveries(self, now: float) -> None:
        for ch, d in self._deliveries.items():
            late = d.overdue(now)
            if late:
                self._drop_delivery(ch)
                self._fault(ch, ctl.FaultKind.CHANNEL_ERROR, now, now,
                            f"weight {late[0]} not acknowledged within its budget")
            else:
                self._pump_weights(ch, now)

    def _answer_error(self, seq: int, error_type: str, message: str) -> None:
        live = self._live.pop(seq, None)
        if live is not None:
            self._error_to("ingress", live.identity, live.client_seq, error_type, message)

    # ================================================================== control

    def status(self) -> dict[str, Any]:
        """The operator view: mode, policies, voting set, channels, endpoints."""
        sup = self.supervisor
        return {
            "name": self.config.name,
            "epoch": self.epoch,
            # STARTING until a voting set first exists (and again after a reset from SAFE).
            "mode": self._mode.value if self._mode is Mode.SAFE or self.controller.formed
            else "STARTING",
            "safe_reason": self._safe_reason,
            "fault_injection": self.injection_enabled,
            "policy": Policy(self.config.policy).value,
            "effective_policy": self._policy.value,
            "voting": list(self._voting),
            "backend": self.backend,
            "metrics_url": self.metrics_url,
            "sockets": self.sockets(),
            # `state` is the controller's (frozen while SAFE is latched); `process` is what
            # the supervisor sees now, so a channel lost in SAFE does not pass for healthy.
            "channels": [
                {"name": n, "state": self._states[n].value,
                 "incarnation": sup.incarnation(n) if sup is not None else -1,
                 "process": _process_state(sup, n) if sup is not None else "not started",
                 "sm_coverage": self.scheduler.sm_coverage(n) if self.scheduler else None}
                for n in self.config.channel_names
            ],
            "weights": len(self._weights),
            # The last faults that led to a reaction, oldest first (age in seconds).
            "faults": [{**{k: v for k, v in f.items() if k != "at"},
                        "age_s": round(self.clock() - f["at"], 3)} for f in self._fault_history],
            "in_flight": len(self._live),
            "unexplained_mismatches": self.controller.unexplained_mismatches,
            **self._hft_status(),
        }

    def health(self) -> HealthReport:
        """What /healthz and /readyz answer (read-only; called on the HTTP thread)."""
        loop_at = self._loop_at
        return assess_health(mode=self._mode, voting=self._voting, formed=self.ready.is_set(),
                             loop_age_s=None if loop_at is None else self.clock() - loop_at)

    def hft(self) -> HftAssessment:
        """Declared and effective HFT (`safemon.hft`) of the voting set now; while none
        votes (starting, SAFE), of the configured set under the configured policy."""
        configured = Policy(self.config.policy)
        hardware = channel_hardware(self.config, self.backend, self._gpu_uuids)
        policy, names = (self._policy, self._voting) if self._voting else (
            configured, self.config.channel_names)
        return assess(configured, policy, {n: hardware[n] for n in names})

    def _hft_status(self) -> dict[str, Any]:
        a = self.hft()
        note = "" if self._voting else "No voting set now: figures for the configured set. "
        return {"hft_declared": a.declared, "hft_effective": a.effective,
                "hft_reason": note + a.reason,
                "hft_hardware": {u: list(chs) for u, chs in a.units}}

    def _report_hft(self, *, at_start: bool = False) -> None:
        """Export the HFT gauges; at start, warn when the hardware earns less than declared."""
        assert self.metrics is not None
        a = self.hft()
        self.metrics.set_hft(a.declared, a.effective)
        if at_start and a.effective < a.declared:
            self.log.warning("hft_below_declared", declared=a.declared, effective=a.effective,
                             policy=Policy(self.config.policy).value, reason=a.reason)

    def _on_control(self, identity: bytes, msg: Message) -> None:
        now = self.clock()
        command = msg.meta.get("command")
        args = msg.meta.get("args")
        args = args if isinstance(args, str) else ""
        ok, outcome = True, _quote(command) if not isinstance(command, str) else command[:MAX_QUOTE]
        if command == "status":
            body = np.frombuffer(json.dumps(self.status()).encode(), dtype=np.uint8).copy()
            self._reply("control", identity, Kind.REPLY, msg.seq, {"ok": True, "outcome": "status"}, (body,))
            return
        if command == "reset":
            self._controller(ctl.Reset(now))
        elif command in ("inject", "clear"):
            ch, _, kind = args.partition(":")
            targets = self.config.channel_names if (command == "clear" and not ch) else (ch,)
            if command == "inject" and not self.injection_enabled:
                ok, outcome = False, ("fault injection is disabled (set testing.fault_injection: "
                                      "true in a test configuration)")
            elif any(t not in self._chan_socks for t in targets):
                ok, outcome = False, f"unknown channel {_quote(ch)}"
            else:
                for t in targets:
                    if command == "inject":
                        from safemon.channels.faults import FAULT_KINDS

                        if kind not in FAULT_KINDS:
                            ok, outcome = False, f"unknown fault {_quote(kind)}; known: {', '.join(FAULT_KINDS)}"
                            break
                        if t not in self._injected_at or t in self._injected_expiry:
                            self._injected_at[t] = now  # a new fault (the last was cleared)
                        self._injected_expiry.pop(t, None)
                        self._send_channel(t, Kind.CONTROL, self._next_seq(),
                                           {"command": "inject", "args": kind})
                    else:
                        # What the fault did before the clear (a request it swallowed, a
                        # result it corrupted) is still detected within the detection bounds:
                        # keep its occurrence time that long, no longer.
                        if t in self._injected_at:
                            self._injected_expiry[t] = now + self._detection_bound()
                        self._send_channel(t, Kind.CONTROL, self._next_seq(), {"command": "clear"})
                self.log.warning("control_" + str(command), target=_quote(args))
        elif command == "selftest":
            # At most one self-test in flight per channel: a flood of these commands must
            # not queue self-tests behind each other until they overrun (that would be a
            # fault caused by a client).
            limit = self.config.timing.selftest_deadline_s
            busy = {t.channel for t in self._tests.values() if now - t.started < limit}
            for ch in self.config.channel_names:
                if ch not in busy:
                    self._run_now(ch, now)
        else:
            ok, outcome = False, f"unknown command {_quote(command)}"
        self._reply("control", identity, Kind.REPLY, msg.seq, {"ok": ok, "outcome": outcome})

    # ================================================================== channels

    def _on_channel(self, name: str, msg: Message) -> None:
        now = self.clock()
        assert self.supervisor is not None and self.scheduler is not None and self.metrics is not None
        if msg.channel != name:
            self._rejects.record(_stray_reason())
            return
        token = self._link_token(name)
        if token is not None and not link_ok(msg.meta, token):
            # Not from this channel's current incarnation: an impostor bound the channel's
            # address, or a leftover of a replaced incarnation. Counted, logged, dropped.
            self.metrics.count_rejected("foreign")
            self.log.warning("foreign_channel_message_dropped", channel=name, kind=msg.kind.value)
            return
        inc = msg.meta.get("incarnation")
        started = None
        if msg.kind is Kind.REGISTER and isinstance(inc, int):
            started = self.supervisor.on_register(name, inc, now)
        elif msg.kind is Kind.HEARTBEAT and isinstance(inc, int):
            started = self.supervisor.on_heartbeat(name, inc, now)
        if started is not None:
            self.log.info("channel_registered", channel=name, incarnation=inc,
                          pid=msg.meta.get("pid"))
            if name in self.scheduler.channels:
                self._sched(sch.ChannelLeft(name, now))
            # It joins the self-test schedule (and so may rejoin the vote) only once it
            # holds every registered weight, acknowledged (`_pump_weights`).
            self._drop_delivery(name)
            self._deliveries[name].begin(self._weights)
            self._awaiting_join.add(name)
            self._controller(ctl.ChannelStarted(name, now))
            self._pump_weights(name, now)
        if msg.kind is Kind.HEARTBEAT and isinstance(inc, int):
            cor, unc = msg.meta.get("ecc_corrected"), msg.meta.get("ecc_uncorrectable")
            if isinstance(cor, int) and isinstance(unc, int) and inc == self.supervisor.incarnation(name):
                try:
                    self.metrics.update_channel_ecc(name, inc, {"weights": cor}, {"weights": unc})
                except ValueError as exc:
                    self.log.warning("bad_heartbeat_ecc", channel=name, error=str(exc))
        elif msg.kind is Kind.EVENT and msg.meta.get("event") == "weight":
            wid = msg.meta.get("weight_id")
            if isinstance(wid, str) and self._deliveries[name].ack(wid):
                if msg.meta.get("ok") is True:
                    self._weight_acked(name, wid)
                    self._pump_weights(name, now)
                else:
                    self._drop_delivery(name)
                    self._fault(name, ctl.FaultKind.CHANNEL_ERROR, now, now,
                                f"refused weight {wid}")
        elif msg.kind is Kind.EVENT and msg.meta.get("event") == "scrub":
            cor, unc = msg.meta.get("corrected"), msg.meta.get("uncorrectable")
            if (isinstance(cor, int) and isinstance(unc, int) and cor >= 0 and unc >= 0
                    and name in self.scheduler.channels):
                self._sched(sch.ScrubDone(name, cor, unc, now))
        elif msg.kind is Kind.RESULT:
            self._on_result(name, msg, now)

    def _on_result(self, name: str, msg: Message, now: float) -> None:
        assert self.metrics is not None
        if msg.meta.get("job") == "model":
            self._on_model_result(name, msg, now)
            return
        # A GPU self-test adds a third frame: the SM id of every block (sm_coverage.sm_report).
        ok = msg.meta.get("ok") is True and len(msg.arrays) in (2, 3)
        ks = msg.meta.get("kernel_seconds")
        if ok and isinstance(ks, float) and ks >= 0:
            self.metrics.observe_kernel(name, ks)
        c = msg.arrays[0] if ok else None
        es = msg.arrays[1] if ok else None
        if msg.meta.get("job") == "selftest":
            test = self._tests.pop(msg.seq, None)
            if test is None or test.channel != name:
                return
            passed = bool(ok and test.pattern.check(c, es))
            from safemon.patterns.sm_coverage import sm_report

            per_block = msg.arrays[2] if ok and len(msg.arrays) == 3 else None
            sms, sm_count, failing = sm_report(msg.meta.get("sm_count"), per_block, test.pattern,
                                               c, es, passed)
            self.log.debug("selftest_result", channel=name, test_id=test.test_id, seq=msg.seq,
                           passed=passed, age_s=now - test.started)
            if not passed:
                err = msg.meta.get("error")
                self.log.warning("selftest_result_wrong", channel=name, test_id=test.test_id,
                                 pattern=test.pattern.id,
                                 reason=err if isinstance(err, str) and err else
                                 "C or ES differs from the golden pattern", failing_sms=list(failing))
            if name in self.scheduler.channels if self.scheduler else False:
                self._sched(sch.SelfTestDone(name, test.test_id, passed, now, sms=sms,
                                             sm_count=sm_count, failing_sms=failing))
                self.metrics.set_sm_coverage(name, self.scheduler.sm_coverage(name)
                                             if self.scheduler else None)
            return
        self._queued[name].pop(msg.seq, None)
        live = self._live.get(msg.seq)
        error = msg.meta.get("error")
        error_text = error if isinstance(error, str) and error else "result without C and ES"
        if (ok and c is not None and live is not None and live.policy is Policy.ONE_OO_ONE_D
                and not abft_passes(live.x, self._weights[live.weight_id], c)):  # issue 15
                ok, error_text = False, "channel_error: C failed the per-request checksum test"
        if ok and c is not None and es is not None:
            if live is not None:
                live.results[name] = c
                if isinstance(ks, float) and ks >= 0:
                    live.kernel_seconds[name] = ks
            result = vot.ChannelResult(msg.seq, name, now, True, _digest(c), _digest(es),
                                       str(msg.meta.get("variant", "")))
        else:
            result = vot.ChannelResult(msg.seq, name, now, False, b"", b"", "", error_text)
        self._voter(result)

    def _on_model_result(self, name: str, msg: Message, now: float) -> None:
        """A whole-model result: [output, digests]; the vote compares the channel-computed
        digests (output; per layer ES and output), never the ES arrays, which stay on the
        channel. A malformed digest frame is a channel error."""
        assert self.metrics is not None
        self._queued[name].pop(msg.seq, None)
        live = self._live.get(msg.seq)
        ok = msg.meta.get("ok") is True and len(msg.arrays) == 2
        digests = msg.arrays[1] if ok else None
        if ok and live is not None and live.model is not None and digests is not None and (
                digests.dtype != np.uint64 or digests.shape != (1 + 2 * len(live.model.layers),)):
            ok = False
        ks = msg.meta.get("kernel_seconds")
        if ok and isinstance(ks, float) and ks >= 0:
            self.metrics.observe_kernel(name, ks)
        if not ok or digests is None:
            error = msg.meta.get("error")
            text = error if isinstance(error, str) and error else "model result without output and digests"
            self._voter(vot.ChannelResult(msg.seq, name, now, False, b"", b"", "", text))
            return
        if live is not None:
            live.results[name] = msg.arrays[0]
            if isinstance(ks, float) and ks >= 0:
                live.kernel_seconds[name] = ks
        kept = self._model_digests.setdefault(msg.seq, {})
        kept[name] = tuple(int(d) for d in digests)
        while len(self._model_digests) > MODEL_DIGESTS_KEPT:
            self._model_digests.popitem(last=False)
        self._voter(vot.ChannelResult(msg.seq, name, now, True,
                                      _out_digest(msg.arrays[0], digests),
                                      digests[1:].tobytes(), str(msg.meta.get("variant", ""))))

    # ================================================================== roles

    def _advance(self, now: float) -> None:
        """Timers: voter deadlines, scheduler wakeups (the scheduler settles what fell due
        before `now` itself), supervisor restarts and liveness."""
        assert self.scheduler is not None and self.supervisor is not None
        self._sched(sch.Tick(now))
        self._voter(vot.Tick(now))
        self._expire_client_deadlines(now)
        self._check_deliveries(now)
        # Self-tests never answered (a lost channel) were judged by the scheduler at their
        # deadline; forget them after ten of those.
        stale = now - 10 * self.config.timing.selftest_deadline_s
        for seq in [q for q, t in self._tests.items() if t.started < stale]:
            del self._tests[seq]
        if self._zap is not None and self.metrics is not None:
            denied = self._zap.denied  # counted (and logged) by the ZAP thread
            for _ in range(denied - self._zap_denied_seen):
                self.metrics.count_rejected("zap_denied")
            self._zap_denied_seen = denied
        for lost in self.supervisor.tick(now):
            self._on_lost(lost, now)
        for name, inc in self._sock_incarnation.items():
            if self.supervisor.incarnation(name) != inc:
                self._drop_delivery(name)
                self._queued[name].clear()  # the old incarnation's queue died with it
                # A new incarnation binds afresh: a new pipe drops the old one's leftovers
                # (and inproc:// does not reconnect to a re-bound endpoint by itself).
                self._chan_socks[name].close(linger=0)
                self._chan_socks[name] = self._connect_channel(name)
                self._sock_incarnation[name] = self.supervisor.incarnation(name)
        for name in self._sock_incarnation:
            if self.supervisor.awaiting_registration(name):
                # The channel answers only the peer that spoke first with its link token;
                # say hello until it registers (a send before the connection completes
                # fails at once: the sockets are IMMEDIATE).
                self._send_channel(name, Kind.CONTROL, self._next_seq(), {"command": "link"})
        for p in list(self._hooks):
            if p.poll() is not None:
                self._hooks.remove(p)

    def _on_lost(self, lost: Lost, now: float) -> None:
        kind = ctl.FaultKind.CRASH if lost.kind == "crash" else ctl.FaultKind.HEARTBEAT_LOST
        self.log.warning("channel_lost", channel=lost.channel, kind=lost.kind, detail=lost.detail)
        if self.scheduler is not None and lost.channel in self.scheduler.channels:
            # Nothing left to self-test or scrub; it joins again when it registers.
            self._sched(sch.ChannelLeft(lost.channel, now))
        if (self.controller.channel_state(lost.channel) is ChannelState.RESTARTING
                and self._mode is not Mode.SAFE):
            # A new incarnation died before it registered. The controller absorbs faults of
            # a RESTARTING channel (its first failure is being handled), so tell it the
            # start happened and then failed: the fault of a STARTING channel follows the
            # policy's recovery (2oo3: another restart within the budget, then ISOLATED;
            # 1oo2D: ISOLATED). RESTARTING so always ends in UP or ISOLATED.
            self.log.warning("channel_died_before_registering", channel=lost.channel)
            self._controller(ctl.ChannelStarted(lost.channel, now))
        self._fault(lost.channel, kind, lost.detected_at, now, lost.detail)

    def _fault(self, channel: str | None, kind: ctl.FaultKind, detected_at: float, now: float,
               detail: str) -> None:
        """Report a fault to the controller, after classifying it by retest where that is
        safe (`safemon.fault_classes`): a 2oo3 voting channel's self-test failure or
        disagreement starts `classification.retests` self-tests first."""
        if channel is not None and self._classifier.active(channel):
            if kind in _RETESTED:
                self._retest_done(channel, False, now)  # it showed again: a failed retest
                return
            # Another kind of fault (crash, hang, ...) ends the retest: both are reported,
            # the first as permanent (it was followed by another failure).
            pending = self._classifier.abandon(channel)
            if pending is not None:
                self._fault_now(channel, pending[0], pending[1], now, pending[2],
                                FaultClass.PERMANENT)
        elif (channel is not None and kind in _RETESTED and self._mode is not Mode.SAFE
              and self._policy is Policy.TWO_OO_THREE and channel in self._voting
              and self._classifier.begin(channel, (kind, detected_at, detail))):
            self.log.info("fault_retest_started", channel=channel, kind=kind.value,
                          retests=self._classifier.retests)
            self._run_now(channel, now)
            return
        self._fault_now(channel, kind, detected_at, now, detail, FaultClass.UNCLASSIFIED)

    def _retest_done(self, channel: str, passed: bool, now: float) -> None:
        done = self._classifier.result(channel, passed)
        if done is None:
            self._run_now(channel, now)
            return
        (kind, detected_at, detail), cls = done
        self.log.info("fault_classified", channel=channel, kind=kind.value, fault_class=cls.value)
        self._fault_now(channel, kind, detected_at, now, detail, cls)

    def _fault_now(self, channel: str | None, kind: ctl.FaultKind, detected_at: float,
                   now: float, detail: str, fault_class: FaultClass) -> None:
        if self.metrics is not None:
            self.metrics.count_fault_class(_FAULT_TO_METRIC[kind], fault_class.value)
        if fault_class is not FaultClass.UNCLASSIFIED:
            detail = f"{detail} [{fault_class.value} after {self._classifier.retests} retest(s)]"
        # An injected fault's occurrence time is consumed by its first detection: the channel
        # is then isolated or restarted (a new incarnation starts without the fault).
        occurred = None
        if channel is not None and channel in self._injected_at:
            if not self._injected_expired(channel, detected_at):
                occurred = self._injected_at[channel]
            del self._injected_at[channel]
            self._injected_expiry.pop(channel, None)
        if occurred is not None and occurred > detected_at:
            occurred = None
        event = ctl.Fault(channel=channel, kind=kind, detected_at=min(detected_at, now),
                          now=now, occurred_at=occurred, detail=detail)
        self._class_of[id(event)] = fault_class
        try:
            self._controller(event)
        finally:
            self._class_of.pop(id(event), None)

    def _detection_bound(self) -> float:
        """The longest a fault's consequence can take to be detected (seconds)."""
        t = self.config.timing
        return max(t.request_deadline_s, t.heartbeat_timeout_s, t.dti_s + t.selftest_deadline_s)

    def _injected_expired(self, channel: str, now: float) -> bool:
        expiry = self._injected_expiry.get(channel)
        return expiry is not None and now > expiry

    def _voter(self, event: vot.Event) -> None:
        assert self.metrics is not None
        for d in self.voter.handle(event):
            now = self.voter.now or self.clock()
            if isinstance(d, vot.Release):
                live = self._live.pop(d.req_id, None)
                if live is None:
                    continue
                c = live.results[d.channel]
                own = self._model_digests.get(d.req_id, {}).get(d.channel)
                if live.model is not None and not _same_output(live, d.agreed, c,
                                                               own[0] if own else None):
                    # The digests agreed but the output bytes that travelled do not: never
                    # release them (a channel whose digest does not describe its output).
                    self.metrics.count_request("disagreement")
                    self._answer_error(d.req_id, "DisagreementError",
                                       "the agreeing channels' outputs differ from their digests")
                    continue
                self.metrics.count_request("released")
                self.metrics.observe_vote(live.policy, "released", max(0.0, now - live.submitted))
                kernel_s = max((live.kernel_seconds.get(ch, 0.0) for ch in d.agreed), default=0.0)
                self._reply("ingress", live.identity, Kind.REPLY, live.client_seq,
                            {"ok": True, "outcome": "released", "kernel_seconds": kernel_s,
                             "vote_seconds": max(0.0, now - live.submitted)},
                            (np.ascontiguousarray(c),))
                self.log.debug("vote_released", seq=d.req_id, channel=d.channel)
            elif isinstance(d, vot.Fail):
                live = self._live.get(d.req_id)
                if live is not None:
                    self.metrics.count_request(d.error)
                    self.metrics.observe_vote(live.policy, d.error, max(0.0, now - live.submitted))
                detail = d.detail + (self._layer_note(d.req_id) if d.error == "disagreement" else "")
                self.log.info("vote_failed", seq=d.req_id, error=d.error, detail=detail)
                self._answer_error(d.req_id, FAIL_ERRORS[d.error], detail)
            elif isinstance(d, vot.Disagreement):
                for ch in d.minority:
                    self.metrics.count_disagreement(ch)
                note = self._layer_note(d.req_id)
                self._model_digests.pop(d.req_id, None)
                self.log.warning("disagreement", seq=d.req_id, minority=list(d.minority),
                                 majority=list(d.majority), policy=d.policy.value,
                                 first_diverging_layer=note.rpartition(" ")[2] or None)
                # Only 2oo3 trusts a majority; under 1oo3D two agreeing channels may be the
                # two faulty ones, so its mismatch goes to the self-test diagnosis.
                if d.policy is Policy.TWO_OO_THREE and d.majority and len(d.minority) == 1:
                    self._fault(d.minority[0], ctl.FaultKind.DISAGREEMENT_MINORITY, now, now,
                                f"request {d.req_id}{note}")
                else:
                    self._fault(None, ctl.FaultKind.DISAGREEMENT_UNRESOLVED, now, now,
                                f"request {d.req_id}: {', '.join(d.minority)} disagree{note}")
            elif isinstance(d, vot.DeadlineMiss):
                sent = self._sent_to.get(d.req_id)
                assert self.supervisor is not None
                if sent is not None and sent[1].get(d.channel) != self.supervisor.incarnation(d.channel):
                    # Sent to an incarnation that has since been replaced: its loss is
                    # already being handled; the fresh one never saw this request.
                    self.log.info("deadline_miss_of_replaced_incarnation", seq=d.req_id,
                                  channel=d.channel)
                    continue
                self._fault(d.channel, ctl.FaultKind.DEADLINE_MISS, now, now,
                            f"request {d.req_id}: no result within its work budget")
            elif isinstance(d, vot.ChannelFailed):
                kind = (ctl.FaultKind.ECC_UNCORRECTABLE if d.reason.startswith("ecc")
                        else ctl.FaultKind.CHANNEL_ERROR)
                self._fault(d.channel, kind, now, now, d.reason)
            elif isinstance(d, vot.RequestSelfTest):
                for ch in d.channels:
                    self._run_now(ch, now)

    def _run_now(self, ch: str, now: float) -> None:
        assert self.scheduler is not None
        self._sched(sch.Tick(now))  # settle what fell due before this instant first
        if ch not in self.scheduler.channels:
            assert self.supervisor is not None
            if not self.supervisor.running(ch) or self.supervisor.lost(ch):
                # Lost while nothing restarted it (e.g. in SAFE) and now asked to prove
                # itself (after a reset): start it; it must pass a self-test to vote again.
                self.log.info("channel_restart_for_selftest", channel=ch)
                self.supervisor.restart(ch, 0.0, now)
            return  # its start will ask for the self-test
        if self._runnow_at.get(ch) == now:
            return  # already asked at this instant
        self._runnow_at[ch] = now
        for ins in self.scheduler.handle(sch.RunNow(ch, now)):
            if isinstance(ins, sch.StartSelfTest) and ins.channel == ch:
                self._ondemand.add(ins.test_id)
            self._on_sched(ins, now)

    def _sched(self, event: sch.SchedulerEvent) -> None:
        """Feed the scheduler `event` (stamped with the real time) and carry out what it
        says. The scheduler settles every timer that fell due before `event.now` itself (its
        catch-up rule): a self-test the loop reaches late starts now, with its full deadline,
        and comes with a `DtiLate` that is the daemon's lateness, never the channel's."""
        assert self.scheduler is not None
        leaving = event.channel if isinstance(event, sch.ChannelLeft) else None
        for ins in self.scheduler.handle(event):
            # A channel that is leaving gets nothing more (no self-test sent, no fault for it).
            if leaving is None or getattr(ins, "channel", None) != leaving:
                self._on_sched(ins, event.now)

    def _on_sched(self, ins: sch.SchedulerInstruction, now: float) -> None:
        assert self.metrics is not None
        if isinstance(ins, sch.StartSelfTest):
            pats = self._by_channel[ins.channel]
            pattern = pats[int(ins.pattern_id[1:]) % len(pats)]
            seq = self._next_seq()
            self._tests[seq] = _Test(ins.channel, ins.test_id, pattern, now)
            sent = self._send_channel(ins.channel, Kind.REQUEST, seq, {
                "job": "selftest", "test_id": ins.test_id, "weight_id": pattern.id,
                "deadline_ms": max(0.0, ins.deadline - now) * 1000.0},
                (np.ascontiguousarray(pattern.a), np.ascontiguousarray(pattern.b)))
            self.log.debug("selftest_sent", channel=ins.channel, test_id=ins.test_id, seq=seq,
                           pattern=pattern.id, sent=sent, lag_s=self.clock() - now)
        elif isinstance(ins, sch.StartScrub):
            self._send_channel(ins.channel, Kind.CONTROL, self._next_seq(), {"command": "scrub"})
        elif isinstance(ins, sch.SelfTestPassed):
            self.metrics.observe_selftest(ins.channel, SelftestResult.PASS, ins.latency)
            ondemand = ins.test_id in self._ondemand
            self._ondemand.discard(ins.test_id)
            if ondemand and self._classifier.active(ins.channel):
                self._retest_done(ins.channel, True, now)
                return
            if self._states[ins.channel] is not ChannelState.UP or ondemand:
                self._controller(ctl.SelfTestResult(ins.channel, True, now))
        elif isinstance(ins, sch.SelfTestFailed):
            self._ondemand.discard(ins.test_id)
            self.metrics.observe_selftest(ins.channel, SelftestResult.FAIL, None)
            self.log.warning("selftest_failed", channel=ins.channel, test_id=ins.test_id)
            # A Fault (not SelfTestResult) so an injected fault's occurrence time gives FDTI.
            sms = ins.failing_sms
            on_sm = (f" on SM {', '.join(map(str, sms[:8]))}" + (f" … ({len(sms)} SMs)" if len(sms) > 8 else "")
                     if sms else "")
            self._fault(ins.channel, ctl.FaultKind.SELFTEST_FAILED, ins.detected_at, now,
                        f"self-test did not match its golden pattern{on_sm}")
        elif isinstance(ins, sch.DtiOverrun):
            self._ondemand.discard(ins.test_id)
            self.metrics.count_dti_overrun(ins.channel)
            self.metrics.observe_selftest(ins.channel, SelftestResult.TIMEOUT, None)
            self._fault(ins.channel, ctl.FaultKind.DTI_OVERRUN, ins.deadline, now,
                        f"self-test {ins.test_id} missed its deadline")
        elif isinstance(ins, sch.DtiLate):
            # The daemon reached the due time late (a busy or stalled loop): the channel is
            # not at fault, and its test still has its full deadline from now. A whole DTI
            # missed means a periodic test never ran: say so loudly.
            late = ins.now - ins.due
            log = self.log.warning if late >= self.config.timing.dti_s else self.log.debug
            log("selftest_started_late", channel=ins.channel, due=ins.due, late_s=late)
        elif isinstance(ins, sch.ScrubFindings):
            self.log.warning("scrub_findings", channel=ins.channel, corrected=ins.corrected,
                             uncorrectable=ins.uncorrectable)
            if ins.uncorrectable:
                self._fault(ins.channel, ctl.FaultKind.ECC_UNCORRECTABLE, now, now,
                            f"{ins.uncorrectable} uncorrectable weight word(s)")
        elif isinstance(ins, sch.ScrubOverrun):
            self.log.warning("scrub_overrun", channel=ins.channel)

    def _controller(self, event: ctl.ControllerEvent) -> None:
        """Feed the controller `event` and carry out its instructions. An event raised while
        carrying them out (a nested scheduler catch-up can detect another fault) waits in a
        FIFO until the current instruction list is done: the controller has already moved on,
        so applying its older instructions after a newer decision would undo that decision."""
        self._ctl_queue.append(event)
        if self._in_controller:
            return
        self._in_controller = True
        try:
            while self._ctl_queue:
                self._controller_one(self._ctl_queue.popleft())
        finally:
            self._in_controller = False
        self._notifier.status(self._mode, self._states)  # deduplicated: sent on change only

    def _controller_one(self, event: ctl.ControllerEvent) -> None:
        assert self.metrics is not None and self.supervisor is not None
        assert self.scheduler is not None
        now = event.now
        reactions: list[ctl.RecordReaction] = []
        steps: list[tuple[str, float]] = []
        for ins in self.controller.handle(event):
            steps.append((type(ins).__name__, self.clock()))
            if isinstance(ins, ctl.RecordReaction):
                reactions.append(ins)  # recorded once every other action has been carried out
            elif isinstance(ins, ctl.SetMode):
                old, self._mode = self._mode, ins.mode
                self._safe_reason = ins.reason if ins.mode is Mode.SAFE else None
                self.metrics.set_mode(ins.mode)
                self.log.warning("mode_changed", mode=ins.mode.value, previous=old.value,
                                 reason=ins.reason)
                if ins.mode is Mode.SAFE:
                    for ch in self.config.channel_names:
                        self._classifier.abandon(ch)  # latched: nothing more to react to
                    self._voter(vot.EnterSafe(now))
                elif old is Mode.SAFE:
                    self._voter(vot.Reset(now))
            elif isinstance(ins, ctl.SetChannelState):
                self._states[ins.channel] = ins.state
                self.metrics.set_channel_state(ins.channel, ins.state)
                self.log.info("channel_state", channel=ins.channel, state=ins.state.value,
                              reason=ins.reason)
            elif isinstance(ins, ctl.SetVoting):
                self._voting, self._policy = ins.channels, ins.policy
                self._report_hft()
                if ins.channels:
                    self.ready.set()
                    self._notifier.ready(self._mode, self._states)
            elif isinstance(ins, ctl.RestartChannel):
                self._drop_delivery(ins.channel)
                self._classifier.abandon(ins.channel)  # its new incarnation starts afresh
                if ins.channel in self.scheduler.channels:
                    self._sched(sch.ChannelLeft(ins.channel, now))
                self.supervisor.restart(ins.channel, ins.delay, now)
            elif isinstance(ins, ctl.IsolateChannel):
                self._drop_delivery(ins.channel)
                self._classifier.abandon(ins.channel)
                if ins.channel in self.scheduler.channels:
                    self._sched(sch.ChannelLeft(ins.channel, now))
                self.supervisor.isolate(ins.channel, now)
            elif isinstance(ins, ctl.RequestSelfTest):
                self._run_now(ins.channel, now)
            elif isinstance(ins, ctl.Notify):
                self._publish(ins.event_type, dict(ins.payload))
            elif isinstance(ins, ctl.RunHook):
                self._run_hook(ins.event_type, dict(ins.payload))
        for rec in reactions:
            # FRTI on the real clock: detection → the reaction carried out (mode set, the
            # voter told, the channel isolated or its restart planned, events published),
            # not just the controller's decision, which happens at the same instant.
            detected = event.detected_at if isinstance(event, ctl.Fault) else now
            frti = max(rec.frti_seconds, self.clock() - detected)
            kind = _FAULT_TO_METRIC[rec.kind]
            self.metrics.observe_fault_reaction(kind, frti)
            if rec.fdti_seconds is not None:
                self.metrics.observe_fault_detection(kind, rec.fdti_seconds)
            cls = self._class_of.get(id(event), FaultClass.UNCLASSIFIED)
            self.log.info("fault_reaction", kind=rec.kind.value, fdti_s=rec.fdti_seconds,
                          frti_s=frti, fault_class=cls.value)
            self._fault_history.append({
                "kind": rec.kind.value,
                "channel": event.channel if isinstance(event, ctl.Fault) else None,
                "class": cls.value, "fdti_s": rec.fdti_seconds, "frti_s": frti,
                "detail": _quote(event.detail) if isinstance(event, ctl.Fault) else "",
                "mode": self._mode.value, "at": self.clock()})
            if frti > 0.05:  # say where the time went (the steps' start times, from detection)
                self.log.warning("slow_reaction", kind=rec.kind.value, frti_s=frti,
                                 steps=[(n, round(t - detected, 4)) for n, t in steps])

    def _publish(self, event_type: str, payload: dict[str, Any]) -> None:
        body = np.frombuffer(json.dumps({"event": event_type, **payload}).encode(),
                             dtype=np.uint8).copy()
        frames = encode(Kind.EVENT, epoch=self.epoch, seq=self._next_seq(),
                        meta={"event": event_type}, arrays=(body,))
        try:
            send_message(self._sockets["events"], frames, flags=zmq.NOBLOCK)
        except zmq.ZMQError as exc:
            self.log.warning("event_dropped", error=str(exc))

    def _run_hook(self, event_type: str, payload: dict[str, Any]) -> None:
        hook = self.config.actions.hook
        if hook is None:
            return
        try:
            p = subprocess.Popen(shlex.split(hook), stdin=subprocess.PIPE,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        except OSError as exc:
            self.log.error("hook_failed", error=str(exc))
            return
        assert p.stdin is not None
        try:
            p.stdin.write(json.dumps({"event": event_type, **payload}).encode())
            p.stdin.close()
        except OSError:
            pass
        self._hooks.append(p)


def _out_digest(out: npt.NDArray[Any], digests: npt.NDArray[Any]) -> bytes:
    """The C digest a model result is voted on: the channel's output digest, with the
    output's shape (a digest does not hash the shape)."""
    return f"{out.dtype.str}{out.shape}".encode() + digests[:1].tobytes()


def _same_output(live: _Live, agreed: Sequence[str], c: npt.NDArray[Any],
                 digest: int | None) -> bool:
    """Whether the output about to be released is the one the vote judged: byte-identical
    to every other agreeing channel's output, and with no other one, equal to its own
    channel's digest (`safemon.digest.digest64`)."""
    others = [live.results[ch] for ch in agreed if ch in live.results]
    if len(others) >= 2:
        return all(o.shape == c.shape and o.tobytes() == c.tobytes() for o in others)
    from safemon.digest import digest64

    return digest is not None and digest64(c) == digest


def _quote_long(value: object) -> str:
    """An error text for a reply: at most 4 * MAX_QUOTE characters."""
    text = str(value)
    return text if len(text) <= 4 * MAX_QUOTE else text[: 4 * MAX_QUOTE - 3] + "..."


def _process_state(sup: Supervisor, channel: str) -> str:
    """running / starting / restarting / lost (exited or silent, nothing planned)."""
    if sup.registered(channel):
        return "running"
    if sup.awaiting_registration(channel):
        return "starting"
    if sup.lost(channel):
        return "lost"
    return "restarting"


def _header_seq(frame: Any, max_bytes: int) -> int | None:
    """The `seq` of a (rejected) message's header frame if it is readable, else None."""
    try:
        raw = frame.bytes if hasattr(frame, "bytes") else bytes(frame)
        if len(raw) > max_bytes:
            return None
        seq = json.loads(raw).get("seq")
    except (ValueError, TypeError, AttributeError):
        return None
    return seq if isinstance(seq, int) and not isinstance(seq, bool) and 0 <= seq < 2**63 else None


def _client_deadline_s(deadline_ms: object, budget_s: float) -> float:
    """The client's own deadline in seconds (capped by the channel budget `budget_s`);
    anything that is not a positive finite number of milliseconds means "no own deadline".
    Total: never raises, whatever the client sent."""
    if isinstance(deadline_ms, bool) or not isinstance(deadline_ms, int | float):
        return budget_s
    ms = float(deadline_ms)
    if not (ms > 0.0 and ms < float("inf")):
        return budget_s
    return min(budget_s, ms / 1000.0)


def _stray_reason() -> Any:
    from safemon.transport import RejectReason

    # A message whose header names another channel than the socket it came on.
    return RejectReason.MALFORMED
