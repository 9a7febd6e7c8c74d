"""The channel worker: one redundant replica's loop (process or stream placement), and the
message handlers that inline channels run without the loop (`safemon.channels.inline`).

A worker binds a DEALER socket at `config.channel_address(name)`; the daemon connects to
it. Everything for this channel - live work, golden self-tests, scrubs, weight uploads,
injected faults - arrives on that one socket and is handled strictly in arrival order, so
self-tests interleave with live work through the channel's own queue.

Messages in (docs/PROTOCOL.md kinds):
- REQUEST job="live": frames [x (M, K) float32]; meta weight_id, deadline_ms.
  Runs the channel's variant on (x, resident weight) and answers RESULT [C, ES].
- REQUEST job="model": frames [x, spec (uint8), biases (float32)] of a whole-model request
  (`safemon.models`); meta model_id. Runs every layer on the device and answers RESULT
  [output, digests (uint64: the output's, then per layer its ES's and its output's)]:
  the ES arrays never leave the channel (digest voting).
- REQUEST job="selftest": frames [A, B] of a golden pattern; meta test_id. Same kernel
  path, answered RESULT [C, ES] with the test_id; on a GPU through the self-test build, which
  adds a third frame (uint32, the SM id of every block) and meta `sm_count`.
- CONTROL command="weight", args=weight_id, frames [W (K, N) float32]: keep W resident
  (an ECC `ProtectedArray` when config.weights.ecc; verified before every use).
- CONTROL command="drop_weight", args=weight_id: forget that weight (the daemon evicted it,
  `safemon.eviction`), with any captured step that holds it; unanswered. Work sent before
  it was handled before it (arrival order), and no work on it comes after it.
- CONTROL command="scrub": patrol the resident weights (for at most a time slice, resuming
  where the last scrub stopped: `_scrub`); answered EVENT event="scrub"
  with the pass's corrected / uncorrectable word counts.
- CONTROL command="inject", args=KIND / command="clear": fault injection (`faults.py`).
- CONTROL command="stop": leave the loop.

Messages out: REGISTER once at start (variant, pid, device, incarnation), HEARTBEAT every
`timing.heartbeat_interval_s` (with the cumulative ECC counts of the weights, by buffer
kind, and the incarnation, so the daemon's counters survive a restart), RESULT (ok=False
with an `error` text when the channel could not compute, e.g. an uncorrectable weight).
RESULT and EVENT echo the request's epoch and seq; REGISTER/HEARTBEAT/EVENT use the
monotonic counter `incarnation * 2**32 + n`, so a restarted channel's messages stay fresh
for the daemon's staleness filter.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import os
import sys
import threading
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import structlog
import zmq

from safemon.channels.faults import FaultState
from safemon.channels.link import LINK_FIELD, link_ok
from safemon.channels.sent_stamp import SENT_FIELD
from safemon.channels.step_graphs import StepGraphs, worth_a_graph
from safemon.channels.stream_priority import device_priority_range, stream_priority
from safemon.config import Config
from safemon.device_io import ImportedBuffers, digest_hex, parse_digest
from safemon.digest import DIGEST_NAME
from safemon.ecc import ProtectedArray
from safemon.errors import (
    DeviceInputError,
    KernelCheckError,
    NonFiniteOperandError,
    SafemonError,
    UncorrectableError,
)
from safemon.kernels.api import run_variant
from safemon.kernels.backend import Backend, resolve_backend
from safemon.kernels.catalog import TILES, auto_tile_builds, make_variant
from safemon.kernels.pinned import lane
from safemon.steps import run_steps
from safemon.transport import Kind, Limits, Message, encode, make_socket, recv_message, send_message
from safemon.transport import messages as msgs
from safemon.transport.sockets import Context, Socket
from safemon.weight_id import weight_id_of

__all__ = ["ChannelWorker", "Reply", "main"]

log = structlog.get_logger("safemon.channel")

#: Code words a host (NumPy) weight's scrub patrols per step (4 MiB of 32-bit words, tens of
#: ms on the NumPy backend), between which a scrub command checks its time slice.
SCRUB_CHUNK_WORDS = 1 << 20


@dataclass(frozen=True)
class Reply:
    """A handled REQUEST's RESULT: its meta and frames, whether an injected `corrupt_frame`
    spoils it on the way, and how long an injected `slow` fault holds it back (seconds)."""

    meta: dict[str, Any]
    arrays: tuple[Any, ...]
    corrupt: bool
    delay_s: float


class _Crash(Exception):
    """Raised inside the loop by an injected `crash` in stream mode (no process to exit)."""


class ChannelWorker:
    """One channel's loop. Not thread-safe: one thread runs `run()`; `stop()` from any.

    Args:
        ctx: this process's own zmq context (stream mode: the daemon's, for inproc://).
        config: the deployment.
        name: this channel's name in `config.channels`.
        incarnation: the launcher's start counter for this channel (int >= 0).
        epoch: the daemon epoch, stamped on REGISTER / HEARTBEAT.
        exit_process: called for an injected `crash`; None = stream mode (the loop ends).
        clock: monotonic seconds (injected for tests).
        link: this incarnation's link token (`safemon.channels.link`): sent on every
            message and required on every message received (others are counted, logged
            and dropped); None = no link check (unit tests of the worker alone).
        parent_pid: process mode: the daemon's pid; the loop ends once the process's
            parent is no longer that pid (the daemon died), within a heartbeat interval.
    """

    def __init__(
        self,
        ctx: Context,
        config: Config,
        name: str,
        *,
        incarnation: int,
        epoch: int,
        exit_process: Callable[[], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        link: str | None = None,
        parent_pid: int | None = None,
    ) -> None:
        assert config.channels is not None
        chans = {c.name: c for c in config.channels}
        if name not in chans:
            raise KeyError(f"no channel named {name!r}")
        self.config = config
        self.name = name
        self.chan = chans[name]
        self.incarnation = incarnation
        self.epoch = epoch
        self.backend = resolve_backend(config.backend)
        self._ctx = ctx
        self._exit_process = exit_process
        self._clock = clock
        self._stop = threading.Event()
        self._stop_signalled = False  # set by stop_from_signal, read by the loop
        self._weights: dict[str, ProtectedArray | npt.NDArray[np.float32]] = {}
        #: ECC (corrected, uncorrectable) counts of the weights dropped so far (heartbeats
        #: report cumulative totals per incarnation)
        self._ecc_dropped = (0, 0)
        #: the weight the next scrub starts in, and how long one scrub command may patrol
        self._scrub_at: str | None = None
        t = config.timing
        self._scrub_slice_s = min(t.heartbeat_interval_s, t.selftest_deadline_s / 4)
        #: decoded models by their two wire frames' bytes (`_layers_of`)
        self._decoded: collections.OrderedDict[tuple[bytes, bytes], DecodedModel] = (
            collections.OrderedDict())
        self._faults = FaultState()
        self._counter = 0
        self._started = clock()
        self._stream: Any = None
        self._limits = Limits()
        self._link = link
        self._peer: bytes | None = None  # the routing id of this incarnation's daemon
        self._parent_pid = parent_pid
        self.foreign_dropped = 0
        self._imports = ImportedBuffers(clock=clock)  # device-resident requests' buffers
        self._busy_s = 0.0  # this request's time inside its own device steps (`_on_stream`)
        #: device steps recorded as CUDA graphs (`safemon.channels.step_graphs`); None: off
        self._graphs: StepGraphs | None = None
        self.log = log.bind(channel=name, epoch=epoch, incarnation=incarnation)

    # ---------------------------------------------------------------- public

    def stop(self) -> None:
        """Ask the loop to end (it notices within one heartbeat interval). Not for signal
        handlers: use `stop_from_signal`."""
        self._stop.set()

    def stop_from_signal(self) -> None:
        """`stop` for a signal handler: sets a flag the loop reads, and takes no lock.
        (`Event.set` takes the event's lock: a handler that ran while its own thread held
        that lock, a second SIGTERM arriving inside the first one's handler, deadlocked the
        process for good, and a channel outlived its killed daemon.)"""
        self._stop_signalled = True

    def run(self) -> None:
        """Bind, register, serve until `stop()`, a `stop` command or an injected crash."""
        self._setup_device()
        self._warm_up()
        # A ROUTER, so that everything goes back to the one peer that proved to be this
        # incarnation's daemon (a DEALER would deal replies round-robin to any process
        # that connected). Without a link token, the first peer to write is taken.
        sock = make_socket(
            self._ctx, zmq.ROUTER, self.config.channel_address(self.name, self.incarnation),
            bind=True
        )
        try:
            self._loop(sock)
        except _Crash:
            self.log.warning("channel_crash_injected")
        finally:
            sock.close(linger=0)
            if len(self._imports):
                self._imports.close_all()

    # ---------------------------------------------------------------- internals

    def _setup_device(self) -> None:
        if not self.backend.on_device:
            return
        from safemon.kernels.compiler import import_cupy

        cupy = import_cupy()
        if self.chan.gpu is not None:
            cupy.cuda.Device(self.chan.gpu).use()
        # Stream placement: each channel gets its own non-blocking stream, so replicas in
        # one process do not serialise on the legacy default stream. Inline 2oo3 channels:
        # the quorum's streams go first on the GPU (`stream_priority`).
        least, greatest = device_priority_range()
        priority = stream_priority(self.config, self.name, least, greatest)
        self._stream = cupy.cuda.Stream(non_blocking=True, priority=priority)
        if self.chan.graphs:
            self._graphs = StepGraphs()

    def _warm_up(self) -> None:
        """Run every kernel this channel can launch once before registering.

        The first launch of a build imports the reference or compiles the CUDA source (about a
        second per build under NVRTC), which must not eat a request's or a self-test's
        deadline. With tile "auto" the tile depends on the output shape, so every tile is
        compiled here, not only the one the first pattern happens to use; with ECC-protected
        weights the encode/check kernels are compiled too (a weight upload is queued ahead of
        live work on this channel's socket).
        """
        v = self.chan.variant
        for m, n, k in self.config.patterns.shapes():  # the self-tests' own shapes first
            a = np.zeros((m, k), dtype=np.float32)
            self._run(a, self._to_device(np.zeros((k, n), np.float32)), v.to_variant(m, n, k))
        a = np.ones((2, 3), dtype=np.float32)
        b = np.ones((3, 2), dtype=np.float32)
        weight: Any = self._to_device(b)
        if self.config.weights.ecc:
            weight = self._protect(b, name="warm-up")
        for tile in auto_tile_builds(v.level) if v.tile == "auto" else (v.tile,):
            self._run(a, weight, make_variant(v.checksum, v.level, v.mode, tile, rmt=v.rmt, abft=v.abft))
        # Products that `to_variant` splits over K also run splitk.cu's reduction: two
        # k-tiles of the small tile in two slices compile it.
        k2 = 2 * TILES["small"].bk
        self._run(np.ones((2, k2), dtype=np.float32), self._to_device(np.ones((k2, 2), np.float32)),
                  make_variant(v.checksum, v.level, v.mode, "small", 2, rmt=v.rmt, abft=v.abft))
        if self.backend.on_device:  # whole-model requests: epilogue, other steps, digests
            from safemon.kernels.compiler import import_cupy
            from safemon.kernels.model_gpu import (
                device_digests,
                launch_add,
                launch_attention,
                launch_epilogue,
                launch_layer_norm,
            )
            from safemon.models.activations import Activation

            cp = import_cupy()
            with self._stream:
                h = cp.zeros((2, 2), dtype=np.float32)
                launch_epilogue(h, None, Activation.GELU)
                device_digests([h])
                qkv = cp.zeros((2, 3), dtype=np.float32)  # one head of width 1, one token
                ones = cp.ones(3, dtype=np.float32)
                launch_add(launch_attention(launch_layer_norm(qkv, ones, ones, 1e-5), 1, 1),
                           h[:, :1].copy())

    def _protect(self, host: npt.NDArray[np.float32], *, name: str) -> ProtectedArray:
        """`host` as an ECC-protected resident array on this channel's backend and stream."""
        if not self.backend.on_device:
            return ProtectedArray.from_host(
                host, name=name, word_bits=self.config.weights.word_bits, backend=Backend.NUMPY
            )
        with self._stream:
            arr = ProtectedArray.from_host(
                host, name=name, word_bits=self.config.weights.word_bits, backend=Backend.CUPY
            )
        self._stream.synchronize()
        return arr

    def _variant_text(self) -> str:
        v = self.chan.variant
        return f"{v.checksum}/{v.level}/{v.mode}/{v.tile}"

    def _next_seq(self) -> int:
        self._counter += 1
        return self.incarnation * 2**32 + self._counter

    def _send(
        self,
        sock: Socket | None,
        kind: Kind,
        seq: int,
        *,
        epoch: int | None = None,
        meta: dict[str, Any] | None = None,
        arrays: tuple[npt.NDArray[Any], ...] = (),
        corrupt: bool = False,
    ) -> None:
        # Only messages that fit their schema leave a channel (MetaError: a bug here).
        msgs.parse_from_channel(kind, meta or {})
        meta = {**(meta or {}), SENT_FIELD: self._clock()}
        if self._link is not None:
            meta[LINK_FIELD] = self._link
        frames = encode(
            kind, epoch=self.epoch if epoch is None else epoch, seq=seq, channel=self.name,
            meta=meta, arrays=arrays,
        )
        if corrupt and len(frames) > 1:
            bad = bytearray(frames[1])
            if bad:
                bad[0] ^= 0xFF  # after the CRC was computed: the receiver must reject it
            frames[1] = bytes(bad)
        if self._peer is None or sock is None:
            return  # no daemon has spoken yet: nobody to send to
        try:
            send_message(sock, frames, identity=self._peer, flags=zmq.NOBLOCK)
        except zmq.ZMQError:
            # The daemon is not connected (any more): the deadline turns this into a
            # DeadlineMiss, and heartbeats resume once it reconnects.
            self.log.debug("send_dropped", kind=kind.value)

    def _register(self, sock: Socket | None) -> None:
        self._send(sock, Kind.REGISTER, self._next_seq(), meta={
            "variant": self._variant_text(),
            "pid": os.getpid(),
            "device": -1 if self.chan.gpu is None else self.chan.gpu,
            "incarnation": self.incarnation,
        })

    def _heartbeat(self, sock: Socket | None) -> None:
        # Dropped weights' counts stay in the totals, which never go down in an incarnation.
        corrected = self._ecc_dropped[0] + sum(
            getattr(w, "corrected_total", 0) for w in self._weights.values())
        uncorrectable = self._ecc_dropped[1] + sum(
            getattr(w, "uncorrectable_total", 0) for w in self._weights.values())
        self._send(sock, Kind.HEARTBEAT, self._next_seq(), meta={
            "state": "UP",
            "uptime_s": self._clock() - self._started,
            "incarnation": self.incarnation,
            "ecc_corrected": int(corrected),
            "ecc_uncorrectable": int(uncorrectable),
        })

    def _loop(self, sock: Socket) -> None:
        interval = self.config.timing.heartbeat_interval_s
        # TimingConfig.spin_s, in process mode only: a stream channel is a thread of the
        # daemon, and its spinning would hold the interpreter the daemon's loop needs.
        spin = self.config.timing.spin_s if self._exit_process is not None else 0.0
        last_message = 0.0  # time.monotonic() at the end of the last message's handling
        next_hb = self._clock()
        while not (self._stop.is_set() or self._stop_signalled):
            now = self._clock()
            if self._parent_pid is not None and os.getppid() != self._parent_pid:
                self.log.warning("daemon_gone", parent_pid=self._parent_pid)
                return
            if now >= next_hb:
                if not self._faults.hang:
                    self._heartbeat(sock)
                if len(self._imports):
                    self._imports.close_idle()  # a client that left: its buffers go
                next_hb = now + interval
            timeout_ms = max(0, int((next_hb - self._clock()) * 1000))
            got = recv_message(sock, limits=self._limits, timeout_ms=timeout_ms,
                               spin_to=last_message + spin if spin > 0 else 0.0)
            if got is None:
                continue
            msg = got.message
            if self._link is not None and not link_ok(msg.meta, self._link):
                self.foreign_dropped += 1
                self.log.warning("foreign_message_dropped", kind=msg.kind.value,
                                 count=self.foreign_dropped)
                continue
            if got.identity is not None and got.identity != self._peer:
                first = self._peer is None
                self._peer = got.identity
                if first:
                    self._register(sock)
            if msg.kind is Kind.CONTROL:
                if self._control(sock, msg):
                    return
            elif msg.kind is Kind.REQUEST and not self._faults.hang:
                self._request(sock, msg)
            if spin > 0:  # the window runs from the end of this message's handling
                last_message = time.monotonic()

    def _control(self, sock: Socket | None, msg: Message) -> bool:
        """Apply one control message; True means leave the loop."""
        command = msg.meta.get("command")
        args = msg.meta.get("args")
        if command == "stop":
            return True
        if command == "clear":
            self._faults.clear()
            self.log.info("faults_cleared")
        elif command == "inject" and isinstance(args, str):
            try:
                self._faults.inject(args)
            except SafemonError as exc:
                self.log.warning("inject_refused", error=str(exc))
                return False
            self.log.warning("fault_injected", fault=args)
            if self._faults.crash:
                self._crash()
        elif self._faults.hang:
            return False  # hung: only clear/stop/inject get through
        elif command == "weight" and isinstance(args, str) and len(msg.arrays) == 1:
            stored = self._store_weight(args, msg.arrays[0])
            # Acknowledged delivery: the daemon waits for this before the channel votes.
            self._send(sock, Kind.EVENT, self._next_seq(), epoch=msg.epoch, meta={
                "event": "weight", "weight_id": args[:64], "ok": stored})
        elif command == "drop_weight" and isinstance(args, str):
            held, graphs = self._forget_weight(args)
            self.log.info("weight_dropped", weight_id=args[:64], held=held, graphs=graphs)
        elif command == "scrub":
            corrected, uncorrectable = self._scrub()
            self._send(sock, Kind.EVENT, self._next_seq(), epoch=msg.epoch, meta={
                "event": "scrub", "buffer": "weights", "corrected": corrected,
                "uncorrectable": uncorrectable, "count": corrected + uncorrectable,
            })
        return False

    def _scrub(self) -> tuple[int, int]:
        """One scrub command: patrol the resident weights, from where the last one stopped,
        for at most `_scrub_slice_s` (then the loop heartbeats and takes the next message,
        a self-test say); returns (words corrected, new uncorrectable words). On a GPU every
        weight is patrolled at once (a kernel each). A host weight (NumPy backend: tens of
        ms per MiB) is patrolled `SCRUB_CHUNK_WORDS` at a time, so that one scrub command
        never keeps the loop for much longer than the slice: a full patrol of large host
        weights then takes several scrub intervals (docs/ECC.md, "Scrubbing")."""
        names = [n for n, w in self._weights.items() if isinstance(w, ProtectedArray)]
        if not names:
            return 0, 0
        first = names.index(self._scrub_at) if self._scrub_at in names else 0
        end = self._clock() + self._scrub_slice_s
        corrected = uncorrectable = 0
        for step in range(len(names)):
            name = names[(first + step) % len(names)]
            w = self._weights[name]
            assert isinstance(w, ProtectedArray)
            while True:
                res, done = w.scrub_part(SCRUB_CHUNK_WORDS)
                corrected += res.corrected
                uncorrectable += res.new_uncorrectable
                if done:
                    break
                if self._clock() >= end:  # resume inside this weight next time
                    self._scrub_at = name
                    return corrected, uncorrectable
            if self._clock() >= end:
                self._scrub_at = names[(first + step + 1) % len(names)]
                return corrected, uncorrectable
        self._scrub_at = names[first]
        return corrected, uncorrectable

    def _crash(self) -> None:
        if self._exit_process is not None:
            self._exit_process()
        raise _Crash()

    def _forget_weight(self, weight_id: str) -> tuple[bool, int]:
        """Drop the copy of `weight_id` this channel holds, if any: its ECC counts go into
        the dropped totals (the heartbeat's totals never go down within an incarnation),
        and the captured step graphs that hold it go with it. Returns (whether it was held,
        how many graphs were dropped)."""
        dropped = self._weights.pop(weight_id, None)
        if dropped is None:
            return False, 0
        self._ecc_dropped = (
            self._ecc_dropped[0] + int(getattr(dropped, "corrected_total", 0)),
            self._ecc_dropped[1] + int(getattr(dropped, "uncorrectable_total", 0)))
        graphs = self._graphs.drop_holding(dropped) if self._graphs is not None else 0
        return True, graphs

    def _store_weight(self, weight_id: str, w: npt.NDArray[Any]) -> bool:
        """Keep `w` resident under `weight_id`; False (refused) if its content does not
        match the id or it is not a float32 matrix. A copy already held under that id (one
        whose `drop_weight` never arrived, and the weight was registered again) is forgotten
        first, as a drop would (`_forget_weight`)."""
        if w.dtype != np.float32 or w.ndim != 2:
            return False
        host = np.array(w, dtype=np.float32, order="C", copy=True)
        if weight_id_of(host) != weight_id:
            # Weight ids are content addresses: a weight under another's id is refused.
            self.log.error("weight_content_mismatch", weight_id=weight_id[:32])
            return False
        self._forget_weight(weight_id)
        try:
            if self.config.weights.ecc:
                self._weights[weight_id] = self._protect(host, name=f"w-{weight_id}")
            else:
                self._weights[weight_id] = self._to_device(host)
        except Exception as exc:  # e.g. out of device memory: refused, and said so
            self.log.error("weight_store_failed", weight_id=weight_id[:32], error=repr(exc)[:200])
            return False
        return True

    def _request(self, sock: Socket | None, msg: Message) -> None:
        """Handle one REQUEST to its end and send its RESULT (after the delay an injected
        `slow` fault adds)."""
        reply = run_steps(self._request_steps(msg))
        if reply.delay_s > 0:
            self._stop.wait(reply.delay_s)
        self._send(sock, Kind.RESULT, msg.seq, epoch=msg.epoch, meta=reply.meta,
                   arrays=reply.arrays, corrupt=reply.corrupt)

    def _request_steps(self, msg: Message) -> Generator[None, None, Reply]:
        """A generator that handles one REQUEST and returns its `Reply`. A device-resident
        request yields once, after its work is queued on this channel's stream and before
        the wait (`safemon.channels.inline` queues every channel's work before waiting on
        any); everything else runs without yielding."""
        job = msg.meta.get("job", "live")
        self._sm_frame: npt.NDArray[np.uint32] | None = None
        meta: dict[str, Any] = {"job": job, "variant": "", "ok": False, "kernel_seconds": 0.0}
        if "test_id" in msg.meta:
            meta["test_id"] = msg.meta["test_id"]
        arrays_out: tuple[Any, ...] = ()
        try:
            if job in ("live", "model") and "x_ipc" in msg.meta:
                arrays_out = yield from self._run_device(msg, meta)
            elif job == "model" and len(msg.arrays) == 3:
                arrays_out = self._run_model(msg, meta)
            elif job == "selftest" and len(msg.arrays) == 2:
                a, b = msg.arrays
                weight: Any = self._to_device(b)
            elif job == "live" and len(msg.arrays) == 1:
                a = msg.arrays[0]
                wid = msg.meta.get("weight_id")
                if not isinstance(wid, str) or wid not in self._weights:
                    raise SafemonError(f"unknown weight id {wid!r}")
                weight = self._weights[wid]
            else:
                raise SafemonError(f"malformed {job!r} request ({len(msg.arrays)} frames)")
            if not arrays_out and "input_error" not in meta:
                arrays_out = self._run_matmul(a, weight, job, meta)
        except NonFiniteOperandError as exc:
            if exc.operand == "a" and job in ("live", "model"):
                # the request's values, not this channel (a golden pattern's never are):
                # answered and voted on, as a result is
                meta["ok"], meta["input_invalid"] = True, str(exc)[:400]
                arrays_out = ()
            else:  # a weight that passed registration's finite check: this channel failed
                meta["error"] = f"channel_error: {exc}"
        except UncorrectableError as exc:
            meta["error"] = f"ecc_uncorrectable: {exc}"
        except KernelCheckError as exc:  # issue 15: an in-kernel check (RMT) failed: no release
            self.log.error("kernel_check_failed", check=exc.check, tile=exc.tile)
            meta["error"] = f"kernel_check_failed: {exc}"
        except (SafemonError, TypeError, ValueError) as exc:
            meta["error"] = f"channel_error: {exc}"
        except Exception as exc:  # e.g. a CUDA runtime error: this channel failed, say so
            self.log.error("channel_compute_failed", error=repr(exc))
            meta["error"] = f"channel_error: {type(exc).__name__}: {exc}"
        delay = 0.0
        if self._faults.slow:
            deadline_ms = msg.meta.get("deadline_ms")
            wait = float(deadline_ms) / 1000.0 if isinstance(deadline_ms, int | float) else 0.0
            delay = wait + self.config.timing.request_deadline_s * 0.5
        corrupt = self._faults.corrupt_frame and bool(arrays_out)
        self._faults.corrupt_frame = self._faults.corrupt_frame and not corrupt
        arrays: tuple[Any, ...] = arrays_out if meta["ok"] else ()
        if arrays and self._sm_frame is not None:
            arrays += (self._sm_frame,)
        self._sm_frame = None
        return Reply(meta, arrays, corrupt, delay)

    def _run_matmul(self, a: Any, weight: Any, job: Any, meta: dict[str, Any]
                    ) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.uint32]]:
        """One product (live or self-test) with the injected data faults applied; fills
        `meta`'s variant, kernel_seconds and ok."""
        variant = self.chan.variant.to_variant(int(a.shape[0]), int(weight.shape[1]),
                                               int(a.shape[1]))
        t0 = time.perf_counter()
        if job == "selftest" and self.backend.on_device:
            res = self._run_recording_sm(a, weight, variant, meta)
        else:
            res = self._run(a, weight, variant)
        meta["kernel_seconds"] = time.perf_counter() - t0
        c, es = res
        self._faults.apply(c, es)
        meta["variant"] = variant.name
        meta["ok"] = True
        return c, es

    def _run_device(self, msg: Message, meta: dict[str, Any]
                    ) -> Generator[None, None, tuple[npt.NDArray[np.uint64], ...]]:
        """A generator (yields once, between queuing and waiting): device-resident work
        (docs/PROTOCOL.md section 11): read x from the client's input buffer, compute on this channel's device, write the output into this channel's slot
        of the client's output buffer, and return only the digest frame: live [C, ES, x],
        model [out, ES_0, h_1, ..., x]. When the buffers cannot be read or written, or the x
        read does not have the request's `x_digest`, sets `meta["input_error"]` (ok, no
        frame): the daemon votes on that answer too. The digest of x is taken by the copy
        that brings x into this channel's memory, queued with the product, so it is checked
        when the wait returns, before anything is answered, not before the kernels run
        (that would cost a second wait per request). Fills `meta`'s variant,
        kernel_seconds and ok."""
        model = msg.meta.get("job") == "model"
        work = (msgs.ModelWork if model else msgs.WorkRequest).parse(msg.meta)
        meta["variant"] = self._variant_text()
        if (not self.backend.on_device or work.x_ipc is None or work.x_rows is None
                or work.x_cols is None or work.out_ipc is None or work.out_offset is None):
            meta["ok"] = True
            meta["input_error"] = ("this channel computes on the host (numpy backend)"
                                   if not self.backend.on_device else "incomplete device fields")
            return ()
        self._busy_s = 0.0
        try:
            steps = self._device_model(msg, work) if model else self._device_product(work, meta)
            digests = yield from self._on_stream(steps)
        except Exception as exc:
            self._stream.synchronize()  # nothing queued may still use an import
            if not isinstance(exc, DeviceInputError):
                raise
            meta["ok"] = True  # the client's buffers could not be read or written
            meta["input_error"] = str(exc)[:400]
            return ()
        meta["kernel_seconds"] = self._busy_s
        meta["ok"] = True
        if work.x_digest is not None and digests[-1] != parse_digest(work.x_digest):
            # The x this channel read is not the client's: say so instead of answering the
            # digests of a product on it (the daemon refuses the request either way).
            meta["input_error"] = (f"the x this channel read has {DIGEST_NAME} "
                                   f"{digest_hex(digests[-1])}, the request's x_digest is "
                                   f"{work.x_digest}: the input buffer changed before it was read")
            return ()
        return (np.array(digests, dtype=np.uint64),)

    def _on_stream(self, steps: Generator[None, None, list[int]]
                   ) -> Generator[None, None, list[int]]:
        """Run each part of `steps` (between its yields) with this channel's stream current
        and its own page-locked read-back buffers (`safemon.kernels.pinned.lane`), and yield
        between the parts: nothing of a suspended step stays current on the thread. Adds
        the time spent inside the parts to `self._busy_s` (seconds): a channel's
        `kernel_seconds` counts its own work, not the other channels' in between."""
        while True:
            t0 = time.perf_counter()
            try:
                with self._stream, lane(self.name):
                    next(steps)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]
            finally:
                self._busy_s += time.perf_counter() - t0
            yield

    # A device step waits once, and its kernels run with no host or peer copy between them
    # (which channels time-sliced on one GPU pay for dearly: scripts/channel_step_probe.py;
    # the small memsets of the status and digest buffers aside). With a data fault armed
    # (campaigns) the product is settled before the fault is injected, one more wait.
    # Queued in order on this channel's stream: x from the client's input buffer, the
    # product (or every layer), the output into the client's slot, the digests, and the
    # read-backs of the digests and of the status blocks; the read-back is the wait. A
    # product whose ECC-protected weight had to be corrected comes back recomputed, and its
    # slot and digests are redone. The slot holds the output before the answer leaves: its
    # copy was queued before the read-back.

    def _device_product(self, work: Any, meta: dict[str, Any]) -> Generator[None, None, list[int]]:
        """One device-resident product, a generator that yields between queuing and waiting
        (run by `_on_stream`); returns the digests [C, ES, x]. x is read, and C written, by
        copy kernels that digest the words they copy (`DigestBatch.add_copy`)."""
        from safemon.kernels.checked import queue_status_reads
        from safemon.kernels.compiler import import_cupy
        from safemon.kernels.model_gpu import DigestBatch

        wid = getattr(work, "weight_id", None)
        if not isinstance(wid, str) or wid not in self._weights:
            raise SafemonError(f"unknown weight id {wid!r}")
        weight = self._weights[wid]
        n = int(weight.shape[1])
        variant = self.chan.variant.to_variant(work.x_rows, n, work.x_cols)
        meta["variant"] = variant.name
        source = self._imports.view(work.x_ipc, 0, (work.x_rows, work.x_cols), "x")
        slot = self._imports.view(work.out_ipc, work.out_offset, (work.x_rows, n),
                                  "the output slot")

        def queue(_prepared: None) -> tuple[Any, Any, Any]:
            x = import_cupy().empty((work.x_rows, work.x_cols), dtype=np.float32)
            batch = DigestBatch(3)
            batch.add_copy(source, x)
            pending = run_variant(x, weight, variant, "cupy", wait=False)
            if self._data_fault_armed():
                # An injected data fault hits the checked product, as on the host path (its
                # hook reads C back anyway): settle first, then inject.
                pending = pending.wait()
                self._model_fault(0, pending.c, pending.es)
            batch.add_copy(pending.c, slot)
            batch.add(pending.es)
            batch.queue_read()
            return batch, pending, queue_status_reads([pending.status] if pending.pending else [])

        storage = getattr(weight, "storage", (weight,))
        batch, pending, reads = self._queue(
            work.x_rows, (work.x_cols, n),
            lambda: ("product", wid, id(weight), *(id(a) for a in storage), variant.name,
                     int(source.data.ptr), int(slot.data.ptr), work.x_rows, work.x_cols, n),
            (weight, *storage), queue)
        yield  # queued: the wait may come after other channels' work is queued too
        (x_d, _), (c_d, _), (es_d, _) = batch.values()
        # Raises when a check failed: nothing is released.
        r = pending.wait(reads.reports()[0] if pending.pending else None)
        if r.c is not pending.c:  # recomputed on the corrected weight
            again = DigestBatch(2)
            again.add_copy(r.c, slot)
            again.add(r.es)
            (c_d, _), (es_d, _) = again.values()
        return [c_d, es_d, x_d]

    def _queue(self, rows: int, widths: tuple[int, ...] | list[int], key_of: Callable[[], Any],
               keep: tuple[Any, ...], queue: Callable[[Any], Any],
               prepare: Callable[[], Any] = lambda: None) -> Any:
        """Queue one device step on this channel's stream and return what to wait on and
        read: by launching its captured graph (`safemon.channels.step_graphs`) when the step
        is eligible and its key (`key_of()`) has one, capturing it on the key's second
        sight, else by calling `queue(prepare())`. `prepare()` makes what the step reads that
        a graph must keep (a model's device biases); `keep` is what else it must keep alive.
        A capture that fails for another reason than the client's buffers (a
        `DeviceInputError`, raised) is logged, and the key is queued by hand from then on."""
        graphs = self._graphs
        if (graphs is None or self._data_fault_armed() or self.chan.variant.abft
                or not worth_a_graph(rows, widths)):
            return queue(prepare())
        key = key_of()
        step = graphs.get(key)
        if step is None and graphs.seen_before(key):
            prepared = prepare()
            try:
                step = graphs.capture(key, self._stream, lambda: queue(prepared),
                                      keep=(*keep, prepared))
            except DeviceInputError:
                raise
            except Exception as exc:
                self.log.warning("step_graph_capture_failed", error=repr(exc)[:300])
        return queue(prepare()) if step is None else step.launch(self._stream)

    def _layers_of(self, spec: npt.NDArray[Any], biases: npt.NDArray[Any]
                   ) -> tuple[DecodedModel, tuple[bytes, bytes]]:
        """The model a request's frames carry (`safemon.models.decode_model`, validated
        against this channel's weights, with the sizes worked out from it once) and the
        frames' bytes, which key it.

        A model repeats request after request, and decoding it (JSON, one validated bias
        per layer) costs tens of microseconds per channel, so the most recently used
        decodings are kept: at most `DECODED_MODELS` of them, and beyond the newest, no more
        than `DECODED_MODEL_BYTES` of frames (a kept decoding holds its frames' bytes as its
        key, and its layers' biases are views of that key's bias bytes, not another copy
        nor the message's frame). A kept decoding stays valid: weight ids
        are content addresses (a stored id always holds the same shape, and a weight dropped
        and stored again is the same matrix; the core sends no model work on a weight it
        evicted). Frames that fail to decode raise every time (nothing is kept).

        Raises:
            InvalidInputError: as `decode_model`.
        """
        frames = (spec.tobytes(), biases.tobytes())
        if self._decoded:
            # The model of the last request, as a rule: compare the bytes (a memcmp) and hand
            # back the kept key, whose bytes have their hash already (bytes cache it). Fresh
            # bytes were hashed for the look-up on every request: ~35 µs per 64 KiB of
            # biases, per channel (the 4-layer 4096-wide MLP: about 100 µs of a request,
            # evidence/h100-2026-11-25-stop47/, call 1).
            last = next(reversed(self._decoded))
            if last == frames:
                return self._decoded[last], last
        model = self._decoded.get(frames)
        if model is None:
            if biases.dtype == np.float32 and biases.ndim == 1:  # else decode_model refuses it
                biases = np.frombuffer(frames[1], dtype=np.float32)  # read-only, the key's bytes
            model = DecodedModel.decode(spec, biases, self._weights)
            self._decoded[frames] = model
            kept = sum(len(a) + len(b) for a, b in self._decoded)
            while len(self._decoded) > 1 and (len(self._decoded) > DECODED_MODELS
                                              or kept > DECODED_MODEL_BYTES):
                (a, b), _ = self._decoded.popitem(last=False)
                kept -= len(a) + len(b)
        else:
            self._decoded.move_to_end(frames)
        return model, frames

    def _device_model(self, msg: Message, work: Any) -> Generator[None, None, list[int]]:
        """One device-resident whole-model request, a generator like `_device_product`;
        returns its digest frame with the digest of x last. x is copied in first, before
        any kernel; the pass copies its output into the slot (`queue_pass`'s out_into). A
        model request that repeats (same layers and biases, same weights, same buffers) is
        launched as a captured graph, as a product is."""
        from safemon.kernels.compiler import import_cupy
        from safemon.models import run_model_steps
        from safemon.models.forward import device_biases, queue_pass

        cp = import_cupy()
        spec, biases = msg.arrays
        model, frames = self._layers_of(spec, biases)
        layers = model.layers
        rows, cols = work.x_rows, work.x_cols
        slot = self._imports.view(work.out_ipc, work.out_offset, (rows, model.out_cols),
                                  "the output slot")
        source = self._imports.view(work.x_ipc, 0, (rows, cols), "x")
        settle = self._data_fault_armed()

        def copy_x() -> Any:
            x = cp.empty((rows, cols), dtype=np.float32)
            self._imports.read(work.x_ipc, x, self._stream)  # from `source`'s address
            return x

        def queue(dev_biases: list[Any]) -> Any:
            x = copy_x()
            return queue_pass(layers, self._weights, x, self.chan.variant, dev_biases,
                              self._model_fault, out_into=slot, extra_digests=[x],
                              settle=settle)

        used = [self._weights[wid] for wid in model.weight_ids]
        storage = [a for w in used for a in getattr(w, "storage", (w,))]
        queued = self._queue(
            rows, [cols, *model.widths],
            lambda: ("model", *frames, *(id(w) for w in used),
                     *(id(a) for a in storage), int(source.data.ptr), int(slot.data.ptr),
                     rows, cols),
            (*used, *storage), queue,
            prepare=lambda: device_biases(layers))  # uploaded first, kept with a graph
        yield  # queued: the wait may come after other channels' work is queued too
        res = queued.finish()
        if res is None:  # a layer was recomputed on its corrected weight: again, settled
            x = copy_x()
            res = yield from run_model_steps(layers, self._weights, x, self.chan.variant,
                                             "cupy", self._model_fault, out_into=slot,
                                             extra_digests=[x], settle=True)
        return [*res.digest_frame().tolist(), *res.extra_digests]

    def _run_model(self, msg: Message, meta: dict[str, Any]
                   ) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.uint64]]:
        """A whole-model request: frames [x, spec, biases]. Returns the host output and the
        digest frame (`ModelResult.digest_frame`); fills `meta`. Injected data faults hit
        the first product layer, before its epilogue, so they propagate like a real one."""
        from safemon.models import run_model

        x, spec, biases = msg.arrays
        layers = self._layers_of(spec, biases)[0].layers
        t0 = time.perf_counter()
        if self.backend.on_device:
            with self._stream:
                res = run_model(layers, self._weights, x, self.chan.variant, "cupy",
                                self._model_fault)
                out = res.out.get(stream=self._stream)
                self._stream.synchronize()
        else:
            res = run_model(layers, self._weights, np.ascontiguousarray(x), self.chan.variant,
                            "numpy", self._model_fault)
            out = res.out
        meta["kernel_seconds"] = time.perf_counter() - t0
        meta["variant"] = self._variant_text()
        meta["ok"] = True
        return np.array(out, dtype=np.float32, order="C", copy=True), res.digest_frame()

    def _data_fault_armed(self) -> bool:
        """An injected data fault (stuck bit, flipped bit of C or ES) waits for a result."""
        f = self._faults
        return bool(f.stuck_armed or f.bitflip_c or f.bitflip_es)

    def _model_fault(self, product: int, c: Any, es: Any) -> None:
        """The `LayerHook` of model passes: an armed data fault hits the first product."""
        if product != 0 or not self._data_fault_armed():
            return
        f = self._faults
        if isinstance(c, np.ndarray):
            f.apply(c, es)
            return
        hc, hes = c.get(), es.get()  # CuPy: only while a fault is armed
        f.apply(hc, hes)
        c.set(hc)
        es.set(hes)

    def _to_device(self, x: npt.NDArray[Any]) -> Any:
        """`x` on this channel's device. On CuPy the copy is issued on the channel's own
        stream and waited for: the stream is non-blocking, so it would not order itself after
        work on the legacy default stream."""
        if self.backend.on_device:
            from safemon.kernels.compiler import import_cupy

            with self._stream:
                dev = import_cupy().asarray(x)
            self._stream.synchronize()
            return dev
        return np.ascontiguousarray(x)

    def _run_recording_sm(self, a: npt.NDArray[Any], weight: Any, variant: Any,
                          meta: dict[str, Any]) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.uint32]]:
        """A self-test on the GPU through the self-test build: also keeps the SM id of every
        block for the RESULT's third frame and puts the device's SM count into `meta`."""
        from safemon.kernels.compiler import import_cupy
        from safemon.kernels.gpu import gpu_matmul_recording_sm

        cp = import_cupy()
        with self._stream:
            c_d, es_d, sm_d = gpu_matmul_recording_sm(cp.asarray(a), weight, variant)
            c, es, sm = (x.get(stream=self._stream) for x in (c_d, es_d, sm_d))
            self._stream.synchronize()
        self._sm_frame = np.array(sm, dtype=np.uint32, order="C", copy=True)
        meta["sm_count"] = int(cp.cuda.Device().attributes["MultiProcessorCount"])
        return (np.array(c, dtype=np.float32, order="C", copy=True),
                np.array(es, dtype=np.uint32, order="C", copy=True))

    def _run(self, a: npt.NDArray[Any], weight: Any, variant: Any) -> tuple[
        npt.NDArray[np.float32], npt.NDArray[np.uint32]
    ]:
        """Run the variant; returns host copies of C and ES (writable, C-contiguous)."""
        if self.backend.on_device:
            from safemon.kernels.compiler import import_cupy

            with self._stream:  # the upload, kernel and download are ordered on this stream
                res = run_variant(import_cupy().asarray(a), weight, variant, "cupy")
                c, es = res.c.get(stream=self._stream), res.es.get(stream=self._stream)
                self._stream.synchronize()
        else:
            res = run_variant(np.ascontiguousarray(a), weight, variant, "numpy")
            c, es = res.c, res.es
        return (
            np.array(c, dtype=np.float32, order="C", copy=True),
            np.array(es, dtype=np.uint32, order="C", copy=True),
        )


