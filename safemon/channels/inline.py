"""Inline channels: replicas driven by the daemon's own loop thread (placement "inline").

A process channel costs every request two ZeroMQ hops and a wake-up of an idle process per
channel, and three processes on one GPU are time-sliced by the driver; a stream channel is a
thread of the daemon that competes with the daemon's loop for the interpreter. An inline
channel has neither: the daemon hands it its messages as objects (no encoding, no CRC, no
socket) and runs its work itself, in lockstep with the other inline channels:

1. every inline channel with a message takes it, and a device-resident request queues its
   whole device step on the channel's own CUDA stream (its step generator,
   `ChannelWorker._request_steps`, stops before the wait);
2. then each suspended request is resumed in turn: its wait, its status and digest
   read-backs, its RESULT, which the daemon hands to the core at once (`run_round`'s
   `after_finish`).

So the channels' kernels run side by side on the GPU, and the daemon waits on them once
each, back to back. A vote that two results decide (2oo3) is answered before the third
channel's wait, as it is when the third channel is a slower process. Each channel keeps
what makes it a channel: its own weights (ECC words included), its own variant, stream,
page-locked read-back buffers (`safemon.kernels.pinned.lane`), injected faults and link
token, and the daemon treats its messages exactly like a socket channel's
(`Daemon._channel_message`: the supervisor's liveness, the core's vote).

What it gives up (docs/RUNTIME.md, "Placements"):
- Common cause: the inline channels share the daemon's process and thread. A fault that
  kills or hangs that process takes every channel and the voter with it: the systemd
  watchdog, not the voter, sees it. A fault that corrupts host memory can reach all of
  them. Stream channels share the same process, so this is no new exposure for them.
- A host-memory request (a NumPy x) is computed in turn, channel after channel, with a
  wait each: only device-resident requests overlap.
- A channel never runs on its own: while one computes, the daemon's loop does nothing
  else. A `hang` fault drops the requests it gets and stops its heartbeats, as a hung
  process does; a `slow` fault holds its RESULT back for the time it would have slept,
  without blocking the loop; `crash` ends the incarnation (alive() turns False).
"""

from __future__ import annotations

import collections
import contextlib
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any

import numpy.typing as npt
import structlog

from safemon.channels.link import LINK_FIELD, link_ok
from safemon.channels.worker import ChannelWorker, Reply, _Crash
from safemon.config import Config
from safemon.transport import Kind, Message
from safemon.transport import messages as msgs
from safemon.transport.wire import PROTOCOL_VERSION, LocalHeader

__all__ = ["InlineChannel", "InlineChannels", "InlineHandle", "inline_message"]

log = structlog.get_logger("safemon.inline")


def inline_message(kind: Kind, *, epoch: int, seq: int, channel: str,
                   meta: dict[str, Any], arrays: tuple[npt.NDArray[Any], ...] = (),
                   parsed: object | None = None) -> Message:
    """A `Message` as `decode` would give it, without the wire: the arrays are read-only
    views (the receiver may keep them, and must not write to the sender's buffers).

    Both sides are safemon's own code in one process: the header is a `LocalHeader`, built
    unvalidated; what a channel sends is still checked against its schema by
    `_InlineWorker._send` (`parse_from_channel`), whose typed result travels as `parsed`
    (the daemon does not parse it again), and what the daemon sends was built from the
    schemas' `to_meta()`."""
    views = []
    for a in arrays:
        v = a.view()
        v.flags.writeable = False
        views.append(v)
    return Message(LocalHeader(PROTOCOL_VERSION, epoch, seq, channel, kind, (), meta), views,
                   parsed)


