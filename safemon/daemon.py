"""The daemon shell: sockets, the poll loop, timers, processes; the decisions are the core's.

One loop thread owns everything: the ingress ROUTER (clients), the control ROUTER
(operators: status, reset, inject, clear, selftest), the events PUB socket (typed
controller `Notify` events), one DEALER per channel, the `Supervisor` (the channels'
processes), the hook processes, systemd and the metrics HTTP endpoint. Every message that
passes the transport's checks (limits, staleness, the channel's link token) and every tick
of time becomes a stimulus (`safemon.runtime.stimuli`) for the `RuntimeCore`
(`safemon.runtime.core`), which owns the voter, the DTI scheduler, the safe-state
controller, the requests in flight and the weights; the shell carries out the effects it
returns (`safemon.runtime.effects`), in order. The daemon's decisions are documented and
tested there; this module only performs I/O.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import functools
import json
import os
import random
import shlex
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import structlog
import zmq
from prometheus_client import CollectorRegistry

from safemon import admission, daemon_status
from safemon.channels.inline import InlineChannels
from safemon.channels.launcher import Launcher, RealLauncher
from safemon.channels.link import LINK_FIELD, link_ok, link_token
from safemon.channels.sent_stamp import sent_at
from safemon.channels.supervisor import Supervisor
from safemon.config import Config, with_backend_limits
from safemon.daemon_lock import DaemonLock, needs_lock
from safemon.errors import ConfigError
from safemon.fdlimit import ensure_fd_budget
from safemon.gpu_identity import channel_devices, cuda_uuid
from safemon.health import HealthReport
from safemon.hft import HftAssessment
from safemon.kernels.backend import Backend, resolve_backend
from safemon.log_sampling import sampled
from safemon.loop_attention import Away, LoopAttention
from safemon.metrics import Metrics, MetricsServer, start_http_server
from safemon.metrics_collector import attach_runtime
from safemon.mps import control_pipe_found, pipe_directory, shared_gpus
from safemon.patterns import controller as ctl
from safemon.patterns import scheduler as sch
from safemon.patterns import voter as vot
from safemon.runtime import effects as fx
from safemon.runtime import stimuli as st
from safemon.runtime.core import RuntimeCore, StimulusFailed
from safemon.runtime.support import GoldenPatternLike, assign_patterns, quote, scheduler_config
from safemon.states import ChannelState, Mode, Policy
from safemon.systemd import Notifier
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
from safemon.transport import messages as msgs
from safemon.transport.conn_guard import ConnectionGuard
from safemon.transport.sockets import Context, Socket, SocketOptions, spin_until

__all__ = ["Daemon"]

log = structlog.get_logger("safemon.daemon")

#: After a drain, the daemon answers the requests already queued on its ingress socket with
#: ShuttingDownError until none has come for `DRAIN_SWEEP_GAP_MS`, for at most this long
#: (seconds; a client that keeps sending cannot hold the stop back longer). It was 0.1 s
#: until 2026-12-07: under CPU load on the 2-core container the daemon answered fewer than
#: that in 0.1 s, and 22-140 of 300 requests pipelined before a SIGTERM went unanswered
#: (`test_hostile.py::test_every_request_sent_before_sigterm_is_answered`, three busy
#: processes beside it). Well inside systemd's TimeoutStopSec (20 s) with `drain_timeout_s`.
DRAIN_SWEEP_S = 2.0
#: The sweep's wait for the next queued request (ms): the queue is empty after this.
DRAIN_SWEEP_GAP_MS = 10

#: The longest the loop goes without running its timers (seconds): the core's tick, the
#: supervisor's restarts and liveness checks, new incarnations' sockets, link hellos. They
#: also run whenever the core or the supervisor has something due (`next_wakeup`, which
#: counts a channel process that exited as due), but not after every poll as they used to
#: (docs/RUNTIME.md, "When the timers run").
TIMER_PERIOD_S = 0.05

#: The most client messages one poll reads from each of the ingress and control sockets;
#: what is left stays queued for the next poll. Between two batches the loop reads every
#: channel socket and runs the timers when they are due, so a client that sends without pause
#: cannot keep the loop from its channels. Until 2026-12-06 a poll read each client socket
#: until it was empty: one client's 3 s flood of valid `hello` messages kept every channel's
#: heartbeats unread and the timers stopped for as long, and the daemon then found all three
#: channels silent and latched SAFE (tests/runtime/test_ingress_flood.py). The bound costs a
#: counter per message. It bounds the count, not the time: a batch takes as long as handling
#: its messages does.
CLIENT_BATCH = 16

#: The supervisor's key of a channel's scrubs: their reports (EVENT event="scrub") echo no
#: sequence number. Scrubs sent one after another share it (the later allowance replaces the
#: earlier), and the first report ends it; each scrub is a time slice at most.
_SCRUB_KEY = ("scrub",)


def _work_key(seq: int, weight_id: str | None) -> object:
    """The supervisor's key of one item of channel work: a weight by its id (its
    acknowledgement names the id), anything else by the sequence number its result echoes."""
    return ("weight", weight_id) if weight_id is not None else seq


class Daemon:
    """One safemon daemon.

    Args:
        config: the resolved deployment.
        context: the zmq context to use (tests pass theirs so inproc:// clients can reach
            the daemon); None = a fresh `zmq.Context()` owned by the daemon.
        patterns: golden patterns; None = `safemon.patterns.golden.load_patterns(config)`.
        registry: the metrics registry; None = a fresh `CollectorRegistry`.
        serve_metrics: start the HTTP endpoint of `config.metrics`.
        launcher: starts channels; None = `RealLauncher` (process or stream per config).
        clock: monotonic seconds (the core's clock too).

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
        self.backend: Backend = Backend.NUMPY
        self._sm_count: int | None = None  # of the channels' GPU, when self-tests cover it
        self.metrics: Metrics | None = None
        self.metrics_server: MetricsServer | None = None
        self.core: RuntimeCore | None = None
        self.supervisor: Supervisor | None = None
        self.ready = threading.Event()
        self.stopped = threading.Event()
        # A plain flag, not an Event: `request_stop` runs in signal handlers, and Event.set
        # takes a lock that a second signal, arriving inside the first handler, deadlocks on.
        self._stop_requested = False
        self._limits = Limits()  # channel links: results can be as large as any product
        # Client messages: nothing larger than the biggest request or weight admitted, so an
        # oversized one is refused (counted, logged, answered) before it is looked at.
        self._client_limits = admission.client_limits(config)
        self._rejects = RejectCounter(self._count_reject)
        #: replies the client sockets could not queue, by socket (logged `sampled`)
        self._undeliverable: collections.Counter[str] = collections.Counter()
        self._staleness = StalenessFilter(self.epoch)
        self._hooks: list[subprocess.Popen[bytes]] = []
        self._sockets: dict[str, Socket] = {}
        self._chan_socks: dict[str, Socket] = {}
        self._polled: tuple[Socket, ...] = ()  # what _poller_obj polls
        self._poller_obj = zmq.Poller()
        # TimingConfig.spin_s: the loop polls without sleeping for this long after its last
        # message; never with stream channels (their threads need the interpreter).
        streams = any(ch.placement == "stream" for ch in config.channels)
        self._spin_s = 0.0 if streams else config.timing.spin_s
        # time.monotonic() at the end of handling the last client message or channel
        # result (not heartbeats: an idle daemon would spin after each of them)
        self._last_message = 0.0
        self._zap: ZapAuthenticator | None = None
        self.log = log.bind(epoch=self.epoch)
        self._drain_deadline: float | None = None
        self._timers_ran_at = float("-inf")  # when `_advance` last ran (self.clock())
        self._sock_incarnation: dict[str, int] = {}
        # systemd and health probes (safemon/systemd.py, safemon/health.py)
        self._notifier = Notifier()
        self.loop_at: float | None = None
        self._link_key: bytes | None = None
        self._link_tokens: dict[tuple[str, int], str] = {}
        self._zap_denied_seen = 0
        #: the last faults that led to a reaction, newest last (for `status`).
        self.fault_history: collections.deque[dict[str, Any]] = collections.deque(maxlen=20)
        self._lock: DaemonLock | None = None
        self._ipc_files: list[str] = []
        self._conn_guard: ConnectionGuard | None = None
        self.injection_enabled = bool(config.testing.fault_injection)
        #: stimuli raised while effects are carried out (a failed weight send)
        self._feedback: collections.deque[st.Stimulus] = collections.deque()
        #: the inline channels this loop drives (`safemon.channels.inline`); None: none
        self._inline: InlineChannels | None = None
        #: when the loop last read its channels' messages (`safemon.loop_attention`); from
        #: `run` on
        self._attention: LoopAttention | None = None
        #: the time up to which the loop's time away has been reported to the supervisor
        #: (`_attend`): work sent to a channel is judged late or not then (`_send_channel`)
        self._attended_at = -float("inf")

    # ================================================================== the core's roles

    @property
    def scheduler(self) -> sch.Scheduler | None:
        """The core's DTI scheduler (None before `start`)."""
        return None if self.core is None else self.core.scheduler

    @property
    def controller(self) -> ctl.SafeStateController | None:
        """The core's safe-state controller (None before `start`)."""
        return None if self.core is None else self.core.controller

    @property
    def voter(self) -> vot.Voter | None:
        """The core's voter (None before `start`)."""
        return None if self.core is None else self.core.voter

    # ================================================================== lifecycle

    def _check_gpus(self) -> None:
        assert self.config.channels is not None
        wanted = [(i, ch.gpu) for i, ch in enumerate(self.config.channels) if ch.gpu is not None]
        if not wanted:
            return
        if self.backend != "cupy":
            why = (" (backend auto found no usable CuPy or CUDA device and chose numpy)"
                   if self.config.backend == "auto" else "")
            raise ConfigError(
                f"channels.{wanted[0][0]}.gpu: set to {wanted[0][1]}, but the backend is "
                f"{self.backend}{why}: run where the GPUs are, with the cuda12 or cuda13 extra "
                "installed, or set every channel's gpu to null (e.g. "
                f"SAFEMON_CHANNELS__{wanted[0][0]}__GPU=null) to run on the host")
        from safemon.kernels.compiler import import_cupy

        count = int(import_cupy().cuda.runtime.getDeviceCount())
        for i, gpu in wanted:
            if gpu >= count:
                raise ConfigError(
                    f"channels.{i}.gpu: device {gpu} is not usable here ({count} CUDA device(s))"
                )

    def start(self) -> None:
        """Validate, bind, start the channels. Raises ConfigError / PatternError."""
        try:
            self.backend = resolve_backend(self.config.backend)
        except Exception as exc:
            raise ConfigError(f"backend: {exc}") from None
        # Work-item prices for a GPU unless the config names its own (config.LimitsConfig).
        cfg = self.config = with_backend_limits(self.config, self.backend.on_device)
        self._check_gpus()
        if self.backend.on_device and self._patterns_in is None and cfg.patterns.cover is not False:
            from safemon.patterns.sm_coverage import device_sm_count

            self._sm_count = device_sm_count(ch.gpu or 0 for ch in cfg.channels or [])
        if self._patterns_in is None:
            from safemon.golden_store import load_patterns

            patterns: Sequence[GoldenPatternLike] = load_patterns(cfg, sm_count=self._sm_count)
        else:
            patterns = self._patterns_in
        by_channel, ids = assign_patterns(cfg, patterns, self._sm_count)
        scheduler = sch.Scheduler(scheduler_config(cfg, ids), rng=random.Random())
        ensure_fd_budget(cfg.limits.max_connections)
        if needs_lock(cfg):
            assert cfg.endpoints.runtime_dir is not None
            # Before any socket file is bound or unlinked: a second daemon of this name
            # must fail here and leave the first one's sockets alone.
            self._lock = DaemonLock.acquire(cfg.endpoints.runtime_dir, cfg.name)
        devices = channel_devices(cfg, cuda_uuid if self.backend.on_device else None)
        self.metrics = Metrics(cfg, self.registry, backend=self.backend, devices=devices)
        self._bind(cfg)
        if self._serve_metrics:
            try:
                self.metrics_server = start_http_server(cfg, self.registry, health=self.health)
            except OSError as exc:
                self._close_sockets()
                self._release_lock()
                where = f"{cfg.metrics.host}:{cfg.metrics.port}"
                if exc.errno == errno.EADDRINUSE:
                    raise ConfigError(
                        f"metrics.port: cannot serve metrics on {where}: {exc} (another daemon "
                        "on this host? give each deployment its own port, e.g. "
                        "SAFEMON_METRICS__PORT)") from None
                raise ConfigError(f"metrics: cannot serve metrics on {where} (metrics.host, "
                                  f"metrics.port, or the TLS files): {exc}") from None
        launcher = self._launcher or RealLauncher(cfg, self.ctx, clock=self.clock)
        # The key of the channel-link tokens; a launcher without one (a test's fake) runs
        # its channels without link checks.
        link_key = getattr(launcher, "link_key", None)
        self._link_key = link_key if isinstance(link_key, bytes) else None
        inline = getattr(launcher, "inline", None)
        self._inline = inline if isinstance(inline, InlineChannels) and inline.names else None
        self.supervisor = Supervisor(cfg, launcher, self.epoch)
        self.core = RuntimeCore(cfg, scheduler, by_channel, self.supervisor, self.metrics,
                                self.backend, self.clock,
                                gpu_uuids={n: d.uuid for n, d in devices.items() if d.uuid})
        attach_runtime(self.metrics, self.core)  # mode, channel_up, hft: read at scrape time
        self._carry_out(self.core.on_start())
        now = self.clock()
        # Connect before the channels bind: DEALERs reconnect until the peer appears.
        for name in cfg.channel_names:
            if not self._is_inline(name):
                self._chan_socks[name] = self._connect_channel(name)
        self.supervisor.start_all(now)
        self._sock_incarnation = {n: self.supervisor.incarnation(n) for n in cfg.channel_names}
        self.log.info("daemon_started", backend=self.backend, policy=Policy(cfg.policy).value,
                      sockets=self.sockets(), metrics_url=self.metrics_url,
                      fault_injection=self.injection_enabled)
        if self.injection_enabled:
            self.log.warning("fault_injection_enabled",
                             detail="testing.fault_injection is on: not for production")
        if self.backend.on_device:
            self._report_mps(cfg)

    def _report_mps(self, cfg: Config) -> None:
        """Say whether the channels will find a CUDA MPS control daemon (`safemon.mps`): the
        metric `safemon_cuda_mps_found`, and a warning when several channels share a GPU
        without one (their processes, or the app's beside inline channels, are time-sliced
        then; deploy/README.md, "Several channels on one GPU")."""
        assert self.metrics is not None and cfg.channels is not None
        found = control_pipe_found(os.environ)
        self.metrics.cuda_mps.set(1 if found else 0)
        shared = shared_gpus(ch.gpu for ch in cfg.channels)
        pipes = str(pipe_directory(os.environ))
        if found:
            self.log.info("cuda_mps_found", pipe_directory=pipes)
        elif shared:
            self.log.warning("cuda_mps_not_found", pipe_directory=pipes, shared_gpus=shared,
                             detail="without CUDA MPS the processes that share a GPU (channel "
                             "processes, the app beside inline channels) are time-sliced; 25 "
                             "of 27 request medians measured 0.69-0.97x as long under it "
                             "(deploy/README.md)")

    def _bind(self, cfg: Config) -> None:
        curve = self._curve()
        ep = cfg.endpoints
        for key, kind, address in (("ingress", zmq.ROUTER, ep.ingress),
                                   ("control", zmq.ROUTER, ep.control),
                                   ("events", zmq.PUB, ep.events)):
            use = curve if address.startswith("tcp://") or (curve and address.startswith("ipc://")) else None
            # Replies wait in the ROUTER's per-client queue until the client reads them: room
            # for every reply a client can be owed (its admitted requests and the refusals
            # of what it pipelined meanwhile), so a reply is never dropped for lack of it.
            # MAXMSGSIZE: libzmq drops the connection of a client that sends a part larger
            # than the transport would admit, before buffering it (tcp/ipc; per part: nothing
            # in libzmq bounds the parts' number, docs/ROBUSTNESS.md).
            opts = (SocketOptions(sndhwm=4 * cfg.limits.max_in_flight,
                                  max_msg_size=self._client_limits.max_wire_part_bytes)
                    if kind == zmq.ROUTER else None)
            try:
                self._sockets[key] = make_socket(self.ctx, kind, address, bind=True, curve=use,
                                                 options=opts)
            except zmq.ZMQError as exc:
                self._close_sockets()
                self._release_lock()
                raise ConfigError(f"endpoints.{key}: cannot bind {address}: {exc}") from None
            if address.startswith("ipc://"):
                self._ipc_files.append(address[len("ipc://"):])
        # limits.max_connections, enforced: libzmq aborts on an ipc:// accept that fails with
        # EMFILE, so the listeners close at the bound (safemon.transport.conn_guard).
        self._conn_guard = ConnectionGuard(
            self.ctx, {k: self._sockets[k] for k in ("ingress", "control")},
            cfg.limits.max_connections, on_change=lambda ev, kw: self.log.warning(ev, **kw))

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

    def request_stop(self) -> None:
        """Begin draining (thread- and signal-safe): new requests are refused, in-flight
        ones are answered, then `run` returns (within `timing.drain_timeout_s`, and at most
        `DRAIN_SWEEP_S` more to answer what was queued on the ingress). It only
        sets a flag: no lock, so a signal handler may call it any number of times."""
        self._stop_requested = True

    def run(self) -> None:
        """The loop; returns after a drain. `start()` must have been called."""
        assert self.core is not None and self.supervisor is not None
        self._attention = LoopAttention(self.clock())
        try:
            while True:
                now = self.clock()
                self.loop_at = now
                if self._stop_requested and self._drain_deadline is None:
                    self._drain_deadline = now + self.config.timing.drain_timeout_s
                    self._notifier.stopping()
                    self._feed(st.StopRequested(now, st.stimulus_id("stop")))
                if self._drain_deadline is not None and (
                    not self.core.in_flight or now >= self._drain_deadline
                ):
                    self._finish_drain()
                    return
                if self._notifier.watchdog_due(now):
                    self._notifier.watchdog(now)
                timers_at = self._timers_at()
                if now >= timers_at:
                    self._advance(now)
                    self._pump_inline()  # what the timers sent inline channels runs now
                    timers_at = self._timers_at()
                    now = self.clock()  # the timers' work took time
                self._poll_once(self._timeout_ms(now, timers_at))
                self._pump_inline()
        finally:
            self._shutdown()

    def _timers_at(self) -> float:
        """When `_advance` must run next: the core's or the supervisor's next wakeup, and
        at the latest `TIMER_PERIOD_S` after it last ran."""
        assert self.core is not None and self.supervisor is not None
        at = self._timers_ran_at + TIMER_PERIOD_S
        for w in (self.core.next_wakeup(), self.supervisor.next_wakeup()):
            if w is not None and w < at:
                at = w
        return at

    def _timeout_ms(self, now: float, timers_at: float) -> int:
        """The poll's timeout: until the timers, the drain deadline or the connection
        guard's reopening are due (whole ms, rounded up, at most 50)."""
        if self._inline is not None and self._inline.has_work:
            return 0  # a pump that ran out of time left work: poll, then pump again
        until = timers_at
        reopen = self._conn_guard.next_wakeup() if self._conn_guard is not None else None
        inline = None if self._inline is None else self._inline.next_due()
        for w in (self._drain_deadline, reopen, inline):
            if w is not None and w < until:
                until = w
        return max(0, min(50, int((until - now) * 1000) + 1))

    def _finish_drain(self) -> None:
        now = self.clock()
        self._feed(st.DrainFinished(now, st.stimulus_id("drain")))
        # Requests already queued on the ingress socket get their answer too (a typed
        # ShuttingDownError), so that nothing sent before the stop is left unanswered.
        sweep_end = time.monotonic() + DRAIN_SWEEP_S
        ing = self._sockets["ingress"]
        while time.monotonic() < sweep_end:
            got = recv_message(ing, limits=self._client_limits, timeout_ms=DRAIN_SWEEP_GAP_MS,
                               counter=self._rejects,
                               on_reject=functools.partial(self._on_rejected, "ingress"))
            if got is None:
                break
            assert got.identity is not None
            self._client_message("ingress", got.identity, got.message)
        self.log.info("drained", at=now)

    # ================================================================== views

    @property
    def metrics_url(self) -> str | None:
        return None if self.metrics_server is None else self.metrics_server.url

    def sockets(self) -> dict[str, str]:
        ep = self.config.endpoints
        return {"ingress": ep.ingress, "control": ep.control, "events": ep.events}

    def status(self) -> dict[str, Any]:
        """The operator view (`safemon.daemon_status.operator_status`), plus the client
        connection bound (`safemon.transport.conn_guard`)."""
        view = daemon_status.operator_status(self)
        view["client_connections"] = self._conn_guard.status() if self._conn_guard else None
        return view

    def health(self) -> HealthReport:
        """What /healthz and /readyz answer (read-only; called on the HTTP thread)."""
        return daemon_status.health(self)

    def hft(self) -> HftAssessment:
        """Declared and effective HFT of the voting set now (`safemon.hft`)."""
        return daemon_status.hft(self)

    # ================================================================== shutdown

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
        if self._conn_guard is not None:
            self._conn_guard.close()
            self._conn_guard = None
        for s in [*self._sockets.values(), *self._chan_socks.values()]:
            s.close(linger=0)
        self._sockets.clear()
        self._chan_socks.clear()

    # ================================================================== I/O in

    def _poller(self) -> zmq.Poller:
        """The poller over ingress, control, the channels' and the connection guard's
        sockets; rebuilt only when that set changed (a channel's new incarnation)."""
        guard = self._conn_guard
        socks = (self._sockets["ingress"], self._sockets["control"], *self._chan_socks.values(),
                 *(guard.monitors() if guard is not None else ()))
        if len(socks) != len(self._polled) or any(a is not b for a, b in zip(socks, self._polled,
                                                                             strict=True)):
            poller = zmq.Poller()
            for s in socks:
                poller.register(s, zmq.POLLIN)
            self._polled, self._poller_obj = socks, poller
        return self._poller_obj

    def _poll_once(self, timeout_ms: int) -> None:
        guard = self._conn_guard
        poller = self._poller()
        ready: dict[Any, int] = {}
        self._start_listening()
        wait_s = timeout_ms / 1000.0  # the longest this poll may listen, spin included

        def polled_now() -> bool:
            ready.update(poller.poll(0))
            return bool(ready)

        if self._spin_s > 0.0 and timeout_ms > 0:
            start = time.monotonic()
            until = min(self._last_message + self._spin_s, start + timeout_ms / 1000.0)
            if spin_until(polled_now, until):
                timeout_ms = 0
            else:
                timeout_ms = max(0, timeout_ms - round((time.monotonic() - start) * 1000))
        if not ready:
            ready = dict(poller.poll(timeout_ms))
        if self._attention is not None:
            self._attention.stop_listening(self.clock(), timeout_s=wait_s)
        if guard is not None:  # first: a flood of connections must close the listeners early
            events = any(m in ready for m in guard.monitors())
            reopen = guard.next_wakeup()
            now = self.clock()
            if events or (reopen is not None and now >= reopen):
                guard.handle(now, events=events)
        for name, s in list(self._chan_socks.items()):
            while s in ready and self._chan_socks.get(name) is s:
                got = recv_message(s, limits=self._limits, timeout_ms=0, counter=self._rejects,
                                   staleness=self._staleness)
                if got is None:
                    break
                self._channel_message(name, got.message)
                if self._spin_s > 0.0 and got.message.kind is not Kind.HEARTBEAT:
                    self._last_message = time.monotonic()
        for key in ("ingress", "control"):
            sock = self._sockets[key]
            if sock not in ready:
                continue
            on_reject = functools.partial(self._on_rejected, key)
            for _ in range(CLIENT_BATCH):  # the rest waits for the next poll
                got = recv_message(sock, limits=self._client_limits, timeout_ms=0, counter=self._rejects,
                                   on_reject=on_reject)
                if got is None:
                    break
                assert got.identity is not None
                self._client_message(key, got.identity, got.message)
                if self._spin_s > 0.0:
                    self._last_message = time.monotonic()

    def _client_message(self, sock: str, identity: bytes, msg: Message) -> None:
        now = self.clock()
        if sock == "ingress":
            stim: st.Stimulus = st.IngressMessage(identity, msg, now, st.stimulus_id("ingress"))
        else:
            stim = st.ControlMessage(identity, msg, now, st.stimulus_id("control"))
        self._guarded(sock, identity, msg, stim)

    def _channel_message(self, name: str, msg: Message) -> None:
        """A message on channel `name`'s socket: checked for its origin here (the channel it
        names, the current incarnation's link token), registrations and heartbeats told to
        the supervisor, then handed to the core."""
        assert self.supervisor is not None and self.metrics is not None
        now = self.clock()
        if msg.channel != name:
            # A message whose header names another channel than the socket it came on.
            self._rejects.record(RejectReason.MALFORMED)
            return
        token = self._link_token(name)
        if token is not None and not link_ok(msg.meta, token):
            # Not from this channel's current incarnation: an impostor bound the channel's
            # address, or a leftover of a replaced incarnation. Counted, logged, dropped.
            self.metrics.count_rejected("foreign")
            self.log.warning("foreign_channel_message_dropped", channel=name, kind=msg.kind.value)
            return
        sent = sent_at(msg.meta)  # the channel alive then, however long it waited unread
        if msg.kind is Kind.RESULT:
            self.supervisor.on_work_done(name, _work_key(msg.seq, None), now, sent)
        elif msg.kind is Kind.EVENT and msg.meta.get("event") == "weight":
            self.supervisor.on_work_done(name, _work_key(0, str(msg.meta.get("weight_id"))),
                                         now, sent)
        elif msg.kind is Kind.EVENT and msg.meta.get("event") == "scrub":
            self.supervisor.on_work_done(name, _SCRUB_KEY, now, sent)
        started = None
        if msg.kind in (Kind.REGISTER, Kind.HEARTBEAT):
            try:  # what the supervisor needs; the core judges the rest of the message
                m = msgs.channel_message_of(msg)
            except msgs.MetaError:
                m = None
            if isinstance(m, msgs.Register):
                started = self.supervisor.on_register(name, m.incarnation, now, sent)
                if started is not None:
                    self.log.info("channel_registered", channel=name, incarnation=m.incarnation,
                                  pid=m.pid)
            elif isinstance(m, msgs.Heartbeat):
                started = self.supervisor.on_heartbeat(name, m.incarnation, now, sent)
                if started is not None:
                    self.log.info("channel_registered", channel=name, incarnation=m.incarnation)
        if started is not None:
            self._guarded("channel", None, msg, st.ChannelRegistered(
                name, started.incarnation, now, st.stimulus_id("registered")))
        self._guarded("channel", None, msg, st.ChannelMessage(name, msg, now, st.stimulus_id("channel")))

    def _guarded(self, sock: str, identity: bytes | None, msg: Message, stim: st.Stimulus) -> None:
        """Handle one message; an exception is a bug in handling *this* message, not a
        reason to stop serving everyone: what the core decided before it is carried out,
        and it is counted, logged and, where a reply address exists, answered with a typed
        `InternalError`."""
        try:
            self._feed(stim)
        except Exception as exc:  # the loop must survive any one message
            cause = exc.cause if isinstance(exc, StimulusFailed) else exc
            if self.metrics is not None:
                self.metrics.count_rejected("handler_error")
            self.log.exception("message_handling_failed", socket=sock, kind=msg.kind.value,
                               seq=msg.seq, error=quote(cause))
            if identity is not None and sock in ("ingress", "control"):
                self._error_to(sock, identity, msg.seq, "InternalError",
                               f"the daemon could not handle this message: {type(cause).__name__}")

    def _feed(self, stim: st.Stimulus) -> None:
        """Hand `stim` to the core and carry out its effects (and what they feed back).

        Raises:
            StimulusFailed: the core failed on `stim`; its effects so far were carried out,
                and what they fed back was handled.
            Exception: carrying out an effect raised (a bug in the shell); the sends that
                failed before it were still fed back.
        """
        self._attend(stim.now)  # a stall just before is not the channels' (never raises)
        try:
            self._handle(stim)
        finally:
            self._feed_back()  # never raises

    def _handle(self, stim: st.Stimulus) -> None:
        """Hand `stim` to the core and carry out its effects (those it produced before
        failing too); what carrying them out feeds back stays queued.

        Raises:
            StimulusFailed: the core failed on `stim`.
        """
        assert self.core is not None
        try:
            effects = self.core.handle(stim)
        except StimulusFailed as exc:
            self._carry_out(exc.effects)
            raise
        self._carry_out(effects)

    def _feed_back(self) -> None:
        """Feed the stimuli that carrying out effects reported back (sends the shell could
        not queue), now, whether or not the stimulus that produced them failed: each on its
        own, so that one that fails is logged as itself (`feedback_handling_failed`),
        neither stopping the rest nor blamed on the message being handled (it is no received
        message, so `messages_rejected_total` does not count it)."""
        while self._feedback:
            stim = self._feedback.popleft()
            try:
                self._feed(stim)
            except Exception as exc:  # the loop must survive any one stimulus
                cause = exc.cause if isinstance(exc, StimulusFailed) else exc
                self.log.exception("feedback_handling_failed", stimulus=type(stim).__name__,
                                   channel=getattr(stim, "channel", None),
                                   weight_ids=list(getattr(stim, "weight_ids", ())),
                                   error=quote(cause))

    def _count_reject(self, reason: Any) -> None:
        if self.metrics is not None:
            self.metrics.count_rejected(reason)

    def _on_rejected(self, sock: str, identity: bytes | None, rejected: Rejected,
                     frames: Sequence[Any]) -> None:
        """A client message the transport dropped (already counted by reason): log it
        (the first 10 of each reason, then every power of two) and, when its header names
        a seq, answer the sender with a typed InvalidInputError so it does not wait."""
        n = self._rejects[rejected.reason]
        if sampled(n):
            self.log.warning("message_rejected", socket=sock, reason=rejected.reason.value,
                             detail=quote(rejected.detail), count=n)
        if identity is None or not frames or rejected.reason is RejectReason.UNAUTHENTICATED:
            return
        seq = _header_seq(frames[0], self._limits.max_header_bytes)
        if seq is not None:
            self._error_to(sock, identity, seq, "InvalidInputError",
                           f"message rejected ({rejected.reason.value}): {quote(rejected.detail)}")

    # ================================================================== effects out

    def _carry_out(self, effects: Sequence[fx.Effect]) -> None:
        """Carry out the core's effects in order. Sends that failed are reported back
        (`_feedback`), even when a later effect raises."""
        failed_weights: dict[str, list[str]] = {}
        failed_drops: dict[str, list[str]] = {}
        try:
            for e in effects:
                if isinstance(e, fx.SendToChannel):
                    if e.weight_id is not None and e.channel in failed_weights:
                        failed_weights[e.channel].append(e.weight_id)  # keep their order
                    elif not self._send_channel(e):
                        if e.weight_id is not None:
                            failed_weights[e.channel] = [e.weight_id]
                        elif e.drops_weight is not None:
                            failed_drops.setdefault(e.channel, []).append(e.drops_weight)
                elif isinstance(e, fx.Reply):
                    self._reply(e.socket, e.identity, e.kind, e.seq, dict(e.meta), e.arrays)
                elif isinstance(e, fx.ReplyStatus):
                    body = np.frombuffer(json.dumps(self.status()).encode(), dtype=np.uint8).copy()
                    self._reply("control", e.identity, Kind.REPLY, e.seq,
                                msgs.ControlReply(ok=True, outcome="status").to_meta(), (body,))
                elif isinstance(e, fx.Log):
                    getattr(self.log, e.level)(e.event, **e.fields)
                else:
                    self._carry_out_other(e)
        finally:
            for ch, wids in failed_weights.items():
                self._feedback.append(st.WeightSendFailed(ch, tuple(wids), self.clock(),
                                                          st.stimulus_id("send-failed")))
            for ch, wids in failed_drops.items():
                self._feedback.append(st.DropSendFailed(ch, tuple(wids), self.clock(),
                                                        st.stimulus_id("drop-failed")))

    def _carry_out_other(self, e: fx.Effect) -> None:
        assert self.supervisor is not None and self.core is not None
        if isinstance(e, fx.RestartChannel):
            self.supervisor.restart(e.channel, e.delay, e.now)
        elif isinstance(e, fx.IsolateChannel):
            self.supervisor.isolate(e.channel, e.now)
        elif isinstance(e, fx.Publish):
            self._publish(e.event_type, dict(e.payload))
        elif isinstance(e, fx.RunHook):
            self._run_hook(e.event_type, dict(e.payload))
        elif isinstance(e, fx.SystemdReady):
            self.ready.set()
            self._notifier.ready(*self._systemd_view())
        elif isinstance(e, fx.SystemdStatus):
            self._notifier.status(*self._systemd_view())  # deduplicated: sent on change only
        elif isinstance(e, fx.ReactionDone):
            self._reaction_done(e)

    def _systemd_view(self) -> tuple[Mode, dict[str, ChannelState]]:
        assert self.core is not None
        c = self.core.controller
        return c.mode, {n: c.channel_state(n) for n in self.config.channel_names}

    def _reaction_done(self, e: fx.ReactionDone) -> None:
        """FRTI on the real clock: detection → the reaction carried out (mode set, the voter
        told, the channel isolated or its restart planned, events published), not just the
        controller's decision, which happens at the same instant."""
        assert self.metrics is not None and self.core is not None
        frti = max(e.frti_floor, self.clock() - e.detected_at)
        self.metrics.observe_fault_reaction(e.kind, frti)
        if e.fdti_seconds is not None:
            self.metrics.observe_fault_detection(e.kind, e.fdti_seconds)
        self.log.info("fault_reaction", kind=e.kind.value, fdti_s=e.fdti_seconds, frti_s=frti,
                      fault_class=e.fault_class)
        self.fault_history.append({
            "kind": e.kind.value, "channel": e.channel, "class": e.fault_class,
            "fdti_s": e.fdti_seconds, "frti_s": frti, "detail": e.detail,
            "mode": self.core.controller.mode.value, "at": self.clock()})
        if frti > 0.05:  # say where the time went (the steps' start times, from detection)
            self.log.warning("slow_reaction", kind=e.kind.value, frti_s=frti,
                             steps=[(n, round(t - e.detected_at, 4)) for n, t in e.steps])

    def _link_token(self, name: str) -> str | None:
        """The current incarnation's link token of channel `name` (None: no link checks).
        Kept per (channel, incarnation): every message to and from a channel needs it, and
        an HMAC per message is measurable on the request path."""
        if self._link_key is None or self.supervisor is None:
            return None
        key = (name, self.supervisor.incarnation(name))
        token = self._link_tokens.get(key)
        if token is None:
            token = self._link_tokens[key] = link_token(self._link_key, *key)
        return token

    def _send_channel(self, e: fx.SendToChannel) -> bool:
        sent = self._send_to(e.channel, e.kind, e.seq, dict(e.meta), e.arrays)
        if sent and e.busy_until is not None:
            # The channel's loop computes instead of heartbeating until then (supervisor).
            assert self.supervisor is not None
            key = (_SCRUB_KEY if e.kind is Kind.CONTROL and e.meta.get("command") == "scrub"
                   else _work_key(e.seq, e.weight_id))
            # Judged late or not as of the time away reported so far: a stall since then
            # (inside this stimulus) is not the channel's silence (supervisor).
            self.supervisor.on_work_sent(e.channel, key, e.busy_until, self._attended_at)
        return sent

    def _send_to(self, name: str, kind: Kind, seq: int, meta: dict[str, Any],
                 arrays: tuple[npt.NDArray[Any], ...] = ()) -> bool:
        token = self._link_token(name)
        if token is not None:
            meta = {**meta, LINK_FIELD: token}
        if self._inline is not None and self._is_inline(name):
            return self._inline.deliver(name, kind, epoch=self.epoch, seq=seq, meta=meta,
                                        arrays=arrays)
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
        except zmq.ZMQError as exc:
            # The client went away (EHOSTUNREACH), or does not read its replies and its
            # queue is full (EAGAIN): nobody is waiting for this one. Such a client can make
            # every message it sends end here, so the log is sampled (`sampled`).
            n = self._undeliverable[sock] = self._undeliverable[sock] + 1
            if sampled(n):
                self.log.warning("reply_undeliverable", socket=sock, error=str(exc), count=n)

    def _error_to(self, sock: str, identity: bytes, seq: int, error_type: str, message: str) -> None:
        self._reply(sock, identity, Kind.ERROR, seq,
                    msgs.ErrorReply(error_type=error_type, message=message).to_meta())

    def _publish(self, event_type: str, payload: dict[str, Any]) -> None:
        assert self.core is not None
        body = np.frombuffer(json.dumps({"event": event_type, **payload}).encode(),
                             dtype=np.uint8).copy()
        frames = encode(Kind.EVENT, epoch=self.epoch, seq=self.core.next_seq(),
                        meta=msgs.PublishedEvent(event=event_type).to_meta(), arrays=(body,))
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

    # ================================================================== inline channels

    def _is_inline(self, name: str) -> bool:
        return self._inline is not None and name in self._inline.names

    def _pump_inline(self) -> None:
        """Run the inline channels (`safemon.channels.inline`) in lockstep rounds until none
        has work, and hand every message they sent to `_channel_message`, as if it had come
        on their sockets. A result can queue more work (the next request of a busy
        channel): that runs in the next round. Heartbeats are made before each round, and
        after `TIMER_PERIOD_S` the pump returns to the loop (which polls and runs its timers,
        then pumps again), so that a long queue of work cannot starve the other sockets or
        make a channel look silent."""
        inline = self._inline
        if inline is None:
            return
        self._start_listening()  # the inline channels' time is theirs (loop_attention)
        try:
            until = self.clock() + TIMER_PERIOD_S
            while True:
                inline.tick(self.clock())  # heartbeats due
                if inline.has_work and self.clock() < until:
                    # Each channel's RESULT is voted on as soon as it finished, so a vote
                    # that two results decide is answered before the third channel's wait.
                    inline.run_round(after_finish=lambda: self._take_inline(inline))
                if not self._take_inline(inline) and (not inline.has_work or self.clock() >= until):
                    return
        finally:
            if self._attention is not None:
                self._attention.stop_listening(self.clock())

    def _start_listening(self) -> None:
        """The loop is about to poll or run its inline channels: report the stretch away
        before, if there was one (`_attend`)."""
        attention = self._attention
        if attention is None:
            return
        # Handling a stretch away is itself time away: report until none is left, then listen.
        while (gone := attention.away(now := self.clock())) is not None:
            self._attend(now, gone)
            self._feed_back()
        now = self.clock()
        self._attend(now, attention.start_listening(now))  # a stretch is never dropped
        self._feed_back()

    def _attend(self, now: float, gone: Away | None = None) -> None:
        """Before anything is judged at `now`: if the loop read no channel message for
        longer than `AWAY_THRESHOLD_S` (`gone`, or the stretch up to `now`), the supervisor
        and the core move the channels' silence clocks and open deadlines by that time
        (`timing.ftti_s` at most per deadline), so that a stall of the daemon is not blamed
        on its channels (`safemon.loop_attention`). Never raises: a failure is logged
        (`loop_away_handling_failed`) and the loop goes on. What carrying out the core's
        effects fed back stays queued for the caller's `_feed` (`_start_listening` feeds it
        itself), so it reaches the core after the stimulus the stretch preceded. The voter's
        and the scheduler's `Postpone` move no clock, so a stimulus stamped before `now`
        (one `_advance` feeds after its tick) is never "time going backwards" for them.
        Once reported, `now` is the time at which work sent to channels is judged late or
        not (`_attended_at`)."""
        if gone is None and self._attention is not None:
            gone = self._attention.away(now)
        if gone is None:
            self._attended_at = max(self._attended_at, now)
            return
        assert self.supervisor is not None
        try:
            self.supervisor.postpone(gone.since, gone.seconds, now)
            self._attended_at = max(self._attended_at, now)
            self._handle(st.LoopAway(gone.since, gone.seconds, now, st.stimulus_id("away")))
        except Exception as exc:  # the loop must survive it, and so must the message after
            cause = exc.cause if isinstance(exc, StimulusFailed) else exc
            self.log.exception("loop_away_handling_failed", since=gone.since,
                               seconds=gone.seconds, error=quote(cause))

    def _take_inline(self, inline: InlineChannels) -> bool:
        """Hand every message the inline channels sent (due held ones included) to
        `_channel_message`, as if it had come on their sockets; False when there was none."""
        sent = inline.take(self.clock())
        for _ in range(inline.take_corrupted()):  # what the transport would have dropped
            self._rejects.record(RejectReason.BAD_CRC)
        for name, msg in sent:
            self._channel_message(name, msg)
            if self._spin_s > 0.0 and msg.kind is not Kind.HEARTBEAT:
                self._last_message = time.monotonic()
        return bool(sent)

    # ================================================================== time

    def _advance(self, now: float) -> None:
        """Timers: the core's (voter deadlines, scheduler wakeups, client deadlines, weight
        acknowledgements), then the supervisor's restarts and liveness, sockets of new
        incarnations, link hellos, finished hooks."""
        assert self.core is not None and self.supervisor is not None
        self._timers_ran_at = now
        self._feed(st.TimerTick(now, st.stimulus_id("tick")))
        if self._zap is not None and self.metrics is not None:
            denied = self._zap.denied  # counted (and logged) by the ZAP thread
            for _ in range(denied - self._zap_denied_seen):
                self.metrics.count_rejected("zap_denied")
            self._zap_denied_seen = denied
        for lost in self.supervisor.tick(now):
            self._feed(st.ProcessLost(lost.channel, lost.kind, lost.detected_at,
                                              lost.detail, now, st.stimulus_id("lost")))
        for name, inc in self._sock_incarnation.items():
            if self.supervisor.incarnation(name) != inc:
                self._feed(st.ChannelReplaced(name, now, st.stimulus_id("replaced")))
                # A new incarnation binds afresh: a new pipe drops the old one's leftovers
                # (and inproc:// does not reconnect to a re-bound endpoint by itself).
                if not self._is_inline(name):
                    self._chan_socks[name].close(linger=0)
                    self._chan_socks[name] = self._connect_channel(name)
                self._sock_incarnation[name] = self.supervisor.incarnation(name)
        for name in self._sock_incarnation:
            if self.supervisor.awaiting_registration(name) and not self._is_inline(name):
                # The channel answers only the peer that spoke first with its link token;
                # say hello until it registers (a send before the connection completes
                # fails at once: the sockets are IMMEDIATE).
                self._send_to(name, Kind.CONTROL, self.core.next_seq(),
                              msgs.ChannelCommand(command="link").to_meta())
        for p in list(self._hooks):
            if p.poll() is not None:
                self._hooks.remove(p)



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


