"""The daemon's own /readyz and /healthz over its real metrics port: ready once the voting set
forms, unready (but alive) in latched SAFE, ready again after `reset`."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from .helpers import make_config, system, wait_for


def probe(url: str) -> tuple[int, dict[str, object]]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return int(resp.status), json.loads(resp.read())
    except urllib.error.HTTPError as err:
        with err:
            return err.code, json.loads(err.read())


def test_readyz_follows_the_voting_set_and_safe(tmp_path: Path) -> None:
    cfg = make_config(tmp_path, "1oo1D")
    cfg = cfg.model_copy(update={"metrics": cfg.metrics.model_copy(update={"port": 0})})
    with system(cfg, serve_metrics=True) as (daemon, client):
        assert daemon.metrics_url is not None
        base = daemon.metrics_url.removesuffix("/metrics")
        assert wait_for(lambda: probe(base + "/readyz")[0] == 200)
        assert probe(base + "/readyz")[1]["voting"] == ["c0"]
        client.inject("c0", "stuck")
        assert wait_for(lambda: probe(base + "/readyz")[0] == 503, 3 * cfg.timing.dti_s + 2.0)
        _status, body = probe(base + "/readyz")
        assert body["mode"] == "SAFE" and "SAFE" in str(body["reason"])
        assert probe(base + "/healthz")[0] == 200  # SAFE is a verdict, not a dead process
        client.clear_faults()
        client.reset()  # ready again once c0 passes a self-test (within a DTI or so)
        assert wait_for(lambda: probe(base + "/readyz")[0] == 200, 3 * cfg.timing.dti_s + 2.0)


def test_daemon_notifies_systemd_ready_status_watchdog_stopping(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under a (real, datagram) NOTIFY_SOCKET: READY=1 with the mode and channel counts once the
    voting set forms, WATCHDOG=1 keep-alives, STATUS=mode=SAFE on the latch, STOPPING=1 on stop."""
    path = str(tmp_path / "notify")
    got: list[str] = []
    done = threading.Event()
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(path)
        sock.settimeout(0.2)

        def read() -> None:  # as systemd does: read as they come (sends never block)
            while not done.is_set():
                with contextlib.suppress(TimeoutError):
                    got.append(sock.recv(4096).decode())

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        monkeypatch.setenv("NOTIFY_SOCKET", path)
        monkeypatch.setenv("WATCHDOG_USEC", "200000")
        monkeypatch.setenv("WATCHDOG_PID", str(os.getpid()))
        cfg = make_config(tmp_path, "1oo1D")
        try:
            with system(cfg) as (_daemon, client):
                client.inject("c0", "stuck")
                assert wait_for(lambda: client.status()["mode"] == "SAFE",
                                3 * cfg.timing.dti_s + 2.0)
                client.clear_faults()
            assert wait_for(lambda: "STOPPING=1\nSTATUS=draining" in got)
        finally:
            done.set()
            reader.join(5)
    ready = [m for m in got if m.startswith("READY=1")]
    assert ready == ["READY=1\nSTATUS=mode=NORMAL channels up=1/1 (c0=UP)"]
    assert "WATCHDOG=1" in got
    assert any(m.startswith("STATUS=mode=SAFE") for m in got)
    assert got.index("STOPPING=1\nSTATUS=draining") > got.index(ready[0])
