"""The connection guard on real sockets: it counts accepted connections from the monitor
events, closes the listener at the bound, and names when it may reopen (`next_wakeup`),
which is when the daemon's loop calls it without an event."""

from __future__ import annotations

import time
from pathlib import Path

import zmq

from safemon.transport.conn_guard import ConnectionGuard


def _settle(guard: ConnectionGuard, now: float, want: int | None = None) -> None:
    """Read monitor events until `want` connections are counted, or (None) until the
    listeners close (bounded wait)."""
    end = time.monotonic() + 5.0

    def done() -> bool:
        return guard.connections == want if want is not None else not guard.accepting

    while not done() and time.monotonic() < end:
        zmq.select(guard.monitors(), [], [], 0.05)
        guard.handle(now)
    assert done()


def test_the_guard_closes_at_the_bound_and_is_due_again_after_the_hold(tmp_path: Path) -> None:
    ctx = zmq.Context()
    listener = ctx.socket(zmq.ROUTER)
    listener.bind(f"ipc://{tmp_path}/in.sock")
    guard = ConnectionGuard(ctx, {"ingress": listener}, bound=2, hold_s=0.5)
    peers = []
    try:
        assert guard.next_wakeup() is None  # accepting: nothing to wait for
        for _ in range(2):
            peer = ctx.socket(zmq.DEALER)
            peer.connect(f"ipc://{tmp_path}/in.sock")
            peers.append(peer)
        _settle(guard, now=10.0)
        assert not guard.accepting and guard.times_closed == 1
        assert guard.next_wakeup() == 10.5
        # Connections counted after the close (accepted before the unbind, their
        # disconnections never reported) keep the count above reopen_at: then no time is
        # due, only a monitor event can change it (a due time would make the loop spin).
        guard._listeners[0].fds.update({1001, 1002})
        assert guard.next_wakeup() is None
        guard._listeners[0].fds.clear()
        for peer in peers:
            peer.close(linger=0)
        guard.handle(10.2, events=False)  # before the hold: still closed
        assert not guard.accepting
        guard.handle(10.5, events=False)  # due (the count was forgotten at the close)
        assert guard.accepting and guard.next_wakeup() is None
    finally:
        guard.close()
        listener.close(linger=0)
        for peer in peers:
            peer.close(linger=0)
        ctx.term()


def test_without_events_the_guard_reads_no_monitor(tmp_path: Path) -> None:
    """`events=False` (no monitor readable in the loop's poll) leaves the monitor queue
    alone: the connection is counted only when the events are read."""
    ctx = zmq.Context()
    listener = ctx.socket(zmq.ROUTER)
    listener.bind(f"ipc://{tmp_path}/in.sock")
    guard = ConnectionGuard(ctx, {"ingress": listener}, bound=5)
    peer = ctx.socket(zmq.DEALER)
    try:
        peer.connect(f"ipc://{tmp_path}/in.sock")
        assert zmq.select(guard.monitors(), [], [], 5.0)[0]  # the accept event is queued
        guard.handle(1.0, events=False)
        assert guard.connections == 0
        _settle(guard, now=1.0, want=1)
    finally:
        guard.close()
        peer.close(linger=0)
        listener.close(linger=0)
        ctx.term()
