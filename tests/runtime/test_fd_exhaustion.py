"""Descriptor exhaustion (issue 11): more raw connections than the daemon's descriptor
limit must not abort it (libzmq aborts on an ipc:// accept that fails with EMFILE); the
daemon closes its listeners at `limits.max_connections` and still answers."""

from __future__ import annotations

import errno
import json
import resource
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from safemon.client import Client
from safemon.errors import SafemonError

from .helpers import make_config, operands, reference, same_bits, wait_for

#: The daemon's descriptor limit in this test, soft and hard (so it cannot raise it).
NOFILE = 4096
#: Raw connections opened: more than the daemon has descriptors.
RAW = 4400


def _status_or_none(client: Client) -> dict[str, Any] | None:
    try:
        return client.status()
    except SafemonError:
        return None


def test_more_raw_connections_than_descriptors_close_the_listener_and_the_daemon_answers(
        tmp_path: Path) -> None:
    """A daemon limited to 4,096 descriptors (soft and hard) gets 4,400 raw connections on
    its ingress socket: it stays alive, refuses connections past limits.max_connections,
    keeps answering a client connected before, and accepts again once they close."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < RAW + 200:
        pytest.skip(f"hard descriptor limit {hard} is too low for this test")
    if soft != resource.RLIM_INFINITY and soft < RAW + 200:
        resource.setrlimit(resource.RLIMIT_NOFILE, (RAW + 200, hard))
    cfg = make_config(tmp_path, "1oo1D", transport="ipc", extra={
        "limits": {"max_connections": 32},
        "timing": {"dti_s": 0.8, "selftest_deadline_s": 0.6, "heartbeat_timeout_s": 1.5,
                   "ftti_s": 3.0, "request_deadline_s": 1.0}})
    path = tmp_path / "fd.yaml"
    path.write_text(yaml.safe_dump(json.loads(cfg.model_dump_json())))
    err = tmp_path / "fd.err"

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (NOFILE, NOFILE))

    with err.open("wb") as f:
        proc = subprocess.Popen([sys.executable, "-m", "safemon", "run", "--config", str(path)],
                                stdout=subprocess.DEVNULL, stderr=f, preexec_fn=limit)
    conns: list[socket.socket] = []
    refused = 0
    try:
        with Client(cfg) as client:
            # (Its control connection is made here, before the flood.)
            assert wait_for(lambda: (_status_or_none(client) or {}).get("mode") == "NORMAL",
                            60.0), err.read_text()[-4000:]
            x, w = operands(4)
            wid = client.register_weight(w)
            ingress = cfg.endpoints.ingress[len("ipc://"):]
            for _ in range(RAW):
                c = _connect(ingress)
                if c is None:
                    refused += 1
                else:
                    conns.append(c)
            # libzmq aborts asynchronously on its I/O thread: give it time to show.
            assert not wait_for(lambda: proc.poll() is not None, 2.0), err.read_text()[-4000:]
            # The listener closed at the bound: the kernel refused the rest, and the daemon
            # shed the connections it had accepted (its end of them is closed).
            assert refused > 0
            assert any(_closed_by_peer(c) for c in conns)
            for c in conns:
                c.close()
            conns.clear()
            # The client made before the flood reconnects and is served; so is a new one.
            assert wait_for(lambda: (_status_or_none(client) or {}).get(
                "client_connections", {}).get("accepting") is True, 20.0)
            assert same_bits(client.matmul(x, wid, timeout=5.0), reference(x, w, cfg))
            with Client(cfg) as fresh:
                assert same_bits(fresh.matmul(x, wid, timeout=5.0), reference(x, w, cfg))
            assert proc.poll() is None
            assert "connection_limit_reached" in err.read_text()
    finally:
        for c in conns:
            c.close()
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)
    assert proc.returncode == 0, err.read_text()[-4000:]


def _connect(path: str) -> socket.socket | None:
    """A raw connection to `path`, retried while the listen backlog is full (up to 2 s, so
    the flood waits for the daemon to accept rather than outrunning it); None if refused
    (no listener at `path`)."""
    end = time.monotonic() + 2.0
    while True:
        c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        c.settimeout(0.5)
        try:
            c.connect(path)
            return c
        except BlockingIOError:  # backlog full
            c.close()
            if time.monotonic() > end:
                return None
            time.sleep(0.001)
        except OSError as exc:
            c.close()
            assert exc.errno in (errno.ENOENT, errno.ECONNREFUSED), exc
            return None


def _closed_by_peer(c: socket.socket) -> bool:
    """Whether the daemon closed its end (EOF after its ZMTP greeting)."""
    c.settimeout(2.0)
    try:
        while c.recv(4096):
            pass
    except OSError:  # a timeout: still open; a reset: closed
        return c.fileno() >= 0 and False
    return True
