"""systemd notify protocol over a real AF_UNIX datagram socket: READY/STATUS/WATCHDOG/STOPPING."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from safemon.states import ChannelState, Mode
from safemon.systemd import Notifier, sd_notify, status_line, watchdog_interval

STATES = {"ch0": ChannelState.UP, "ch1": ChannelState.UP, "ch2": ChannelState.STARTING}


@pytest.fixture
def notify_socket(tmp_path: Path) -> Iterator[tuple[socket.socket, str]]:
    path = str(tmp_path / "notify")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(path)
        sock.settimeout(5.0)
        yield sock, path


def received(sock: socket.socket) -> list[str]:
    """Every datagram waiting on `sock`, decoded."""
    out: list[str] = []
    sock.setblocking(False)
    try:
        while True:
            out.append(sock.recv(4096).decode())
    except BlockingIOError:
        return out
    finally:
        sock.settimeout(5.0)


def test_status_line_carries_mode_and_channel_counts() -> None:
    assert status_line(Mode.DEGRADED, STATES) == (
        "mode=DEGRADED channels up=2/3 (ch0=UP ch1=UP ch2=STARTING)"
    )


def test_without_notify_socket_nothing_is_sent() -> None:
    n = Notifier(env={})
    assert n.interval is None and not n.watchdog_due(0.0)
    assert not n.ready(Mode.NORMAL, STATES) and not n.stopping()
    assert not sd_notify("READY=1", {})


def test_watchdog_interval_is_half_of_watchdog_usec() -> None:
    env = {"NOTIFY_SOCKET": "/x", "WATCHDOG_USEC": "10000000"}
    assert watchdog_interval(env, pid=42) == 5.0


def test_watchdog_pid_of_another_process_disables_keepalives() -> None:
    env = {"NOTIFY_SOCKET": "/x", "WATCHDOG_USEC": "10000000", "WATCHDOG_PID": "41"}
    assert watchdog_interval(env, pid=42) is None
    assert watchdog_interval({**env, "WATCHDOG_PID": "42"}, pid=42) == 5.0


def test_lifecycle_datagrams(notify_socket: tuple[socket.socket, str]) -> None:
    sock, path = notify_socket
    n = Notifier(env={"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "2000000"}, pid=7)
    assert n.status(Mode.NORMAL, STATES)
    assert not n.status(Mode.NORMAL, STATES)  # a repeat is not sent
    assert n.ready(Mode.NORMAL, STATES)
    assert not n.ready(Mode.NORMAL, STATES)  # once
    assert n.watchdog_due(100.0) and n.watchdog(100.0)
    assert not n.watchdog_due(100.5) and n.watchdog_due(101.0)
    assert n.status(Mode.SAFE, STATES)
    assert n.stopping()
    line = status_line(Mode.NORMAL, STATES)
    assert received(sock) == [
        f"STATUS={line}",
        f"READY=1\nSTATUS={line}",
        "WATCHDOG=1",
        f"STATUS={status_line(Mode.SAFE, STATES)}",
        "STOPPING=1\nSTATUS=draining",
    ]


def test_a_full_notify_queue_drops_instead_of_blocking(
    notify_socket: tuple[socket.socket, str],
) -> None:
    """Nobody reads the socket: sends fail fast once its queue is full (the daemon's loop
    must never wait for systemd)."""
    _sock, path = notify_socket
    results = [sd_notify("WATCHDOG=1", {"NOTIFY_SOCKET": path}) for _ in range(2000)]
    assert results[0] and not all(results)