def main(argv: list[str] | None = None) -> int:
    """Process-mode entry point: `python -m safemon.channels.worker --channel NAME
    --incarnation N --epoch E --daemon-pid PID`, the resolved config as JSON on stdin (no
    pickle). Exits 0 once its loop ends (a stop, or its daemon's death noticed in time), and
    `ORPHAN_EXIT` when its daemon is gone and the loop did not end within `ORPHAN_GRACE_S`."""
    parser = argparse.ArgumentParser(prog="safemon-channel")
    parser.add_argument("--channel", required=True)
    parser.add_argument("--incarnation", type=int, required=True)
    parser.add_argument("--epoch", type=int, required=True)
    parser.add_argument("--daemon-pid", type=int, default=None,
                        help="the daemon's pid (default: the parent at start)")
    args = parser.parse_args(argv)
    daemon_pid = os.getppid() if args.daemon_pid is None else args.daemon_pid
    # Ask for SIGTERM at the daemon's death first, then check that it is still our parent:
    # a daemon that died before the prctl would otherwise never be noticed by the signal.
    _die_with_parent()
    if os.getppid() != daemon_pid:
        return ORPHAN_EXIT
    token, _, config_json = sys.stdin.read().partition("\n")
    config = Config.model_validate_json(config_json)
    from safemon.logging import configure_logging

    configure_logging(config.logging.format, config.logging.level, role="channel")
    ctx: Context = zmq.Context()
    worker = ChannelWorker(
        ctx, config, args.channel, incarnation=args.incarnation, epoch=args.epoch,
        exit_process=lambda: os._exit(70), link=token, parent_pid=daemon_pid,
    )
    import signal

    signal.signal(signal.SIGTERM, lambda *_: worker.stop_from_signal())
    # Ctrl-C reaches the whole process group: the daemon stops its channels itself, so a
    # channel ignores SIGINT (no KeyboardInterrupt traceback from every channel).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=_exit_when_orphaned, args=(daemon_pid, worker),
                     name="safemon-orphan-watch", daemon=True).start()
    try:
        worker.run()
    finally:
        ctx.term()
    return 0


