"""systemd's notify protocol: READY=1, STATUS=, WATCHDOG=1 and STOPPING=1.

Written here (one datagram on an AF_UNIX socket) rather than depending on a library. Every
function is a no-op returning False when the daemon does not run under systemd
(`NOTIFY_SOCKET` unset), so the daemon calls them unconditionally.

- `Notifier.ready()` once the first voting set forms (`Type=notify` units start then).
- `Notifier.status(mode, states)` whenever the mode or a channel state changes: one line,
  e.g. `mode=NORMAL channels up=3/3 (ch0=UP ch1=UP ch2=UP)`, shown by `systemctl status`.
  A repeat of the last line is not sent.
- `Notifier.watchdog_due(now)` / `watchdog()`: keep-alives at half of `WATCHDOG_USEC`.
  `WATCHDOG_PID`, when set, names the process systemd expects them from; any other process
  (e.g. a child that inherited the environment) sends none.
- `Notifier.stopping()` when a drain starts, so systemd shows "deactivating" at once.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from typing import Final

from safemon.states import ChannelState, Mode

__all__ = ["Notifier", "sd_notify", "status_line", "watchdog_interval"]

#: Keep-alive period without WATCHDOG_USEC (the unit asked for notify but no watchdog), s.
_DEFAULT_KEEPALIVE_S: Final = 1.0


def sd_notify(state: str, env: Mapping[str, str] | None = None) -> bool:
    """Send `state` (e.g. "READY=1") to systemd's NOTIFY_SOCKET without ever blocking; False
    when it is not set or the datagram cannot be sent now. An `@` prefix names an abstract
    socket."""
    path = (os.environ if env is None else env).get("NOTIFY_SOCKET")
    if not path:
        return False
    addr = "\0" + path[1:] if path.startswith("@") else path
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
        # Never block the daemon's loop on systemd: a full receive queue (a stalled manager, or
        # more datagrams than net.unix.max_dgram_qlen unread) drops this one instead.
        s.setblocking(False)
        try:
            s.connect(addr)
            s.send(state.encode())
        except OSError:  # BlockingIOError included
            return False
    return True


def watchdog_interval(env: Mapping[str, str] | None = None, pid: int | None = None) -> float | None:
    """Seconds between WATCHDOG=1 keep-alives, or None when none are wanted.

    None without NOTIFY_SOCKET, and when WATCHDOG_PID is set to a pid other than `pid`
    (default: this process). Half of WATCHDOG_USEC when that is a positive integer, as
    sd_watchdog_enabled(3) advises; else `_DEFAULT_KEEPALIVE_S`.
    """
    e = os.environ if env is None else env
    if not e.get("NOTIFY_SOCKET"):
        return None
    wpid = e.get("WATCHDOG_PID", "")
    me = os.getpid() if pid is None else pid
    if wpid and (not wpid.isdigit() or int(wpid) != me):
        return None
    usec = e.get("WATCHDOG_USEC", "")
    return int(usec) / 2e6 if usec.isdigit() and int(usec) > 0 else _DEFAULT_KEEPALIVE_S


def status_line(mode: Mode, states: Mapping[str, ChannelState]) -> str:
    """The STATUS= text: the mode, how many channels are UP, and each channel's state."""
    up = sum(1 for s in states.values() if ChannelState(s) is ChannelState.UP)
    each = " ".join(f"{name}={ChannelState(s).value}" for name, s in states.items())
    return f"mode={Mode(mode).value} channels up={up}/{len(states)} ({each})"


class Notifier:
    """The daemon's side of the protocol, with the environment read once.

    Args:
        env: the environment (default `os.environ`); tests pass their own.
        pid: this process's pid for the WATCHDOG_PID check (default `os.getpid()`).
    """

    def __init__(self, env: Mapping[str, str] | None = None, pid: int | None = None) -> None:
        self._env = dict(os.environ if env is None else env)
        self.interval = watchdog_interval(self._env, pid)
        self._next_watchdog: float | None = None
        self._last_status: str | None = None
        self._ready_sent = False

    def _send(self, state: str) -> bool:
        return sd_notify(state, self._env)

    def ready(self, mode: Mode, states: Mapping[str, ChannelState]) -> bool:
        """READY=1 with the current STATUS=, once; later calls send nothing."""
        if self._ready_sent:
            return False
        self._ready_sent = True
        line = status_line(mode, states)
        self._last_status = line
        return self._send(f"READY=1\nSTATUS={line}")

    def status(self, mode: Mode, states: Mapping[str, ChannelState]) -> bool:
        """STATUS= for the current mode and channel states, unless it repeats the last."""
        line = status_line(mode, states)
        if line == self._last_status:
            return False
        self._last_status = line
        return self._send(f"STATUS={line}")

    def watchdog_due(self, now: float) -> bool:
        """Whether a keep-alive is due at monotonic time `now` (the first one is)."""
        return self.interval is not None and (
            self._next_watchdog is None or now >= self._next_watchdog
        )

    def watchdog(self, now: float) -> bool:
        """Send WATCHDOG=1 and plan the next one `interval` after `now`."""
        if self.interval is None:
            return False
        self._next_watchdog = now + self.interval
        return self._send("WATCHDOG=1")

    def stopping(self) -> bool:
        """STOPPING=1 with a STATUS= saying why."""
        self._last_status = "draining"
        return self._send("STOPPING=1\nSTATUS=draining")
