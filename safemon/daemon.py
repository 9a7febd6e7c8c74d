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
and the daemon's copy of the weight, so a flipped exponent bit is never released. Timing rule: every request gets exactly one answer, by
its deadline at the latest (`timing.request_deadline_s`, or the client's shorter one).
"""

from __future__ import annotations

import collections
import hashlib
import json
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

from safemon.channels.launcher import Launcher, RealLauncher
from safemon.config import Config
from safemon.errors import ConfigError, PatternError
from safemon.gpu_identity import channel_devices, cuda_uuid
from safemon.health import HealthReport
from safemon.health import assess as assess_health
from safemon.hft import HftAssessment, assess, channel_hardware
from safemon.kernels.abft import abft_passes  # issue 15: the one ABFT
from safemon.kernels.api import resolve_backend
from safemon.kernels.catalog import Variant
from safemon.metrics import Metrics, MetricsServer, SelftestResult, start_http_server
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
    StalenessFilter,
    ZapAuthenticator,
    encode,
    make_socket,
    recv_message,
    send_message,
)
from safemon.transport.sockets import Context, Socket

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


def weight_id_of(w: npt.NDArray[np.float32]) -> str:
    """Content address of a weight: the same array always gets the same id (any epoch)."""
    h = hashlib.sha256()
    h.update(f"{w.dtype.str}{w.shape}".encode())
    h.update(np.ascontiguousarray(w).reshape(-1).view(np.uint8).data)
    return h.hexdigest()[:24]


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
    results: dict[str, npt.NDArray[np.float32]] = field(default_factory=dict)
    kernel_seconds: dict[str, float] = field(default_factory=dict)


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
        self._limits = Limits()
        self._rejects = RejectCounter(self._count_reject)
        self._staleness = StalenessFilter(self.epoch)
        self._weights: dict[str, npt.NDArray[np.float32]] = {}
        self._live: dict[int, _Live] = {}
        self._tests: dict[int, _Test] = {}
        self._ondemand: set[int] = set()
        self._runnow_at: dict[str, float] = {}
        self._injected_at: dict[str, float] = {}
        self._injected_expiry: dict[str, float] = {}  # set when a fault is cleared
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
        from safemon.patterns.golden import pattern_shapes

        shapes = pattern_shapes(self.config, self._sm_count)
        for ch in self.config.channels:
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
        devices = channel_devices(cfg, cuda_uuid if self.backend == "cupy" else None)
        self.metrics = Metrics(cfg, self.registry, backend=self.backend, devices=devices)
        self.metrics.set_mode(Mode.NORMAL)
        self._report_hft(at_start=True)
        curve = self._curve()
        ep = cfg.endpoints
        for key, kind, address in (("ingress", zmq.ROUTER, ep.ingress),
                                   ("control", zmq.ROUTER, ep.control),
                                   ("events", zmq.PUB, ep.events)):
            use = curve if address.startswith("tcp://") or (curve and address.startswith("ipc://")) else None
            try:
                self._sockets[key] = make_socket(self.ctx, kind, address, bind=True, curve=use)
            except zmq.ZMQError as exc:
                self._close_sockets()
                raise ConfigError(f"endpoints.{key}: cannot bind {address}: {exc}") from None
        if self._serve_metrics:
            self.metrics_server = start_http_server(cfg, self.registry, health=self.health)
        launcher = self._launcher or RealLauncher(cfg, self.ctx)
        self.supervisor = Supervisor(cfg, launcher, self.epoch)
        now = self.clock()
        # Connect before the channels bind: DEALERs reconnect until the peer appears.
        for name in cfg.channel_names:
            self._chan_socks[name] = self._connect_channel(name)
        self.supervisor.start_all(now)
        self._sock_incarnation = {n: self.supervisor.incarnation(n) for n in cfg.channel_names}
        self.log.info("daemon_started", backend=self.backend, policy=self._policy.value,
                      sockets=self.sockets(), metrics_url=self.metrics_url)

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
        address = self.config.channel_address(name)
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
            self._answer_error(seq, "VoteTimeoutError", "daemon stopped before a vote completed")
        self.log.info("drained", at=now)

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
        self.stopped.set()

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
            while s in ready:
                got = recv_message(s, limits=self._limits, timeout_ms=0, counter=self._rejects,
                                   staleness=self._staleness)
                if got is None:
                    break
                self._on_channel(name, got.message)
        ing = self._sockets["ingress"]
        while ing in ready:
            got = recv_message(ing, limits=self._limits, timeout_ms=0, counter=self._rejects)
            if got is None:
                break
            assert got.identity is not None
            self._on_ingress(got.identity, got.message)
        control = self._sockets["control"]
        while control in ready:
            got = recv_message(control, limits=self._limits, timeout_ms=0, counter=self._rejects)
            if got is None:
                break
            assert got.identity is not None
            self._on_control(got.identity, got.message)

    def _count_reject(self, reason: Any) -> None:
        if self.metrics is not None:
            self.metrics.count_rejected(reason)

    def _send_channel(self, name: str, kind: Kind, seq: int, meta: dict[str, Any],
                      arrays: tuple[npt.NDArray[Any], ...] = ()) -> bool:
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

    def _on_ingress(self, identity: bytes, msg: Message) -> None:
        now = self.clock()
        if msg.kind is Kind.CONTROL and msg.meta.get("command") == "hello":
            self._reply("ingress", identity, Kind.REPLY, msg.seq, {"ok": True, "outcome": "hello"})
            return
        if msg.kind is Kind.CONTROL and msg.meta.get("command") == "register_weight":
            self._register_weight(identity, msg)
            return
        if msg.kind is not Kind.REQUEST:
            self._error_to("ingress", identity, msg.seq, "InvalidInputError",
                           f"unexpected message kind {msg.kind.value!r} on ingress")
            return
        if self._drain_deadline is not None:
            self._error_to("ingress", identity, msg.seq, "SafemonError", "the daemon is shutting down")
            return
        problem = self._validate_request(msg)
        if problem is not None:
            kind, text = problem
            if kind == "InvalidInputError" and self.metrics is not None:
                self.metrics.count_request("invalid_input")
            self._error_to("ingress", identity, msg.seq, kind, text)
            return
        wid = str(msg.meta["weight_id"])
        x = np.ascontiguousarray(msg.arrays[0])
        deadline_s = self.config.timing.request_deadline_s
        client_ms = msg.meta.get("deadline_ms")
        if isinstance(client_ms, int | float) and not isinstance(client_ms, bool) and client_ms > 0:
            deadline_s = min(deadline_s, float(client_ms) / 1000.0)
        seq = self._next_seq()
        if self._mode is not Mode.SAFE and not self._voting:
            self._error_to("ingress", identity, msg.seq, "VoteTimeoutError",
                           "no voting set yet: channels are still passing their start-up self-tests")
            return
        voters = self._voting if self._mode is not Mode.SAFE else tuple(
            self.config.channel_names[: self._policy.channels])
        self._live[seq] = _Live(identity, msg.seq, now, x, wid, self._policy)
        self._voter(vot.Submit(seq, now, now + deadline_s, voters, self._policy))
        if seq in self._live:
            for ch in voters:
                self._send_channel(ch, Kind.REQUEST, seq, {
                    "weight_id": wid, "deadline_ms": deadline_s * 1000.0, "job": "live"}, (x,))

    def _validate_request(self, msg: Message) -> tuple[str, str] | None:
        if len(msg.arrays) != 1:
            return "InvalidInputError", f"a request carries one array x, got {len(msg.arrays)}"
        x = msg.arrays[0]
        wid = msg.meta.get("weight_id")
        if not isinstance(wid, str) or wid not in self._weights:
            return "UnknownWeightError", f"weight id {wid!r} is not registered with this daemon"
        w = self._weights[wid]
        if x.dtype != np.float32 or x.ndim != 2 or x.size == 0:
            return "InvalidInputError", f"x must be a non-empty 2-D float32 array, got {x.dtype} {x.shape}"
        if x.shape[1] != w.shape[0]:
            return "InvalidInputError", f"x is {x.shape}, the weight is {w.shape}: inner dimensions differ"
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
            self._weights[wid] = np.array(w, dtype=np.float32, order="C", copy=True)
            for ch in self.config.channel_names:
                self._send_weight(ch, wid)
            self.log.info("weight_registered", weight_id=wid, shape=list(w.shape))
        self._reply("ingress", identity, Kind.REPLY, msg.seq, {"ok": True, "outcome": wid})

    def _send_weight(self, ch: str, wid: str) -> None:
        self._send_channel(ch, Kind.CONTROL, self._next_seq(),
                           {"command": "weight", "args": wid}, (self._weights[wid],))

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
            "mode": self._mode.value,
            "policy": Policy(self.config.policy).value,
            "effective_policy": self._policy.value,
            "voting": list(self._voting),
            "backend": self.backend,
            "metrics_url": self.metrics_url,
            "sockets": self.sockets(),
            "channels": [
                {"name": n, "state": self._states[n].value,
                 "incarnation": sup.incarnation(n) if sup is not None else -1,
                 "sm_coverage": self.scheduler.sm_coverage(n) if self.scheduler else None}
                for n in self.config.channel_names
            ],
            "weights": len(self._weights),
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
        hardware = channel_hardware(self.config, self.backend)
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
        ok, outcome = True, str(command)
        if command == "status":
            body = np.frombuffer(json.dumps(self.status()).encode(), dtype=np.uint8).copy()
            self._reply("control", identity, Kind.REPLY, msg.seq, {"ok": True, "outcome": "status"}, (body,))
            return
        if command == "reset":
            self._controller(ctl.Reset(now))
        elif command in ("inject", "clear"):
            ch, _, kind = args.partition(":")
            targets = self.config.channel_names if (command == "clear" and not ch) else (ch,)
            if any(t not in self._chan_socks for t in targets):
                ok, outcome = False, f"unknown channel {ch!r}"
            else:
                for t in targets:
                    if command == "inject":
                        from safemon.channels.faults import FAULT_KINDS

                        if kind not in FAULT_KINDS:
                            ok, outcome = False, f"unknown fault {kind!r}; known: {', '.join(FAULT_KINDS)}"
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
                self.log.warning("control_" + str(command), target=args)
        elif command == "selftest":
            for ch in self.config.channel_names:
                self._run_now(ch, now)
        else:
            ok, outcome = False, f"unknown command {command!r}"
        self._reply("control", identity, Kind.REPLY, msg.seq, {"ok": ok, "outcome": outcome})

    # ================================================================== channels

    def _on_channel(self, name: str, msg: Message) -> None:
        now = self.clock()
        assert self.supervisor is not None and self.scheduler is not None and self.metrics is not None
        if msg.channel != name:
            self._rejects.record(_stray_reason())
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
            for wid in self._weights:
                self._send_weight(name, wid)
            if name in self.scheduler.channels:
                self._sched(sch.ChannelLeft(name, now))
            self._sched(sch.ChannelJoined(name, now))
            self._controller(ctl.ChannelStarted(name, now))
        if msg.kind is Kind.HEARTBEAT and isinstance(inc, int):
            cor, unc = msg.meta.get("ecc_corrected"), msg.meta.get("ecc_uncorrectable")
            if isinstance(cor, int) and isinstance(unc, int) and inc == self.supervisor.incarnation(name):
                try:
                    self.metrics.update_channel_ecc(name, inc, {"weights": cor}, {"weights": unc})
                except ValueError as exc:
                    self.log.warning("bad_heartbeat_ecc", channel=name, error=str(exc))
        elif msg.kind is Kind.EVENT and msg.meta.get("event") == "scrub":
            cor, unc = msg.meta.get("corrected"), msg.meta.get("uncorrectable")
            if (isinstance(cor, int) and isinstance(unc, int) and cor >= 0 and unc >= 0
                    and name in self.scheduler.channels):
                self._sched(sch.ScrubDone(name, cor, unc, now))
        elif msg.kind is Kind.RESULT:
            self._on_result(name, msg, now)

    def _on_result(self, name: str, msg: Message, now: float) -> None:
        assert self.metrics is not None
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

    # ================================================================== roles

    def _advance(self, now: float) -> None:
        """Timers: voter deadlines, scheduler wakeups (the scheduler settles what fell due
        before `now` itself), supervisor restarts and liveness."""
        assert self.scheduler is not None and self.supervisor is not None
        self._sched(sch.Tick(now))
        self._voter(vot.Tick(now))
        for lost in self.supervisor.tick(now):
            self._on_lost(lost, now)
        for name, inc in self._sock_incarnation.items():
            if self.supervisor.incarnation(name) != inc:
                # A new incarnation binds afresh: a new pipe drops the old one's leftovers
                # (and inproc:// does not reconnect to a re-bound endpoint by itself).
                self._chan_socks[name].close(linger=0)
                self._chan_socks[name] = self._connect_channel(name)
                self._sock_incarnation[name] = self.supervisor.incarnation(name)
        for p in list(self._hooks):
            if p.poll() is not None:
                self._hooks.remove(p)

    def _on_lost(self, lost: Lost, now: float) -> None:
        kind = ctl.FaultKind.CRASH if lost.kind == "crash" else ctl.FaultKind.HEARTBEAT_LOST
        self.log.warning("channel_lost", channel=lost.channel, kind=lost.kind, detail=lost.detail)
        if self.scheduler is not None and lost.channel in self.scheduler.channels:
            # Nothing left to self-test or scrub; it joins again when it registers.
            self._sched(sch.ChannelLeft(lost.channel, now))
        self._fault(lost.channel, kind, lost.detected_at, now, lost.detail)

    def _fault(self, channel: str | None, kind: ctl.FaultKind, detected_at: float, now: float,
               detail: str) -> None:
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
        self._controller(ctl.Fault(channel=channel, kind=kind, detected_at=min(detected_at, now),
                                   now=now, occurred_at=occurred, detail=detail))

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
                self.log.info("vote_failed", seq=d.req_id, error=d.error, detail=d.detail)
                self._answer_error(d.req_id, FAIL_ERRORS[d.error], d.detail)
            elif isinstance(d, vot.Disagreement):
                for ch in d.minority:
                    self.metrics.count_disagreement(ch)
                self.log.warning("disagreement", seq=d.req_id, minority=list(d.minority),
                                 majority=list(d.majority), policy=d.policy.value)
                # Only 2oo3 trusts a majority; under 1oo3D two agreeing channels may be the
                # two faulty ones, so its mismatch goes to the self-test diagnosis.
                if d.policy is Policy.TWO_OO_THREE and d.majority and len(d.minority) == 1:
                    self._fault(d.minority[0], ctl.FaultKind.DISAGREEMENT_MINORITY, now, now,
                                f"request {d.req_id}")
                else:
                    self._fault(None, ctl.FaultKind.DISAGREEMENT_UNRESOLVED, now, now,
                                f"request {d.req_id}: {', '.join(d.minority)} disagree")
            elif isinstance(d, vot.DeadlineMiss):
                self._fault(d.channel, ctl.FaultKind.DEADLINE_MISS, now, now, f"request {d.req_id}")
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
            if not self.supervisor.running(ch):
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
                self.metrics.set_mode(ins.mode)
                self.log.warning("mode_changed", mode=ins.mode.value, previous=old.value,
                                 reason=ins.reason)
                if ins.mode is Mode.SAFE:
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
                if ins.channel in self.scheduler.channels:
                    self._sched(sch.ChannelLeft(ins.channel, now))
                self.supervisor.restart(ins.channel, ins.delay, now)
            elif isinstance(ins, ctl.IsolateChannel):
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
            self.log.info("fault_reaction", kind=rec.kind.value, fdti_s=rec.fdti_seconds,
                          frti_s=frti)
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


def _stray_reason() -> Any:
    from safemon.transport import RejectReason

    # A message whose header names another channel than the socket it came on.
    return RejectReason.MALFORMED
