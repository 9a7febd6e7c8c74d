"""Operability (issue 11, item 5): Client() loads its config like the daemon (SAFEMON_*),
names the address in its errors and can wait for readiness; `safemon status` prints the
SAFE reason and the last faults, and refuses a bad client key without a traceback;
`safemon demo` without scikit-learn says which extra to install."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
import zmq

from safemon.client import Client, DaemonUnreachableError
from safemon.daemon import Daemon
from safemon.errors import VoteTimeoutError
from safemon.transport import keys_generate

from .helpers import make_config, operands, system, wait_for

PY = [sys.executable, "-m", "safemon"]


def test_client_honours_safemon_overrides_and_names_the_address(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Client() with SAFEMON_CONFIG and a SAFEMON_* override uses them (as the daemon
    does); with no daemon its errors name the address it tried."""
    cfg = make_config(tmp_path, "2oo3", transport="ipc")
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(json.loads(cfg.model_dump_json())))
    monkeypatch.setenv("SAFEMON_CONFIG", str(path))
    monkeypatch.setenv("SAFEMON_ENDPOINTS__INGRESS", f"ipc://{tmp_path}/other.sock")
    with Client(control_timeout_s=0.2) as client:
        assert client.config.name == cfg.name
        assert client.config.endpoints.ingress == f"ipc://{tmp_path}/other.sock"
        x, w = operands()
        with pytest.raises(DaemonUnreachableError, match=f"{tmp_path}/other.sock"):
            client.register_weight(w)
        with pytest.raises(VoteTimeoutError, match=f"{tmp_path}/other.sock"):
            client.matmul(x, "0" * 24, timeout=0.2)
        with pytest.raises(DaemonUnreachableError, match="not ready"):
            client.wait_ready(0.3)


def test_wait_ready_returns_once_a_voting_set_exists(tmp_path: Path) -> None:
    cfg = make_config(tmp_path, "2oo3")
    with system(cfg) as (_daemon, client):
        st = client.wait_ready(10.0)
        assert st["mode"] == "NORMAL" and st["voting"]


