"""Device probe: what `safemon.torch` adds to one protected layer's request, step by step.

usage: python3 scripts/torch_adapter_probe.py [--n 4096] [--reps 60] [--placement inline]
                                              [--spin-s 0.005]

Issue 17 asks that a protected 64×N×N layer cost at most 1.3× the same product through the
client with CuPy arrays. This probe starts a 2oo3 CuPy daemon (the runtime benchmark's
config, ipc://) and times, interleaved, each adding one step of the adapter's path to the
one before it (medians over `--reps`, µs, a device-wide synchronize before and after each
call, as the example's layer bench does):

- ``client.matmul, CuPy x``: issue 17's baseline, the same product through the client;
- ``client.run, CuPy x`` (x converted once, outside the loop; the layer's one-layer model);
- ``+ x through DLPack`` (`cupy.from_dlpack` of the torch tensor on every call);
- ``+ output through DLPack`` (`torch.from_dlpack` of the result);
- ``ChainBinding`` (the same two conversions and the BusyError retry loop; this layer has
  no bias and no activation, so since 2026-12-06 it goes as `client.matmul`, not `run`);
- ``custom op`` (`torch.ops.safemon.forward`: the torch.library dispatch);
- ``ProtectedLinear`` (its checks, reshape and the op).

Figures are reported, never asserted.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import yaml


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--reps", type=int, default=60)
    ap.add_argument("--placement", default="inline")
    ap.add_argument("--spin-s", type=float, default=0.005)
    args = ap.parse_args()
    if args.spin_s:
        os.environ["SAFEMON_TIMING__SPIN_S"] = str(args.spin_s)
    import cupy
    import torch
    from torch import nn
    from torch.utils.dlpack import from_dlpack

    from safemon.bench.vote import _bench_config, running_daemon
    from safemon.torch import ProtectedLinear
    from safemon.torch.op import forward as safemon_forward

    out = Path(tempfile.mkdtemp(prefix="safemon-adapter-"))
    cfg = _bench_config(out, "ipc", "cupy", ["16x16x16"])
    cfg["channels"] = [{"name": f"c{i}", "placement": args.placement} for i in range(3)]
    path = out / "config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    dev = torch.device("cuda")
    torch.manual_seed(0)
    n = args.n
    linear = nn.Linear(n, n, bias=False).to(dev).eval()
    x = torch.randn(64, n, device=dev)
    with running_daemon(path, out / "daemon.log", 240.0) as client:
        client.control_timeout_s = 60.0
        layer = ProtectedLinear(linear, client, name="probe", timeout=5.0)
        mid = layer.binding.model_id
        arr = cupy.from_dlpack(x)
        wid = layer.binding.layers[0].weight_id
        calls: dict[str, Any] = {
            "client.matmul, CuPy x": lambda: client.matmul(arr, wid, timeout=5.0),
            "client.run, CuPy x": lambda: client.run(mid, arr, timeout=5.0),
            "+ x through DLPack": lambda: client.run(mid, cupy.from_dlpack(x), timeout=5.0),
            "+ output through DLPack": lambda: from_dlpack(
                client.run(mid, cupy.from_dlpack(x), timeout=5.0)),
            "ChainBinding": lambda: layer.binding(x),
            "custom op": lambda: safemon_forward(x, layer._key, n),
            "ProtectedLinear": lambda: layer(x),
            "PyTorch (nn.Linear)": lambda: linear(x),
        }
        times: dict[str, list[float]] = {k: [] for k in calls}
        with torch.inference_mode():
            for i in range(args.reps + 3):
                for name, call in calls.items():
                    torch.cuda.synchronize()
                    t0 = time.perf_counter()
                    call()
                    torch.cuda.synchronize()
                    if i >= 3:
                        times[name].append((time.perf_counter() - t0) * 1e6)
    base = statistics.median(times["client.matmul, CuPy x"])
    name = torch.cuda.get_device_name(0)
    print(f"torch adapter probe: 64x{n}x{n}, {args.placement} channels, spin_s {args.spin_s}, "
          f"{args.reps} reps, {name}, {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}")
    print("| call | p50 µs | p90 µs | p50 / client.matmul |")
    print("|---|---:|---:|---:|")
    for k, v in times.items():
        print(f"| {k} | {statistics.median(v):,.0f} | {np.percentile(v, 90):,.0f} | "
              f"{statistics.median(v) / base:.3f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