@dataclass(frozen=True)
class DecodedModel:
    """A model request's steps as a channel keeps them (`ChannelWorker._layers_of`), with
    the sizes its device path needs worked out once at decoding, not per request.

    Attributes:
        layers: the steps, validated against the channel's weights (`decode_model`).
        out_cols: the output's columns per input row (its rows are the input's).
        widths: per step, float32 elements of its output per input row
            (`safemon.models.forward.activation_widths`).
        weight_ids: the weights the products read, each once, in layer order.
    """

    layers: list[Any]
    out_cols: int
    widths: tuple[int, ...]
    weight_ids: tuple[str, ...]

    @classmethod
    def decode(cls, spec: npt.NDArray[Any], biases: npt.NDArray[Any],
               weights: dict[str, Any]) -> DecodedModel:
        """Decode the frames against `weights` (id → array with a `shape`); the errors of
        `safemon.models.decode_model`. Weight ids are content addresses, so the sizes stay
        true while the decoding is kept."""
        from safemon.models import decode_model
        from safemon.models.forward import activation_widths, output_columns
        from safemon.models.layers import weight_ids

        layers = decode_model(spec, biases, {wid: tuple(w.shape) for wid, w in weights.items()})
        return cls(layers, output_columns(layers, weights),
                   tuple(activation_widths(layers, weights)),
                   tuple(dict.fromkeys(weight_ids(layers))))