class _InlineWorker(ChannelWorker):
    """A `ChannelWorker` whose messages go into `outbox` instead of a socket."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.outbox: collections.deque[Message] = collections.deque()
        #: RESULTs spoilt by an injected `corrupt_frame` (the daemon counts them as bad CRCs,
        #: as its transport would have)
        self.corrupted = 0

    def _send(self, sock: Any, kind: Kind, seq: int, *, epoch: int | None = None,
              meta: dict[str, Any] | None = None, arrays: tuple[npt.NDArray[Any], ...] = (),
              corrupt: bool = False) -> None:
        parsed = msgs.parse_from_channel(kind, meta or {})  # only messages that fit their schema
        if corrupt:
            self.corrupted += 1  # the frame would fail its CRC at the daemon: never arrives
            return
        # No send stamp (`safemon.channels.sent_stamp`): an inline channel runs only when the
        # loop runs it, so what it sent counts from when the loop takes it, as it did before.
        if self._link is not None:
            meta = {**(meta or {}), LINK_FIELD: self._link}
        self.outbox.append(inline_message(kind, epoch=self.epoch if epoch is None else epoch,
                                          seq=seq, channel=self.name, meta=meta or {},
                                          arrays=arrays, parsed=parsed))


@dataclass
class _Suspended:
    """A REQUEST whose device work is queued and not yet waited for."""

    msg: Message
    steps: Generator[None, None, Reply]


class InlineChannel:
    """One inline channel's incarnation. Only the daemon's loop thread calls it.

    Args:
        config: the deployment.
        name: the channel's name in `config.channels`.
        incarnation, epoch, link: as for `ChannelWorker`.
        clock: monotonic seconds (the daemon's clock).
    """

    def __init__(self, config: Config, name: str, *, incarnation: int, epoch: int,
                 link: str | None, clock: Callable[[], float] = time.monotonic) -> None:
        self.name = name
        self.incarnation = incarnation
        self._clock = clock
        self.worker = _InlineWorker(None, config, name, incarnation=incarnation, epoch=epoch,
                                    clock=clock, link=link)
        self._inbox: collections.deque[Message] = collections.deque()
        self._suspended: _Suspended | None = None
        self._held: list[tuple[float, Message]] = []  # RESULTs a `slow` fault holds back
        self._interval = config.timing.heartbeat_interval_s
        self._next_heartbeat = 0.0
        self.running = False
        self.dropped_foreign = 0

    # ---------------------------------------------------------------- lifecycle

    def start(self) -> None:
        """Set up the device, compile and run every kernel once (`_warm_up`, seconds the
        first time in a process), and queue the REGISTER. Blocks the caller meanwhile. A
        failure (out of device memory, say) is logged and leaves the incarnation not
        running, which the supervisor sees as a crash: it never reaches the daemon's loop."""
        try:
            self.worker._setup_device()
            self.worker._warm_up()
        except Exception:
            log.exception("inline_channel_start_failed", channel=self.name,
                          incarnation=self.incarnation)
            return
        self.running = True
        self.worker._register(None)
        self._next_heartbeat = self._clock() + self._interval

    def stop(self) -> None:
        """End this incarnation: nothing queued is run, nothing more is sent."""
        if self.running:
            self.running = False
            self._inbox.clear()
            self._held.clear()
            self.worker.outbox.clear()
            if self._suspended is not None:
                self._suspended.steps.close()
                self._suspended = None
            with contextlib.suppress(Exception):  # a broken device must not stop the daemon
                if self.worker._stream is not None:
                    self.worker._stream.synchronize()  # nothing queued may still run
                if len(self.worker._imports):
                    self.worker._imports.close_all()

    def _fail(self, what: str) -> None:
        """An exception escaped this channel's code: log it and end the incarnation (the
        supervisor sees a crash and restarts it), as a channel process would die."""
        log.exception("inline_channel_failed", channel=self.name, incarnation=self.incarnation,
                      during=what)
        self.stop()

    # ---------------------------------------------------------------- messages

    def deliver(self, msg: Message) -> bool:
        """Queue a message from the daemon; False when this incarnation no longer runs."""
        if not self.running:
            return False
        self._inbox.append(msg)
        return True

    @property
    def has_work(self) -> bool:
        """Messages wait, or a request is suspended."""
        return self.running and (bool(self._inbox) or self._suspended is not None)

    def launch(self) -> None:
        """Handle queued messages in arrival order until a request suspends (its device work
        queued) or none is left."""
        w = self.worker
        while self.running and self._suspended is None and self._inbox:
            msg = self._inbox.popleft()
            if w._link is not None and not link_ok(msg.meta, w._link):
                self.dropped_foreign += 1
                log.warning("foreign_message_dropped", channel=self.name, kind=msg.kind.value)
                continue
            try:
                if msg.kind is Kind.CONTROL:
                    if w._control(None, msg):  # "stop"
                        self.stop()
                elif msg.kind is Kind.REQUEST and not w._faults.hang:
                    steps = w._request_steps(msg)
                    try:
                        next(steps)
                    except StopIteration as done:
                        self._answer(msg, done.value)
                    else:
                        self._suspended = _Suspended(msg, steps)
            except _Crash:
                log.warning("channel_crash_injected", channel=self.name)
                self.stop()
            except Exception:
                self._fail(msg.kind.value)

    def finish(self) -> None:
        """Resume the suspended request (its wait and read-backs) to its RESULT."""
        s, self._suspended = self._suspended, None
        if s is None or not self.running:
            return
        try:
            while True:
                try:
                    next(s.steps)
                except StopIteration as done:
                    self._answer(s.msg, done.value)
                    return
        except Exception:
            self._fail("request")

    def _answer(self, msg: Message, reply: Reply) -> None:
        corrupted = self.worker.corrupted
        self.worker._send(None, Kind.RESULT, msg.seq, epoch=msg.epoch, meta=reply.meta,
                          arrays=reply.arrays, corrupt=reply.corrupt)
        if reply.delay_s > 0 and self.worker.corrupted == corrupted:
            self._held.append((self._clock() + reply.delay_s, self.worker.outbox.pop()))

    def tick(self, now: float) -> None:
        """Heartbeat when due (not while hung), and close the imports of clients gone."""
        if not self.running or now < self._next_heartbeat:
            return
        self._next_heartbeat = now + self._interval
        try:
            if not self.worker._faults.hang:
                self.worker._heartbeat(None)
            if len(self.worker._imports):
                self.worker._imports.close_idle()
        except Exception:
            self._fail("heartbeat")

    def next_due(self) -> float | None:
        """When a held RESULT or the next heartbeat is due (None: not running)."""
        if not self.running:
            return None
        return min([self._next_heartbeat, *(t for t, _ in self._held)])

    def take(self, now: float) -> list[Message]:
        """The messages this channel has sent, held ones once due."""
        out = list(self.worker.outbox)
        self.worker.outbox.clear()
        if self._held:
            due = [m for t, m in self._held if t <= now]
            self._held = [(t, m) for t, m in self._held if t > now]
            out += due
        return out

    def take_corrupted(self) -> int:
        """RESULTs spoilt by `corrupt_frame` since the last call."""
        n, self.worker.corrupted = self.worker.corrupted, 0
        return n


class InlineChannels:
    """The daemon's inline channels, the current incarnation of each by name. The
    launcher adds incarnations (`install`); the daemon delivers messages, runs them in
    lockstep (`run_round`) and collects what they sent (`take`)."""

    def __init__(self, names: tuple[str, ...]) -> None:
        self.names = frozenset(names)
        self._order = names  # configured order: rounds finish the channels in it
        self._current: dict[str, InlineChannel] = {}

    def install(self, channel: InlineChannel) -> None:
        """Make `channel` the current incarnation of its name (the old one is stopped)."""
        old = self._current.get(channel.name)
        if old is not None and old is not channel:
            old.stop()
        self._current[channel.name] = channel

    def deliver(self, name: str, kind: Kind, *, epoch: int, seq: int, meta: dict[str, Any],
                arrays: tuple[npt.NDArray[Any], ...] = ()) -> bool:
        """Queue a message for channel `name`; False when it has no running incarnation (a
        socket send to a channel that is down fails the same way)."""
        ch = self._current.get(name)
        if ch is None:
            return False
        return ch.deliver(inline_message(kind, epoch=epoch, seq=seq, channel=name, meta=meta,
                                         arrays=arrays))

    @property
    def has_work(self) -> bool:
        """Some channel has a message waiting or a request suspended."""
        return any(ch.has_work for ch in self._current.values())

    def run_round(self, after_finish: Callable[[], object] | None = None) -> None:
        """One lockstep round: every channel launches its next request (handling the
        messages queued before it), then each suspended request is finished in turn.

        `after_finish`, when given, is called after each channel's finish: the daemon takes
        what every channel has sent so far (that channel's RESULT, RESULTs that other
        channels answered in their launch, held messages now due) and votes on it there,
        so that a vote that two results decide
        (2oo3) is answered before the third channel's wait and read-back. What it does to the
        channels meanwhile (a message delivered, a channel stopped) is seen by this round
        only as a stopped channel's finish doing nothing; new messages wait for the next
        round. Channels launch and finish in configured order, whatever order their
        incarnations were installed in: the first ones are those whose streams go first
        on the GPU (`safemon.channels.stream_priority`), so a 2oo3 quorum is waited for
        before the third channel."""
        chans = [self._current[n] for n in self._order if n in self._current]
        for ch in chans:
            ch.launch()
        for ch in chans:
            ch.finish()
            if after_finish is not None:
                after_finish()

    def tick(self, now: float) -> None:
        """Heartbeats due (`InlineChannel.tick`)."""
        for ch in self._current.values():
            ch.tick(now)

    def next_due(self) -> float | None:
        """The earliest heartbeat or held RESULT due."""
        times = [t for ch in self._current.values() if (t := ch.next_due()) is not None]
        return min(times) if times else None

    def take(self, now: float) -> list[tuple[str, Message]]:
        """(channel, message) for every message the channels sent, in order per channel."""
        return [(ch.name, m) for ch in list(self._current.values()) for m in ch.take(now)]

    def take_corrupted(self) -> int:
        """RESULTs spoilt by `corrupt_frame` since the last call, all channels."""
        return sum(ch.take_corrupted() for ch in self._current.values())


@dataclass
class InlineHandle:
    """A started inline channel (`safemon.channels.launcher.ChannelHandle`)."""

    name: str
    incarnation: int
    channel: InlineChannel

    def alive(self) -> bool:
        return self.channel.running

    def request_stop(self) -> None:
        self.channel.stop()

    def kill(self) -> None:
        self.channel.stop()

    def stop(self, timeout_s: float) -> None:
        self.channel.stop()

