"""Across processes over ipc:// in a private runtime dir: `safemon run` with channel
processes, `safemon status --json` and exit codes, a crashed channel process restarted,
SIGTERM drain with requests in flight, and an unauthenticated tcp client."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
import yaml
import zmq

from safemon.client import Client
from safemon.errors import SafemonError
from safemon.transport import CurveClientKeys, Kind, encode, keys_generate, make_socket

from .helpers import curve_over_tcp, make_config, operands, reference, same_bits, system, wait_for

PY = [sys.executable, "-m", "safemon"]


def _cli(*args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*PY, *args], capture_output=True, text=True, timeout=timeout)


def _write(tmp_path: Path, cfg_dict: dict[str, object]) -> Path:
    p = tmp_path / "daemon.yaml"
    p.write_text(yaml.safe_dump(cfg_dict))
    return p


def test_cli_exit_codes_without_a_daemon(tmp_path: Path) -> None:
    """status: 3 when no daemon answers, 2 for an invalid config (the ConfigError printed)."""
    cfg = make_config(tmp_path, "2oo2", transport="ipc")
    path = tmp_path / "good.yaml"
    path.write_text(yaml.safe_dump(json.loads(cfg.model_dump_json())))
    r = _cli("status", "--json", "--config", str(path), "--timeout", "0.3")
    assert r.returncode == 3, r.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text("policy: 3oo5\n")
    r = _cli("status", "--config", str(bad))
    assert r.returncode == 2 and "policy" in r.stderr
    r = _cli("run", "--config", str(bad))
    assert r.returncode == 2 and "policy" in r.stderr
    r = _cli("inject", "--config", str(path))
    assert r.returncode == 2  # argparse: --fault or --clear required


def test_run_refuses_bad_keys(tmp_path: Path) -> None:
    """`safemon run` exits 2 naming the problem when a secret key file is world-readable."""
    keys = tmp_path / "keys"
    keys_generate(keys)
    os.chmod(keys / "server.key_secret", 0o644)
    data = json.loads(make_config(tmp_path, "1oo1D", transport="ipc").model_dump_json())
    data["security"] = {"curve": True, "keys_dir": str(keys)}
    r = _cli("run", "--config", str(_write(tmp_path, data)))
    assert r.returncode == 2 and "server.key_secret" in r.stderr


def test_daemon_with_channel_processes_status_crash_restart_and_sigterm_drain(tmp_path: Path) -> None:
    """`safemon run` over ipc with three channel processes: status --json shows them UP; a
    crashed channel process is restarted and rejoins; SIGTERM with requests in flight
    answers each (result or typed error) and exits 0."""
    # Three fresh interpreters start on a 2-core CI box: give the deadlines headroom.
    cfg = make_config(tmp_path, "2oo3", placement="process", transport="ipc", injection=True,
                      extra={"timing": {
        "dti_s": 0.5, "selftest_deadline_s": 0.4, "heartbeat_timeout_s": 1.0, "ftti_s": 2.0,
        "request_deadline_s": 0.5}})
    path = tmp_path / "proc.yaml"
    path.write_text(yaml.safe_dump(json.loads(cfg.model_dump_json())))
    out_path = tmp_path / "run.out"
    out = out_path.open("w")
    err = (tmp_path / "run.err").open("w")
    proc = subprocess.Popen([*PY, "run", "--config", str(path)], stdout=out, stderr=err)
    try:
        with Client(cfg) as client:
            def up() -> bool:
                try:
                    return all(c["state"] == "UP" for c in client.status()["channels"])
                except SafemonError:
                    return False

            assert wait_for(up, 30.0)
            r = _cli("status", "--json", "--config", str(path))
            assert r.returncode == 0, r.stderr
            st = json.loads(r.stdout)
            assert st["mode"] == "NORMAL" and st["policy"] == "2oo3", (tmp_path / "run.err").read_text()[-8000:]
            assert st["metrics_url"].startswith("http://127.0.0.1:")
            assert [c["name"] for c in st["channels"]] == ["c0", "c1", "c2"]

            x, w = operands(7)
            ref = reference(x, w, cfg)
            wid = client.register_weight(w)
            assert same_bits(client.matmul(x, wid, timeout=2.0), ref)

            assert _cli("inject", "--config", str(path), "--channel", "c2", "--fault", "crash").returncode == 0
            assert wait_for(lambda: client.status()["channels"][2]["incarnation"] >= 1, 30.0)
            assert wait_for(up, 30.0), (client.status(), (tmp_path / "run.err").read_text()[-6000:])
            assert same_bits(client.matmul(x, wid, timeout=2.0), ref)

        outcomes: list[str] = []
        lock = threading.Lock()

        def hammer() -> None:
            with Client(cfg) as c:
                wid_local = c.register_weight(w)
                for _ in range(200):
                    try:
                        got = c.matmul(x, wid_local, timeout=1.0)
                        assert same_bits(got, ref)
                        res = "released"
                    except SafemonError as exc:
                        res = type(exc).__name__
                    with lock:
                        outcomes.append(res)
                    if res != "released":
                        return

        threads = [threading.Thread(target=hammer) for _ in range(3)]
        for t in threads:
            t.start()
        assert wait_for(lambda: len(outcomes) >= 6, 30.0)
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(cfg.timing.drain_timeout_s + 10)
        for t in threads:
            t.join(10)
            assert not t.is_alive(), "a request was never answered"
        assert rc == 0
        assert "released" in outcomes
        printed = out_path.read_text()
        assert "metrics http://127.0.0.1:" in printed and cfg.endpoints.ingress in printed
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        out.close()
        err.close()


def test_spinning_daemon_channels_and_client_release_every_request(tmp_path: Path) -> None:
    """`timing.spin_s` > 0 (the busy-wait before each blocking wait) in the client, the
    daemon and three channel processes over ipc: every request is released bit for bit, the
    channels stay UP and the mode NORMAL; spinning changes when a process wakes, not what
    it answers. Two clients at once, so that a spinning loop also meets a second sender."""
    cfg = make_config(tmp_path, "2oo3", placement="process", transport="ipc",
                      extra={"timing": {"dti_s": 0.5, "selftest_deadline_s": 0.4,
                                        "heartbeat_timeout_s": 1.0, "ftti_s": 2.0,
                                        "request_deadline_s": 0.5, "spin_s": 0.002}})
    assert cfg.timing.spin_s == 0.002
    path = tmp_path / "spin.yaml"
    path.write_text(yaml.safe_dump(json.loads(cfg.model_dump_json())))
    err = (tmp_path / "run.err").open("w")
    proc = subprocess.Popen([*PY, "run", "--config", str(path)], stdout=subprocess.DEVNULL,
                            stderr=err)
    try:
        with Client(cfg) as client, Client(cfg) as other:
            def up() -> bool:
                try:
                    return all(c["state"] == "UP" for c in client.status()["channels"])
                except SafemonError:
                    return False

            assert wait_for(up, 30.0), (tmp_path / "run.err").read_text()[-6000:]
            x, w = operands(9)
            ref = reference(x, w, cfg)
            wid = client.register_weight(w)
            other_wid = other.register_weight(w)
            for _ in range(30):
                assert same_bits(client.matmul(x, wid, timeout=5.0), ref)
                assert same_bits(other.matmul(x, other_wid, timeout=5.0), ref)
            st = client.status()
            assert st["mode"] == "NORMAL"
            assert all(c["state"] == "UP" and c["incarnation"] == 0 for c in st["channels"])
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(cfg.timing.drain_timeout_s + 10)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            err.close()


def test_unauthenticated_tcp_client_cannot_submit(tmp_path: Path) -> None:
    """With tcp:// + CURVE, a client without keys never gets a request through (nothing is
    submitted, nothing answered), while an authenticated client works."""
    keys = tmp_path / "keys"
    cfg = make_config(tmp_path, "1oo1D", extra=curve_over_tcp(keys))
    x, w = operands(8)
    with system(cfg) as (daemon, client):
        wid = client.register_weight(w)
        assert same_bits(client.matmul(x, wid, timeout=1.0), reference(x, w, cfg))
        ctx = zmq.Context()
        try:
            rogue = ctx.socket(zmq.DEALER)
            rogue.setsockopt(zmq.LINGER, 0)
            rogue.connect(cfg.endpoints.ingress)
            frames = encode(Kind.REQUEST, epoch=0, seq=1, meta={"weight_id": wid, "job": "live"},
                            arrays=(x,))
            rogue.send_multipart(frames, copy=True)
            assert not rogue.poll(1000), "an unauthenticated client got an answer"
            rogue.close(linger=0)
            # A CURVE client with a key the daemon does not know: ZAP denies it, counted.
            other = tmp_path / "other-keys"
            keys_generate(other)
            stranger = make_socket(ctx, zmq.DEALER, cfg.endpoints.ingress, bind=False,
                                   curve=CurveClientKeys.from_files(other / "client.key_secret",
                                                                    keys / "server.key"))
            with contextlib.suppress(zmq.Again):
                stranger.send_multipart(frames, copy=True)
            assert not stranger.poll(1000), "a client with an unknown key got an answer"
            stranger.close(linger=0)
            assert wait_for(lambda: (daemon.registry.get_sample_value(
                "safemon_messages_rejected_total", {"reason": "zap_denied"}) or 0) >= 1, 5.0)
        finally:
            ctx.term()
        released = daemon.registry.get_sample_value("safemon_requests_total", {"outcome": "released"})
        assert released == 1


@pytest.mark.gpu
def test_stream_channels_on_the_gpu_match_the_reference(tmp_path: Path) -> None:
    """Stream placement on CuPy (each channel its own CUDA stream) releases the reference C."""
    cfg = make_config(tmp_path, "2oo3", extra={"backend": "cupy"})
    x, w = operands(9)
    with system(cfg) as (_daemon, client):
        wid = client.register_weight(w)
        assert same_bits(client.matmul(x, wid, timeout=2.0), reference(x, w, cfg))
        assert np.isfinite(client.matmul(x, wid, timeout=2.0)).all()