#: Decoded models a channel keeps (`ChannelWorker._layers_of`), and the bytes of their
#: frames it keeps beyond the most recent one.
DECODED_MODELS = 16
DECODED_MODEL_BYTES = 64 << 20

ORPHAN_EXIT = 71
"""Exit status of a channel process whose daemon died."""

ORPHAN_POLL_S = 0.25
"""How often a channel process checks that its daemon is still its parent (seconds)."""

ORPHAN_GRACE_S = 2.0
"""After its daemon is gone: how long the loop may take to stop before the process ends
itself (seconds). The loop can be busy in a long product, a warm-up or `ctx.term()`."""


def _exit_when_orphaned(daemon_pid: int, worker: ChannelWorker) -> None:
    """Watch thread of a channel process: once the daemon is no longer the parent (it died
    and the process was re-parented), stop the worker and, if it has not ended within
    `ORPHAN_GRACE_S`, end the process with `ORPHAN_EXIT`. A channel holds the client's
    weights: it must not outlive its daemon, whatever its loop is doing."""
    while os.getppid() == daemon_pid:
        time.sleep(ORPHAN_POLL_S)
    worker.stop()
    time.sleep(ORPHAN_GRACE_S)
    os._exit(ORPHAN_EXIT)


def _die_with_parent() -> None:
    """Linux: ask for SIGTERM when the daemon dies (PR_SET_PDEATHSIG). The signal follows
    the daemon's thread that spawned this process, so `_exit_when_orphaned` is the check
    that counts; the signal only makes the common case quicker."""
    import ctypes
    import ctypes.util
    import signal

    name = ctypes.util.find_library("c")
    if name is None or not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(name, use_errno=True).prctl(1, int(signal.SIGTERM), 0, 0, 0)


if __name__ == "__main__":
    raise SystemExit(main())
