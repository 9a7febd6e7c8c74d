"""Helpers for the runtime tests: configs with small DTIs, an in-process system, a clean
reference result to compare every released C with."""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import yaml
import zmq
from prometheus_client import CollectorRegistry

from safemon.client import Client
from safemon.config import Config, load_config
from safemon.daemon import Daemon
from safemon.kernels.api import run_variant
from safemon.transport import keys_generate

N_CHANNELS = {"1oo1D": 1, "2oo2": 2, "1oo2D": 2, "2oo3": 3, "1oo3D": 3}

TIMING: dict[str, Any] = {
    "request_deadline_s": 0.3,
    "dti_s": 0.2,
    "selftest_deadline_s": 0.15,
    "dti_jitter": 0.1,
    "scrub_interval_s": 0.2,
    "heartbeat_interval_s": 0.05,
    "heartbeat_timeout_s": 0.3,
    "ftti_s": 1.0,
    "drain_timeout_s": 2.0,
}


def curve_over_tcp(keys: Path) -> dict[str, Any]:
    """Config sections (`make_config(extra=...)`) for a daemon on three free tcp:// ports of
    127.0.0.1 with CURVE on, its keys generated under `keys`."""
    keys_generate(keys)
    probe: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    ports = []
    for _ in range(3):
        s = probe.socket(zmq.ROUTER)
        ports.append(s.bind_to_random_port("tcp://127.0.0.1"))
        s.close(linger=0)
    probe.term()
    return {"security": {"curve": True, "keys_dir": str(keys)},
            "endpoints": {name: f"tcp://127.0.0.1:{port}"
                          for name, port in zip(("ingress", "control", "events"), ports, strict=True)}}


def make_config(
    tmp_path: Path,
    policy: str = "2oo3",
    *,
    placement: str = "stream",
    transport: str = "inproc",
    extra: dict[str, Any] | None = None,
    injection: bool = False,
) -> Config:
    """A numpy-backend config with small DTIs (0.2 s) for the tests; `injection` turns on
    `testing.fault_injection` (off by default, as in production)."""
    n = N_CHANNELS[policy]
    tag = uuid.uuid4().hex[:8]
    if transport == "inproc":
        endpoints = {f: f"inproc://{tag}-{f}" for f in ("ingress", "control", "events", "channel_base")}
    else:
        rd = tmp_path / "rt"
        endpoints = {"runtime_dir": str(rd), "ingress": "ipc://{runtime_dir}/in.sock",
                     "control": "ipc://{runtime_dir}/ctl.sock", "events": "ipc://{runtime_dir}/ev.sock",
                     "channel_base": "ipc://{runtime_dir}/ch"}
    data: dict[str, Any] = {
        "name": f"t-{tag}",
        "policy": policy,
        "backend": "numpy",
        "channels": [{"name": f"c{i}", "placement": placement} for i in range(n)],
        "timing": dict(TIMING),
        "restart": {"backoff_initial_s": 0.05, "max_restarts": 3, "window_s": 60.0},
        "endpoints": endpoints,
        "metrics": {"port": 0},
        "logging": {"format": "json", "level": "warning"},
        "testing": {"fault_injection": injection},
    }
    for key, value in (extra or {}).items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key].update(value)
        else:
            data[key] = value
    path = tmp_path / f"{tag}.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_config(path, env={})


@contextlib.contextmanager
def system(config: Config, **kwargs: Any) -> Iterator[tuple[Daemon, Client]]:
    """The whole system in this process: daemon loop on a thread, client on the caller's."""
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    daemon = Daemon(config, context=ctx, registry=CollectorRegistry(), **kwargs)
    daemon.start()
    thread = threading.Thread(target=daemon.run, name="daemon", daemon=True)
    thread.start()
    client = Client(config, context=ctx)
    try:
        assert daemon.ready.wait(120), "the voting set was never formed"  # cold NVRTC compiles on a GPU
        yield daemon, client
    finally:
        daemon.request_stop()
        thread.join(10)
        client.close()
        ctx.term()
    assert not thread.is_alive()


def reference(x: npt.NDArray[np.float32], w: npt.NDArray[np.float32], config: Config) -> npt.NDArray[np.float32]:
    """The clean result the channels must agree on (the NumPy reference, same variant)."""
    assert config.channels is not None
    v = config.channels[0].variant.to_variant(x.shape[0], w.shape[1], x.shape[1])
    c: npt.NDArray[np.float32] = run_variant(x, w, v, "numpy").c
    return c


def same_bits(a: npt.NDArray[np.float32], b: npt.NDArray[np.float32]) -> bool:
    return a.shape == b.shape and bool(np.array_equal(a.view(np.uint32), b.view(np.uint32)))


def wait_for(pred: Callable[[], bool], timeout: float = 5.0) -> bool:
    """Poll `pred` until true or `timeout` seconds (a bounded wait, never a timing assert)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.02)
    return pred()


def operands(seed: int = 0) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((8, 16)).astype(np.float32),
            rng.standard_normal((16, 12)).astype(np.float32))
