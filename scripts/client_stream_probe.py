"""Device probe: does the client's staging and release check wait behind the third channel?

    PYTHONPATH=$PWD SAFEMON_TIMING__SPIN_S=0.005 python3 scripts/client_stream_probe.py \
        [--rounds 6] [--reps 40]

With inline 2oo3 channels the daemon answers once two agree; the third channel's pass (its
stream at the least priority, `safemon.channels.stream_priority`) is then still running on
the GPU while the client copies the released slot out and digests it
(`ExchangeBuffers.take`). Under CUDA MPS the client's kernels and the channels' share the
GPU's SMs, so the client's copy may wait for the third channel's blocks. This probe starts
a real 2oo3 daemon with inline channels (the runtime bench's config, cupy, ipc://), and
times, in alternating rounds, `Client.run` of the issue-16 MLP and `Client.matmul` at 80³
with the client's CUDA work on:
- "current": CuPy's current stream (the null stream here), as `Client` does today;
- "greatest": a non-blocking stream of CUDA's greatest priority.
Per arm: p50 / p99 of the round trip, and p50 of the client's staging (`stage`) and release
check (`take`), timed by wrapping those two methods. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import cupy as cp
import numpy as np
import yaml

from safemon.bench.runtime import ModelShape, _model_operands
from safemon.bench.vote import _bench_config, running_daemon
from safemon.channels.stream_priority import device_priority_range
from safemon.client import Client
from safemon.device_io import ExchangeBuffers
from safemon.models import Layer

SPANS: dict[str, list[float]] = {"stage": [], "take": []}


def _timed_method(name: str) -> None:
    original = getattr(ExchangeBuffers, name)

    def timed(self: Any, *args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return original(self, *args, **kwargs)
        finally:
            SPANS[name].append(time.perf_counter() - t0)

    setattr(ExchangeBuffers, name, timed)


def _p(xs: list[float], q: float) -> float:
    return float(np.percentile(np.array(xs) * 1e6, q))



@contextlib.contextmanager
def inline_mlp_daemon() -> Iterator[tuple[Client, dict[str, Callable[[], Any]]]]:
    """A real 2oo3 daemon with inline channels (the runtime bench's config, cupy, ipc://),
    with the issue-16 MLP and an 80³ weight registered; yields the client and the two
    calls ("mlp": `Client.run` on a CuPy x, "80": `Client.matmul` on a CuPy x). Shared by
    `gap_probe.py`."""
    work = Path(tempfile.mkdtemp(prefix="safemon-inline-probe-"))
    cfg = _bench_config(work, "ipc", "cupy", ["80x80x80"])
    cfg["channels"] = [{"name": f"c{i}", "placement": "inline"} for i in range(3)]
    cfg["limits"] = {"min_channel_gflops": 100.0}
    path = work / "probe.yaml"
    path.write_text(yaml.safe_dump(cfg))
    rng = np.random.default_rng(0)
    layers, weights, x_host = _model_operands(ModelShape(), rng)
    x80 = cp.asarray(rng.standard_normal((80, 80), dtype=np.float32))
    w80 = rng.standard_normal((80, 80), dtype=np.float32)
    dx = cp.asarray(x_host)
    with running_daemon(path, work / "daemon.log", 240.0) as client:
        client.control_timeout_s = 60.0
        ids = {k: client.register_weight(w) for k, w in weights.items()}
        mid = client.register_model([Layer(ids[ly.weight_id], ly.bias, ly.act) for ly in layers])
        wid = client.register_weight(w80)
        yield client, {"mlp": lambda: client.run(mid, dx, timeout=60.0),
                       "80": lambda: client.matmul(x80, wid, timeout=30.0)}


def same_bits_as_before(want: dict[str, Any], req: str, out: Any, what: str) -> None:
    """Keep `out`'s bits as `want[req]` the first time; after that, exit naming `what` if
    they differ. Shared by `gap_probe.py`."""
    got = cp.asnumpy(out)
    if want[req] is None:
        want[req] = got
    elif not np.array_equal(got.view(np.uint32), want[req].view(np.uint32)):
        raise SystemExit(f"{what}: other bits than before")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--reps", type=int, default=40)
    args = ap.parse_args()
    _timed_method("stage")
    _timed_method("take")
    _least, greatest = device_priority_range()
    high = cp.cuda.Stream(non_blocking=True, priority=greatest)
    arms = {"current": None, "greatest": high}
    res: dict[tuple[str, str], dict[str, list[float]]] = {
        (a, r): {"rtt": [], "stage": [], "take": []} for a in arms for r in ("mlp", "80")}
    with inline_mlp_daemon() as (client, calls):
        want = {r: None for r in calls}
        print(f"client stream probe, {datetime.datetime.now(datetime.UTC):%FT%TZ}, "
              f"{cp.cuda.runtime.getDeviceProperties(0)['name'].decode()}, "
              f"greatest priority {greatest}, spin_s {client.config.timing.spin_s}")
        for rnd in range(args.rounds + 1):  # round 0 warms up
            order = list(arms) if rnd % 2 == 0 else list(reversed(arms))
            for arm in order:
                stream = arms[arm]
                for req, call in calls.items():
                    for _ in range(args.reps):
                        SPANS["stage"].clear()
                        SPANS["take"].clear()
                        t0 = time.perf_counter()
                        if stream is None:
                            out = call()
                        else:
                            with stream:
                                out = call()
                        t1 = time.perf_counter()
                        if not client.last_request_device:
                            raise SystemExit(f"{req}: fell back to host memory")
                        if rnd == 0:
                            continue
                        r = res[(arm, req)]
                        r["rtt"].append(t1 - t0)
                        r["stage"] += SPANS["stage"]
                        r["take"] += SPANS["take"]
                    same_bits_as_before(want, req, out, f"{req} on {arm}")
    print("| request | client stream | round trip p50 / p99 µs | stage p50 µs | take p50 µs |")
    print("|---|---|---|---|---|")
    for (arm, req), r in res.items():
        print(f"| {req} | {arm} | {_p(r['rtt'], 50):,.0f} / {_p(r['rtt'], 99):,.0f} | "
              f"{statistics.median(r['stage']) * 1e6:,.0f} | "
              f"{statistics.median(r['take']) * 1e6:,.0f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