def test_status_refuses_a_world_readable_client_key_without_a_traceback(tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    keys_generate(keys)
    os.chmod(keys / "client.key_secret", 0o644)
    data = json.loads(make_config(tmp_path, "1oo1D", transport="ipc").model_dump_json())
    data["security"] = {"curve": True, "keys_dir": str(keys)}
    path = tmp_path / "k.yaml"
    path.write_text(yaml.safe_dump(data))
    r = subprocess.run([*PY, "status", "--config", str(path), "--timeout", "0.3"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "client.key_secret" in r.stderr
    assert "Traceback" not in r.stderr


def test_demo_without_scikit_learn_names_the_extra(tmp_path: Path) -> None:
    """A plain install has no scikit-learn: `safemon demo` says `pip install 'safemon[demo]'`."""
    blocker = tmp_path / "sklearn"
    blocker.mkdir()
    (blocker / "__init__.py").write_text("raise ImportError('not installed')\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    r = subprocess.run([*PY, "demo", "--duration", "1"], capture_output=True, text=True,
                       timeout=120, env=env)
    assert r.returncode == 2, r.stderr[-2000:]
    assert "safemon[demo]" in r.stderr and "Traceback" not in r.stderr


def test_status_says_starting_until_a_voting_set_exists(tmp_path: Path) -> None:
    """Before any channel passed its start-up self-test the mode is STARTING, not NORMAL."""
    import zmq
    from prometheus_client import CollectorRegistry

    from safemon.daemon import Daemon

    cfg = make_config(tmp_path, "2oo3")
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    daemon = Daemon(cfg, context=ctx, registry=CollectorRegistry())
    daemon.start()
    try:
        st = daemon.status()
        assert st["mode"] == "STARTING" and st["voting"] == [] and st["safe_reason"] is None
    finally:
        daemon.close()
        ctx.term()


def _status_rc(path: Path) -> int:
    return subprocess.run([*PY, "status", "--config", str(path), "--timeout", "5"],
                          capture_output=True, timeout=60, check=False).returncode


def test_status_exit_code_says_normal_degraded_or_safe(tmp_path: Path) -> None:
    """`safemon status` exits 0 in NORMAL, 4 in DEGRADED and 5 in SAFE (text and --json)."""
    from safemon.commands.status import EXIT_DEGRADED, EXIT_SAFE

    # Timing headroom: without restarts, two overruns on a starved host would already be SAFE.
    cfg = make_config(tmp_path, "2oo3", transport="ipc", injection=True,
                      extra={"actions": {"restart": False}, "restart": {"max_restarts": 0},
                             "timing": {"request_deadline_s": 1.0, "heartbeat_timeout_s": 2.0,
                                        "dti_s": 1.0, "selftest_deadline_s": 0.9,
                                        "ftti_s": 4.0}})
    path = tmp_path / "status.yaml"
    path.write_text(yaml.safe_dump(json.loads(cfg.model_dump_json())))
    with system(cfg) as (daemon, client):
        assert _status_rc(path) == 0
        client.inject("c0", "crash")  # no restart: c0 is isolated, 2oo2 goes on
        assert wait_for(lambda: daemon.status()["mode"] == "DEGRADED", 10.0)
        assert _status_rc(path) == EXIT_DEGRADED
        client.inject("c1", "crash")  # a fault under 2oo2: SAFE
        assert wait_for(lambda: daemon.status()["mode"] == "SAFE", 10.0)
        assert _status_rc(path) == EXIT_SAFE
        r = subprocess.run([*PY, "status", "--config", str(path), "--json"],
                           capture_output=True, timeout=60, check=False)
        assert r.returncode == EXIT_SAFE and json.loads(r.stdout)["mode"] == "SAFE"


def _processes(daemon: Daemon) -> dict[str, tuple[str, int, str]]:
    return {c["name"]: (c["state"], c["incarnation"], c["process"])
            for c in daemon.status()["channels"]}


def test_status_in_safe_says_which_channel_processes_run(tmp_path: Path) -> None:
    """User trial 2026-12-07 (2oo3, process channels): after SAFE latched, `safemon status`
    read "UP ... process lost" for two channels whose processes ran and answered, and
    "RESTARTING" for one that had registered again. Now a channel reported lost in SAFE
    reads "silent" while it is silent and "alive, not watched" once it answers again (it is
    used again only after the reset restarts it); the RESTARTING channel's process reads
    "running", and the text says that the channel states are latched with SAFE."""
    cfg = make_config(tmp_path, "2oo3", placement="process", transport="ipc", injection=True)
    path = tmp_path / "status.yaml"
    path.write_text(yaml.safe_dump(json.loads(cfg.model_dump_json())))
    with system(cfg) as (daemon, client):
        client.inject("c0", "crash")  # restarted (2oo2 meanwhile) ...
        client.inject("c1", "hang")  # ... and a fault under 2oo2 before it is back: SAFE
        assert wait_for(lambda: daemon.status()["mode"] == "SAFE", 10.0), daemon.status()
        client.inject("c2", "hang")  # reported lost in SAFE too, nothing restarts it
        assert wait_for(lambda: [p[2] for n, p in _processes(daemon).items() if n != "c0"]
                        == ["silent", "silent"], 10.0), _processes(daemon)
        client.clear_faults()  # both answer again; still not watched
        assert wait_for(lambda: [p for n, p in _processes(daemon).items() if n != "c0"]
                        == [("UP", 0, "alive, not watched")] * 2, 10.0), _processes(daemon)
        assert wait_for(lambda: _processes(daemon)["c0"] == ("RESTARTING", 1, "running"),
                        30.0), _processes(daemon)
        r = subprocess.run([*PY, "status", "--config", str(path), "--timeout", "5"],
                           capture_output=True, text=True, timeout=60, check=False)
        assert "channel states as SAFE latched them" in r.stdout, r.stdout
        assert "process alive, not watched" in r.stdout and "process lost" not in r.stdout
        client.reset()  # restarts the two it stopped watching; all three vote again
        assert wait_for(lambda: daemon.status()["mode"] == "NORMAL", 60.0), _processes(daemon)
        assert _processes(daemon) == {"c0": ("UP", 1, "running"), "c1": ("UP", 1, "running"),
                                      "c2": ("UP", 1, "running")}


def test_an_isolated_channel_stays_stopped_until_the_reset(tmp_path: Path) -> None:
    """User trial 2026-12-07 (1oo3D, process channels): status read "ISOLATED incarnation 1
    process starting": asking to self-test an isolated channel (the `selftest` command, or
    the mismatch of a request it computed before its isolation) restarted it. It stays
    stopped, reads "stopped" (it read "lost"), and the operator's reset brings it back."""
    cfg = make_config(tmp_path, "1oo3D", placement="process", transport="ipc", injection=True)
    with system(cfg) as (daemon, client):
        client.inject("c1", "crash")
        assert wait_for(lambda: _processes(daemon)["c1"] == ("ISOLATED", 0, "stopped"), 10.0), \
            _processes(daemon)
        client.selftest()
        assert not wait_for(lambda: _processes(daemon)["c1"] != ("ISOLATED", 0, "stopped"), 2.0), \
            _processes(daemon)
        client.reset()  # re-admitted: restarted, self-tested, voting again
        assert wait_for(lambda: daemon.status()["mode"] == "NORMAL", 60.0), _processes(daemon)
        assert _processes(daemon)["c1"] == ("UP", 1, "running")


def test_a_gpu_config_on_a_host_without_one_says_why_and_how_to_run_it(tmp_path: Path) -> None:
    """Found by a user trial (2026-12-07): `safemon run --config configs/hft1.yaml` on a CPU
    said "channels.0.gpu: set, but the backend is numpy", though the file says `backend:
    auto`. The error now says that auto chose numpy and how to run the file anyway."""
    from prometheus_client import CollectorRegistry

    from safemon.config import load_config
    from safemon.daemon import Daemon
    from safemon.errors import ConfigError
    from safemon.kernels.backend import resolve_backend

    if resolve_backend("auto").on_device:
        pytest.skip("a GPU is usable here: auto resolves to cupy")
    configs = Path(__file__).resolve().parents[2] / "configs"
    cfg = load_config(configs / "hft1.yaml", env={"XDG_RUNTIME_DIR": str(tmp_path)})
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    try:
        with pytest.raises(ConfigError, match=r"channels\.0\.gpu: set to 0, but the backend is "
                                              r"numpy \(backend auto found no usable CuPy.*"
                                              r"SAFEMON_CHANNELS__0__GPU=null"):
            Daemon(cfg, context=ctx, registry=CollectorRegistry()).start()
    finally:
        ctx.term()


def test_status_of_a_live_daemon_into_a_closed_pipe_exits_quietly(tmp_path: Path) -> None:
    """`safemon status | head -1` against a running daemon: no BrokenPipeError traceback,
    exit 141 (128 + SIGPIPE; safemon/cli.py)."""
    cfg = make_config(tmp_path, "2oo3", transport="ipc")
    path = tmp_path / "status.yaml"
    path.write_text(yaml.safe_dump(json.loads(cfg.model_dump_json())))
    with system(cfg):
        r_fd, w_fd = os.pipe()
        os.close(r_fd)  # the reader is gone before the first line is written
        try:
            r = subprocess.run([*PY, "status", "--config", str(path), "--timeout", "5"],
                               stdout=w_fd, stderr=subprocess.PIPE, text=True, timeout=60,
                               check=False)
        finally:
            os.close(w_fd)
    assert r.stderr == "" and r.returncode == 141
