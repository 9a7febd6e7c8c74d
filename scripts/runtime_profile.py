"""Device probe: where a voted request's time goes in the daemon and the client.

usage: python3 scripts/runtime_profile.py [--placement process|stream] [--size 80x80x80]
                                          [--requests 300] [--host] [--out DIR]

`--host` sends NumPy arrays to a NumPy-backend daemon (no GPU needed).

Starts a 2oo3 CuPy daemon (`safemon run` under cProfile, ipc://, the benchmark's config)
and sends `--requests` sequential `Client.matmul` requests with a CuPy x (the CUDA IPC
path; `--host`: through host memory), profiling this process too. Prints the round trip
and critical-path kernel medians and the top functions of both profiles (cumulative and
own time), and leaves the .prof files in --out.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml


def _top(path_or_prof: object, title: str, n: int = 25) -> str:
    out = io.StringIO()
    st = pstats.Stats(path_or_prof, stream=out)  # type: ignore[arg-type]
    out.write(f"==== {title}: own time\n")
    st.sort_stats("tottime").print_stats(n)
    out.write(f"==== {title}: cumulative (safemon)\n")
    st.sort_stats("cumtime").print_stats("safemon", n)
    return out.getvalue()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--placement", default="process")
    ap.add_argument("--size", default="80x80x80")
    ap.add_argument("--requests", type=int, default=300)
    ap.add_argument("--host", action="store_true")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    from safemon.bench.vote import _bench_config
    from safemon.client import Client

    out = Path(args.out or tempfile.mkdtemp(prefix="safemon-prof-"))
    out.mkdir(parents=True, exist_ok=True)
    m, n, k = (int(v) for v in args.size.split("x"))
    backend = "numpy" if args.host else "cupy"
    cfg = _bench_config(out, "ipc", backend, ["16x16x16"])
    cfg["channels"] = [{"name": f"c{i}", "placement": args.placement} for i in range(3)]
    cfg_path = out / "config.yaml"
    cfg_path.write_text(yaml.safe_dump(cfg))
    prof_path = out / f"daemon-{args.placement}.prof"
    with (out / "daemon.log").open("w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "cProfile", "-o", str(prof_path), "-m",
                                 "safemon", "run", "--config", str(cfg_path)], stderr=err)
    client = Client(cfg_path, control_timeout_s=60.0, device_io=not args.host)
    try:
        end = time.monotonic() + 240
        while True:
            try:
                st = client.status()
                if st["channels"] and all(c["state"] == "UP" for c in st["channels"]):
                    break
            except Exception:  # not up yet
                pass
            if time.monotonic() > end or proc.poll() is not None:
                raise SystemExit("daemon not up")
            time.sleep(0.2)
        rng = np.random.default_rng(0)
        wid = client.register_weight(rng.standard_normal((k, n)).astype(np.float32))
        x = rng.standard_normal((m, k)).astype(np.float32)
        if not args.host:
            import cupy as cp

            x = cp.asarray(x)
        for _ in range(20):
            client.matmul(x, wid, timeout=30.0)
        rtt, ks = [], []
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(args.requests):
            t0 = time.perf_counter()
            client.matmul(x, wid, timeout=30.0)
            rtt.append(time.perf_counter() - t0)
            ks.append(client.last_kernel_seconds or 0.0)
        prof.disable()
        r, kk = np.array(rtt) * 1e6, np.array(ks) * 1e6
        print(f"{args.placement} {args.size} {'host' if args.host else 'cuda-ipc'} "
              f"(device path used: {client.last_request_device}): round trip p50 "
              f"{np.median(r):.0f} p99 {np.percentile(r, 99):.0f} µs; critical-path channel "
              f"time p50 {np.median(kk):.0f} µs; overhead p50 {np.median(r - kk):.0f} µs")
        prof.dump_stats(str(out / "client.prof"))
    finally:
        client.close()
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    print(_top(str(out / "client.prof"), "client"))
    print(_top(str(prof_path), "daemon"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
