"""A local process against a running daemon (issue 11), across real processes over ipc://:
a second daemon of the same name, a raw pyzmq peer on a channel's socket poisoning a
weight, socket files at stop, and channel processes outliving a killed daemon."""

from __future__ import annotations

import json
import os
import resource
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
import zmq

from safemon.client import Client
from safemon.config import Config
from safemon.errors import SafemonError
from safemon.transport import Kind, encode

from .helpers import make_config, operands, reference, same_bits, wait_for

PY = [sys.executable, "-m", "safemon"]
SLOW_START: dict[str, Any] = {"timing": {
    "dti_s": 0.8, "selftest_deadline_s": 0.6, "heartbeat_timeout_s": 1.5, "ftti_s": 3.0,
    "request_deadline_s": 1.0}}


def _start(tmp_path: Path, cfg: Config, tag: str, nofile: int | None = None
           ) -> tuple[subprocess.Popen[bytes], Path]:
    path = tmp_path / f"{tag}.yaml"
    path.write_text(yaml.safe_dump(json.loads(cfg.model_dump_json())))
    err = tmp_path / f"{tag}.err"

    def limit() -> None:
        if nofile is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, resource.getrlimit(
                resource.RLIMIT_NOFILE)[1]))

    with err.open("wb") as f:
        proc = subprocess.Popen([*PY, "run", "--config", str(path)], stdout=subprocess.DEVNULL,
                                stderr=f, preexec_fn=limit)
    return proc, path


def _up(client: Client) -> bool:
    try:
        st = client.status()
    except SafemonError:
        return False
    return st["mode"] == "NORMAL" and all(c["state"] == "UP" for c in st["channels"])


def _socket_files(cfg: Config) -> list[Path]:
    return [Path(a[len("ipc://"):]) for a in (cfg.endpoints.ingress, cfg.endpoints.control,
                                                cfg.endpoints.events)]


def test_second_daemon_impostor_peer_and_clean_stop(tmp_path: Path) -> None:
    """(1) A second `safemon run` of the same name exits 2 naming the running one and
    leaves its sockets alone: the first still answers. (2) A raw pyzmq peer that connects
    to two channels' sockets and sends a different weight under a registered id (and fault
    injections) is ignored: every released product stays right. (3) SIGTERM: exit 0 and
    the socket files are gone."""
    cfg = make_config(tmp_path, "2oo3", placement="process", transport="ipc", extra=SLOW_START)
    proc, _ = _start(tmp_path, cfg, "first")
    try:
        with Client(cfg) as client:
            assert wait_for(lambda: _up(client), 60.0), (tmp_path / "first.err").read_text()[-4000:]
            second, _ = _start(tmp_path, cfg, "second")
            assert second.wait(60) == 2
            assert "another safemon daemon" in (tmp_path / "second.err").read_text()
            assert all(p.exists() for p in _socket_files(cfg))
            assert _up(client)

            x, w = operands(3)
            ref = reference(x, w, cfg)
            wid = client.register_weight(w)
            assert same_bits(client.matmul(x, wid, timeout=2.0), ref)

            ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
            peers = []
            try:
                for ch in ("c0", "c1"):
                    s = ctx.socket(zmq.DEALER)
                    s.setsockopt(zmq.LINGER, 0)
                    s.connect(cfg.channel_address(ch))
                    peers.append(s)
                poison = np.full_like(w, 7.0)
                for s in peers:
                    for i in range(5):
                        s.send_multipart(encode(Kind.CONTROL, epoch=0, seq=i + 1, channel="c0",
                                                meta={"command": "weight", "args": wid},
                                                arrays=(poison,)))
                        s.send_multipart(encode(Kind.CONTROL, epoch=0, seq=100 + i, channel="c0",
                                                meta={"command": "inject", "args": "bitflip-c"}))
                released = 0
                for _ in range(50):
                    try:
                        got = client.matmul(x, wid, timeout=2.0)
                    except SafemonError:
                        continue
                    assert same_bits(got, ref), "a wrong product was released"
                    released += 1
                assert released == 50
                assert _up(client)
            finally:
                for s in peers:
                    s.close()
                ctx.term()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
        assert not any(p.exists() for p in _socket_files(cfg))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _children(pid: int) -> list[int]:
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        text = (task / "children").read_text().split()
        out += [int(t) for t in text]
    return out


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _describe(pids: list[int], log: Path) -> str:
    """What the surviving children are (command line, state), for a failure message."""
    lines = []
    for pid in pids:
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = Path(f"/proc/{pid}/status").read_text().splitlines()[:3]
        except OSError as e:
            cmd, state = f"<{e}>", []
        lines.append(f"{pid}: {cmd} {state}")
    return "still alive:\n" + "\n".join(lines) + "\n" + log.read_text()[-3000:]


