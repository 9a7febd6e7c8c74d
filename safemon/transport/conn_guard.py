"""A bound on the client connections of the daemon's listening sockets.

Every accepted connection holds a file descriptor in the daemon. libzmq 4.3.5 (the one
pyzmq ships) treats an `accept()` that fails with EMFILE differently by transport, as
measured with a ROUTER whose process had a lowered `RLIMIT_NOFILE`:

- ipc://: the process aborts (`Too many open files (src/ipc_listener.cpp:297)`, SIGABRT);
- tcp://: the failed accept is ignored, the connection waits in the kernel's backlog.

So the daemon must never let its listeners run the descriptors out. `ConnectionGuard`
watches the listeners through libzmq socket monitors (`EVENT_ACCEPTED` +1,
`EVENT_DISCONNECTED` -1, by descriptor, summed over every guarded socket) and, when the count reaches
`bound` (`limits.max_connections`), unbinds every guarded listener. libzmq then closes the
listener *and every connection it accepted* (a connection belongs to its listener), so
all the descriptors come back at once; which connection is the leak or the flood cannot
be told, so every client is shed alike. New connections are refused by the kernel
meanwhile. Once the count has fallen to `reopen_at` (90 % of the bound) and at least
`hold_s` has passed, the listeners are bound again at the same endpoints; zmq clients
reconnect by themselves (a request in flight on a shed connection gets no reply: its
client times out, `VoteTimeoutError` / `DaemonUnreachableError`).

What this does not cover: the listeners accept on libzmq's I/O thread, so between the
accept that reaches the bound and the unbind, more connections are accepted. The
headroom for that is the soft descriptor limit minus the bound minus the daemon's own
descriptors (`safemon.fdlimit`: 65,536 - 512 - 256 by default); a local process of the
daemon's user that opens connections faster than the daemon's loop sees the monitor events
could still exhaust it. Such a process can also signal the daemon directly; the runtime
dir's 0700 mode keeps other users out.

The monitor sockets are PAIR sockets with an unbounded receive queue (`rcvhwm = 0`):
libzmq drops monitor events when the queue is full, and a lost `EVENT_DISCONNECTED`
would leave the count high and the listeners closed.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import zmq
from zmq.utils.monitor import recv_monitor_message

from safemon.transport.sockets import Context, Socket

__all__ = ["ConnectionGuard"]

_EVENTS = zmq.EVENT_ACCEPTED | zmq.EVENT_DISCONNECTED


@dataclass
class _Listener:
    name: str
    sock: Socket
    endpoint: str  # what it is bound to (LAST_ENDPOINT: a tcp port "*" resolved)
    monitor: Socket
    fds: set[int] = field(default_factory=set)  # the descriptors of its open connections


@dataclass
class ConnectionGuard:
    """Counts the connections of `sockets` and closes / reopens their listeners.

    Not thread-safe: the thread that owns the guarded sockets calls `handle` and `close`.

    Args:
        ctx: the zmq context of the guarded sockets (the monitors are inproc:// on it).
        sockets: name -> a bound socket (one endpoint each).
        bound: the most connections summed over every guarded socket (int >= 1).
        hold_s: the least time a closed listener stays closed (seconds; libzmq closes
            the old listener, and an ipc:// one unlinks its socket file, asynchronously).
        on_change: called with (event, fields) for "connection_limit_reached" and
            "accepting_again" (the shell logs them).
    """

    ctx: Context
    sockets: Mapping[str, Socket]
    bound: int
    hold_s: float = 0.5
    on_change: Callable[[str, dict[str, Any]], None] | None = None
    accepting: bool = True
    closed_at: float | None = None
    times_closed: int = 0
    _listeners: list[_Listener] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.bound < 1:
            raise ValueError(f"bound must be >= 1, got {self.bound}")
        for name, sock in self.sockets.items():
            addr = f"inproc://safemon-conn-guard-{name}-{id(sock):x}"
            sock.monitor(addr, _EVENTS)
            mon = self.ctx.socket(zmq.PAIR)
            mon.setsockopt(zmq.RCVHWM, 0)
            mon.setsockopt(zmq.LINGER, 0)
            mon.connect(addr)
            endpoint = sock.getsockopt_string(zmq.LAST_ENDPOINT)
            self._listeners.append(_Listener(name, sock, endpoint, mon))

    @property
    def reopen_at(self) -> int:
        """The count at or below which closed listeners are bound again."""
        return self.bound - max(1, self.bound // 10)

    @property
    def connections(self) -> int:
        """Connections open now, summed over the guarded sockets."""
        return sum(len(lis.fds) for lis in self._listeners)

    def monitors(self) -> list[Socket]:
        """The monitor sockets, to register for POLLIN in the owner's poller."""
        return [lis.monitor for lis in self._listeners]

    def next_wakeup(self) -> float | None:
        """When closed listeners may be bound again at the earliest (monotonic seconds):
        `handle` must run then even if no monitor event came. None while they accept, and
        while the count is above `reopen_at`: only a disconnection (a monitor event, which
        wakes the owner's poll) can lower it, so no time is due."""
        if self.accepting or self.closed_at is None or self.connections > self.reopen_at:
            return None
        return self.closed_at + self.hold_s

    def handle(self, now: float, *, events: bool = True) -> None:
        """Read every pending monitor event (skipped when `events` is False: none of the
        monitor sockets is readable), then close or reopen the listeners.

        `now` is monotonic seconds. Call it whenever a monitor socket is readable and at
        `next_wakeup` (a reopen waits for time to pass, not for an event)."""
        for lis in self._listeners if events else ():
            while True:
                try:
                    ev = recv_monitor_message(lis.monitor, flags=zmq.NOBLOCK)
                except zmq.Again:
                    break
                if ev["event"] == zmq.EVENT_ACCEPTED:
                    lis.fds.add(int(ev["value"]))
                elif ev["event"] == zmq.EVENT_DISCONNECTED:
                    lis.fds.discard(int(ev["value"]))
        count = self.connections
        if self.accepting and count >= self.bound:
            for lis in self._listeners:
                lis.sock.unbind(lis.endpoint)
                # Its connections close with it, and libzmq reports only the listener's
                # EVENT_CLOSED, not their disconnections (measured): forget them here.
                lis.fds.clear()
            self.accepting, self.closed_at = False, now
            self.times_closed += 1
            self._tell("connection_limit_reached", connections=count, bound=self.bound)
        elif (not self.accepting and count <= self.reopen_at
              and self.closed_at is not None and now - self.closed_at >= self.hold_s):
            for lis in self._listeners:
                lis.sock.bind(lis.endpoint)
            self.accepting, self.closed_at = True, None
            self._tell("accepting_again", connections=count, bound=self.bound)

    def status(self) -> dict[str, Any]:
        """For `safemon status`: connections now, the bound, whether the listeners accept."""
        return {"connections": self.connections, "bound": self.bound,
                "accepting": self.accepting, "times_closed": self.times_closed}

    def close(self) -> None:
        """Stop monitoring and close the monitor sockets (before the guarded sockets close)."""
        for lis in self._listeners:
            with contextlib.suppress(zmq.ZMQError):  # the guarded socket is already closed
                lis.sock.disable_monitor()
            lis.monitor.close(linger=0)
        self._listeners.clear()

    def _tell(self, event: str, **fields: Any) -> None:
        if self.on_change is not None:
            self.on_change(event, fields)
