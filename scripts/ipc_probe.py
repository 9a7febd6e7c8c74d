"""Device probe: where a device-resident request's time goes inside the channels.

usage: python3 scripts/ipc_probe.py [--size 80x80x80] [--iters 200] [--channels 1,3]
                                    [--variant ones/I/exact] [--ecc]

This process plays the client (`safemon.device_io.ExchangeBuffers`); each of N worker
processes plays a channel's `_run_device` loop (`ImportedBuffers` read, `run_variant`,
`device_digests`, write, stream synchronize), all N released together per iteration, as
three channels on one GPU are. Per step, the median over iterations of the time to that
step's end (each step is synchronised in the instrumented pass, so steps add up), and the
median of the whole un-instrumented iteration, for N = 1 and N = 3 concurrent workers.
No daemon and no ZeroMQ: this isolates the GPU side of the path.
"""

from __future__ import annotations

import argparse
import itertools
import multiprocessing as mp
import time
from typing import Any

import numpy as np

STEPS = ("read", "kernel", "digests", "write", "sync")


def _worker(conn: Any, handles: tuple[str, str], shape: tuple[int, int, int], variant: str,
            out_offset: int, ecc: bool) -> None:
    import cupy as cp

    from safemon.config import VariantConfig
    from safemon.device_io import ImportedBuffers
    from safemon.ecc import ProtectedArray
    from safemon.kernels.api import run_variant
    from safemon.kernels.backend import Backend
    from safemon.kernels.model_gpu import device_digests

    m, n, k = shape
    checksum, level, mode = ([*variant.split("/"), None, None])[:3]
    vc = (VariantConfig(checksum=None, level=None, mode=mode or "fma") if checksum == "unprotected"
          else VariantConfig(checksum=checksum, level=level, mode=mode or "exact"))
    stream = cp.cuda.Stream(non_blocking=True)
    w_host = np.random.default_rng(1).standard_normal((k, n)).astype(np.float32)
    with stream:
        w: Any = (ProtectedArray.from_host(w_host, name="w", backend=Backend.CUPY) if ecc
                  else cp.asarray(w_host))
    stream.synchronize()
    imports = ImportedBuffers()
    v = vc.to_variant(m, n, k)
    conn.send("ready")
    while True:
        cmd = conn.recv()
        if cmd == "stop":
            break
        marks = [time.perf_counter()]
        with stream:
            x = cp.empty((m, k), dtype=cp.float32)
            imports.read(handles[0], x, stream)
            if cmd == "steps":
                stream.synchronize()
                marks.append(time.perf_counter())
            r = run_variant(x, w, v, "cupy")
            if cmd == "steps":
                stream.synchronize()
                marks.append(time.perf_counter())
            device_digests([r.c, r.es, x])
            if cmd == "steps":
                marks.append(time.perf_counter())
            imports.write(handles[1], out_offset, r.c, stream)
            if cmd == "steps":
                stream.synchronize()
                marks.append(time.perf_counter())
            stream.synchronize()
            marks.append(time.perf_counter())
        conn.send([b - a for a, b in itertools.pairwise(marks)])
    imports.close_all()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", default="80x80x80")
    ap.add_argument("--iters", type=int, default=200)
    ap.add_argument("--channels", default="1,3")
    ap.add_argument("--variant", default="ones/I/exact")
    ap.add_argument("--ecc", action="store_true")
    args = ap.parse_args()
    import cupy as cp

    from safemon.device_io import ExchangeBuffers

    m, n, k = (int(v) for v in args.size.split("x"))
    ex = ExchangeBuffers(3)
    x = cp.asarray(np.random.default_rng(0).standard_normal((m, k)).astype(np.float32))
    staged = ex.stage(x, n)
    t = []
    for _ in range(args.iters):
        t0 = time.perf_counter()
        ex.stage(x, n)
        t.append(time.perf_counter() - t0)
    print(f"client stage (copy, finite check, digest, sync): p50 {np.median(t) * 1e6:.0f} µs")
    ctx = mp.get_context("spawn")
    for count in (int(c) for c in args.channels.split(",")):
        pipes, procs = [], []
        for i in range(count):
            a, b = ctx.Pipe()
            p = ctx.Process(target=_worker, args=(b, (staged.x_ipc, staged.out_ipc), (m, n, k),
                                                  args.variant, i * staged.out_slot_bytes,
                                                  args.ecc))
            p.start()
            pipes.append(a)
            procs.append(p)
        for a in pipes:
            assert a.recv() == "ready"
        for mode in ("steps", "whole"):
            per: list[list[float]] = []
            wall: list[float] = []
            for it in range(args.iters + 10):
                t0 = time.perf_counter()
                for a in pipes:
                    a.send(mode)
                got = [a.recv() for a in pipes]
                if it >= 10:
                    wall.append(time.perf_counter() - t0)
                    per += got
            arr = np.array(per) * 1e6
            if mode == "steps":
                cols = ", ".join(f"{s} {np.median(arr[:, i]):.0f}" for i, s in enumerate(STEPS))
                print(f"{count} channel(s), instrumented, µs p50 per step: {cols}")
            else:
                print(f"{count} channel(s), whole iteration p50 {np.median(arr[:, 0]):.0f} µs, "
                      f"p99 {np.percentile(arr[:, 0], 99):.0f}; all {count} done p50 "
                      f"{np.median(wall) * 1e6:.0f} µs")
        for a in pipes:
            a.send("stop")
        for p in procs:
            p.join(30)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
