"""Start and stop channel workers: spawned processes, streams (threads) in this process, or
inline channels that the daemon's own loop drives (`safemon.channels.inline`).

Process mode execs a fresh interpreter (`python -m safemon.channels.worker`), the `spawn`
discipline CUDA needs: nothing (no zmq context, no CUDA context) is inherited, and the
resolved config travels as JSON on stdin, never pickled. The child pins its CUDA device
itself (`ChannelConfig.gpu`). Stream mode runs the worker on a thread of this process,
on the caller's zmq context (inproc:// needs one context) and its own CUDA stream. Inline
mode sets the channel up (device, warm-up) in the caller's thread and installs it in
`RealLauncher.inline`, where the daemon finds it.

`Launcher` is the OS effect the supervisor is given (STYLE.md item 9), so the supervisor's
tests can use a fake one.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import structlog

from safemon.channels.inline import InlineChannel, InlineChannels, InlineHandle
from safemon.channels.link import link_token, new_link_key
from safemon.channels.worker import ChannelWorker
from safemon.config import Config
from safemon.transport.sockets import Context

__all__ = [
    "ChannelHandle",
    "InlineHandle",
    "Launcher",
    "ProcessHandle",
    "RealLauncher",
    "StreamHandle",
]

log = structlog.get_logger("safemon.launcher")


class ChannelHandle(Protocol):
    """A started channel."""

    name: str
    incarnation: int

    def alive(self) -> bool:
        """Whether the process / thread still runs."""

    def request_stop(self) -> None:
        """Ask it to stop and return at once (SIGTERM / the worker's stop flag); idempotent."""

    def kill(self) -> None:
        """Force it to stop and return at once (SIGKILL; a thread can only be asked)."""

    def stop(self, timeout_s: float) -> None:
        """Stop it (politely, then forcibly after `timeout_s` seconds); idempotent."""


class Launcher(Protocol):
    """Starts channel `name` as incarnation `incarnation` of daemon epoch `epoch`."""

    def start(self, name: str, incarnation: int, epoch: int) -> ChannelHandle: ...


@dataclass
class ProcessHandle:
    """A channel process started by `RealLauncher`."""

    name: str
    incarnation: int
    proc: subprocess.Popen[bytes]

    def alive(self) -> bool:
        return self.proc.poll() is None

    @property
    def exitcode(self) -> int | None:
        return self.proc.poll()

    def request_stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()  # reaped by a later alive() (poll)

    def stop(self, timeout_s: float) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout_s)


@dataclass
class StreamHandle:
    """A stream channel: a worker thread of this process."""

    name: str
    incarnation: int
    worker: ChannelWorker
    thread: threading.Thread

    def alive(self) -> bool:
        return self.thread.is_alive()

    def request_stop(self) -> None:
        self.worker.stop()

    def kill(self) -> None:
        # A Python thread cannot be killed; it was asked to stop and is abandoned (daemon
        # thread). Say so: a stream channel that ignores stop() is stuck in native code.
        log.error("stream_channel_not_stopping", channel=self.name, incarnation=self.incarnation)
        self.worker.stop()

    def stop(self, timeout_s: float) -> None:
        self.worker.stop()
        self.thread.join(timeout_s)


class RealLauncher:
    """Launch per `config.channels[*].placement`.

    Args:
        config: the resolved deployment.
        ctx: the daemon's zmq context, used only by stream channels.
        link_key: the key of the channel-link tokens (`safemon.channels.link`); None = a
            fresh random one. The daemon reads `link_key` to check what channels send.
        clock: the daemon's monotonic clock, which inline channels share.
    """

    def __init__(self, config: Config, ctx: Context, link_key: bytes | None = None, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        assert config.channels is not None
        self.config = config
        self.ctx = ctx
        self.link_key = new_link_key() if link_key is None else link_key
        self._placement = {c.name: c.placement for c in config.channels}
        self._json = config.model_dump_json().encode()
        self._clock = clock
        #: the inline channels' current incarnations, driven by the daemon's loop
        self.inline = InlineChannels(tuple(c.name for c in config.channels
                                           if c.placement == "inline"))

    def start(self, name: str, incarnation: int, epoch: int) -> ChannelHandle:
        if self._placement[name] == "inline":
            channel = InlineChannel(self.config, name, incarnation=incarnation, epoch=epoch,
                                    link=link_token(self.link_key, name, incarnation),
                                    clock=self._clock)
            self.inline.install(channel)
            channel.start()
            return InlineHandle(name, incarnation, channel)
        if self._placement[name] == "stream":
            worker = ChannelWorker(self.ctx, self.config, name, incarnation=incarnation, epoch=epoch,
                                   link=link_token(self.link_key, name, incarnation))
            thread = threading.Thread(target=self._run_stream, args=(worker,),
                                      name=f"safemon-{name}-{incarnation}", daemon=True)
            thread.start()
            return StreamHandle(name, incarnation, worker, thread)
        argv = [sys.executable, "-m", "safemon.channels.worker", "--channel", name,
                "--incarnation", str(incarnation), "--epoch", str(epoch),
                "--daemon-pid", str(os.getpid())]
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, env=dict(os.environ),
                                close_fds=True, start_new_session=False)
        assert proc.stdin is not None
        # The link token first (one line), then the config: both only on the pipe.
        proc.stdin.write(link_token(self.link_key, name, incarnation).encode() + b"\n" + self._json)
        proc.stdin.close()
        log.info("channel_spawned", channel=name, pid=proc.pid, incarnation=incarnation)
        return ProcessHandle(name, incarnation, proc)

    @staticmethod
    def _run_stream(worker: ChannelWorker) -> None:
        try:
            worker.run()
        except Exception:  # a dead stream is seen by the supervisor as a crash
            log.exception("stream_channel_died", channel=worker.name)
