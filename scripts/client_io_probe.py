"""Device probe: what a client's device-resident staging and release check cost alone.

usage: python3 scripts/client_io_probe.py [--size 80x80x80] [--iters 500]

In one process, with no daemon: `ExchangeBuffers.stage` (x copied into the exported input
buffer, digested and finite-checked: one kernel, one read-back) and `ExchangeBuffers.take`
(slot 0 copied out and digested against a known digest), then their pieces: a
`DigestBatch(1)` (a zeroed two-word buffer), the copy-digest kernel queued, and the read-back
with its wait. Wall p50 / p90 in µs over `--iters` calls after 50 warm-up calls. The same
calls inside a voted request are timed by `scripts/span_probe.py`; the difference between the
two is what the request's surroundings add (another CUDA context on the GPU, wake-ups).
Figures are reported, never asserted.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import cupy as cp
import numpy as np

from safemon.device_io import ExchangeBuffers, digest_hex
from safemon.kernels.model_gpu import DigestBatch, copy_digest


def timed(fn: Callable[[], object], iters: int) -> tuple[float, float]:
    for _ in range(50):
        fn()
    cp.cuda.get_current_stream().synchronize()
    samples = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    cp.cuda.get_current_stream().synchronize()
    return statistics.median(samples) * 1e6, float(np.percentile(samples, 90)) * 1e6


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", default="80x80x80")
    ap.add_argument("--iters", type=int, default=500)
    args = ap.parse_args()
    m, n, k = (int(v) for v in args.size.split("x"))
    rng = np.random.default_rng(0)
    x = cp.asarray(rng.standard_normal((m, k), dtype=np.float32))
    c = cp.asarray(rng.standard_normal((m, n), dtype=np.float32))
    ex = ExchangeBuffers(3)
    staged = ex.stage(x, n)
    device = int(x.device.id)
    out = ex._outputs[device]
    slot0 = cp.ndarray((m, n), cp.float32, cp.cuda.MemoryPointer(out.memory, 0))
    digest = digest_hex(copy_digest(c, slot0)[0])  # slot 0 holds c from here on
    dst = cp.empty_like(c)

    def pieces_batch() -> object:
        return DigestBatch(1)

    def pieces_queue() -> object:
        batch = DigestBatch(1)
        batch.add_copy(slot0, dst)
        return batch

    rows = {
        "stage (copy in, digest, wait)": lambda: ex.stage(x, n),
        "take (copy out, digest, wait)": lambda: ex.take(device, staged, 0, digest),
        "DigestBatch(1) alone": pieces_batch,
        "DigestBatch(1) + copy-digest queued": pieces_queue,
        "copy_digest (all of it)": lambda: copy_digest(slot0, dst),
        "stream synchronize alone": lambda: cp.cuda.get_current_stream().synchronize(),
    }
    print(f"# {cp.cuda.runtime.getDeviceProperties(0)['name'].decode()}, {args.size}, "
          f"{args.iters} calls, wall µs")
    for name, fn in rows.items():
        p50, p90 = timed(fn, args.iters)
        print(f"  {name:38s} p50 {p50:7.1f}  p90 {p90:7.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