def test_channel_processes_exit_when_their_daemon_is_killed(tmp_path: Path) -> None:
    """SIGKILL the daemon: its channel processes notice and exit (they hold the weights)."""
    cfg = make_config(tmp_path, "1oo1D", placement="process", transport="ipc", extra=SLOW_START)
    proc, _ = _start(tmp_path, cfg, "k")
    try:
        with Client(cfg) as client:
            assert wait_for(lambda: _up(client), 60.0), (tmp_path / "k.err").read_text()[-4000:]
        kids = _children(proc.pid)
        assert kids
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        gone = wait_for(lambda: not any(_alive(k) for k in kids), 10.0)
        assert gone, _describe([k for k in kids if _alive(k)], tmp_path / "k.err")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_more_connections_than_the_default_descriptor_limit_are_survived(tmp_path: Path) -> None:
    """The daemon starts under the usual 1,024-descriptor soft limit; 1,100 raw connections
    to its ingress socket do not abort it: it raised its limit at start, closes its
    listeners at limits.max_connections (512) and still answers afterwards."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY and hard < 2048:
        import pytest

        pytest.skip(f"hard descriptor limit {hard} is too low for this test")
    cfg = make_config(tmp_path, "1oo1D", transport="ipc", extra=SLOW_START)
    proc, _ = _start(tmp_path, cfg, "fd", nofile=1024)
    conns: list[socket.socket] = []
    try:
        with Client(cfg) as client:
            assert wait_for(lambda: _up(client), 60.0), (tmp_path / "fd.err").read_text()[-4000:]
            path = cfg.endpoints.ingress[len("ipc://"):]
            for _ in range(1100):
                c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                try:
                    c.connect(path)
                except OSError:  # the listener closed at the bound: refused
                    c.close()
                    continue
                conns.append(c)
            assert proc.poll() is None, (tmp_path / "fd.err").read_text()[-4000:]
            for c in conns:
                c.close()
            conns.clear()
            x, w = operands(4)
            # The client reconnects once the listeners are bound again.
            assert wait_for(lambda: _up(client), 30.0), (tmp_path / "fd.err").read_text()[-4000:]
            wid = client.register_weight(w)
            assert same_bits(client.matmul(x, wid, timeout=5.0), reference(x, w, cfg))
            assert proc.poll() is None
    finally:
        for c in conns:
            c.close()
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)


def test_every_request_sent_before_sigterm_is_answered(tmp_path: Path) -> None:
    """300 requests pipelined, then SIGTERM: each gets exactly one answer, its product
    (right) or a typed ShuttingDownError / BusyError, and the daemon exits 0."""
    cfg = make_config(tmp_path, "2oo3", transport="ipc", extra=SLOW_START)
    proc, _ = _start(tmp_path, cfg, "drain")
    try:
        with Client(cfg) as client:
            assert wait_for(lambda: _up(client), 60.0), (tmp_path / "drain.err").read_text()[-4000:]
            x, w = operands(6)
            ref = reference(x, w, cfg)
            wid = client.register_weight(w)
        ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
        sock = ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(cfg.endpoints.ingress)
        try:
            for i in range(300):
                sock.send_multipart(encode(Kind.REQUEST, epoch=0, seq=i + 1, meta={
                    "weight_id": wid, "deadline_ms": 5000.0, "job": "live"}, arrays=(x,)))
            proc.send_signal(signal.SIGTERM)
            answers: dict[int, str] = {}
            from safemon.transport import Limits, recv_message

            while len(answers) < 300:
                got = recv_message(sock, limits=Limits(), timeout_ms=10000)
                assert got is not None, f"{300 - len(answers)} requests never answered"
                m = got.message
                assert m.seq not in answers
                if m.kind is Kind.REPLY:
                    assert same_bits(np.asarray(m.arrays[0]), ref)
                answers[m.seq] = str(m.meta.get("error_type", "released"))
        finally:
            sock.close()
            ctx.term()
        assert set(answers.values()) <= {"released", "ShuttingDownError", "BusyError"}, answers
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_ctrl_c_to_the_process_group_stops_cleanly_without_tracebacks(tmp_path: Path) -> None:
    """SIGINT to the whole process group (what a terminal's Ctrl-C does) stops the daemon
    and its process channels with exit 0 and no traceback on stderr."""
    cfg = make_config(tmp_path, "2oo3", placement="process", transport="ipc", extra=SLOW_START)
    path = tmp_path / "int.yaml"
    path.write_text(yaml.safe_dump(json.loads(cfg.model_dump_json())))
    err = tmp_path / "int.err"
    with err.open("wb") as f:
        proc = subprocess.Popen([*PY, "run", "--config", str(path)], stdout=subprocess.DEVNULL,
                                stderr=f, start_new_session=True)
    try:
        with Client(cfg) as client:
            assert wait_for(lambda: _up(client), 90.0), err.read_text()[-4000:]
        os.killpg(proc.pid, signal.SIGINT)
        assert proc.wait(30) == 0, err.read_text()[-4000:]
        assert "Traceback" not in err.read_text(), err.read_text()[-4000:]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_a_metrics_port_in_use_is_named_and_leaves_nothing_bound(tmp_path: Path) -> None:
    """Found by a user trial (2026-12-07): a second deployment started beside the embedded
    default on the same metrics port printed only "[Errno 98] Address already in use". The
    daemon now names the setting and the address, and frees its sockets and lock, so that
    the same config starts once the port is free."""
    from prometheus_client import CollectorRegistry

    from safemon.daemon import Daemon
    from safemon.errors import ConfigError

    blocker = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    blocker.bind(("127.0.0.1", 0))
    blocker.listen(1)
    port = blocker.getsockname()[1]
    cfg = make_config(tmp_path, "2oo3", placement="process", transport="ipc",
                      extra={"metrics": {"port": port, "host": "127.0.0.1"}})
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    try:
        first = Daemon(cfg, context=ctx, registry=CollectorRegistry(), serve_metrics=True)
        with pytest.raises(ConfigError, match=f"metrics.port: cannot serve metrics on 127.0.0.1:{port}"):
            first.start()
        blocker.close()
        again = Daemon(cfg, context=ctx, registry=CollectorRegistry(), serve_metrics=True)
        again.start()  # the first one's sockets and lock are gone
        again.request_stop()
        again.run()
    finally:
        blocker.close()
        ctx.term()


def test_a_metrics_host_that_cannot_be_bound_is_not_called_a_port_clash(tmp_path: Path) -> None:
    """A review (2026-12-07): every OSError of the metrics server read "another daemon on
    this host?"; an address this host does not have is named as the metrics settings."""
    from prometheus_client import CollectorRegistry

    from safemon.daemon import Daemon
    from safemon.errors import ConfigError

    cfg = make_config(tmp_path, "2oo3", placement="process", transport="ipc",
                      extra={"metrics": {"port": 0, "host": "192.0.2.1"}})  # TEST-NET-1
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    try:
        with pytest.raises(ConfigError, match=r"metrics: cannot serve metrics on 192\.0\.2\.1:0 "
                                              r"\(metrics\.host") as caught:
            Daemon(cfg, context=ctx, registry=CollectorRegistry(), serve_metrics=True).start()
        assert "another daemon" not in str(caught.value)
    finally:
        ctx.term()
