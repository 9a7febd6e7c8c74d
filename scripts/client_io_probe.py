"""Device probe: what a client's device-resident staging and release check cost alone.

usage: python3 scripts/client_io_probe.py [--size 80x80x80] [--iters 500] [--gaps-us 0,-1500,1500]
                                         [--other-context]

In one process, with no daemon: `ExchangeBuffers.stage` (x copied into the exported input
buffer, digested and finite-checked: one kernel, one read-back) and `ExchangeBuffers.take`
(slot 0 copied out and digested against a known digest), then their pieces: a
`DigestBatch(1)` (a zeroed two-word buffer), the copy-digest kernel queued, and the read-back
with its wait. Wall p50 / p90 in µs over `--iters` calls after 50 warm-up calls. The same
calls inside a voted request are timed by `scripts/span_probe.py`; the difference between the
two is what the request's surroundings add (another CUDA context on the GPU, wake-ups).
`--gaps-us` repeats every row with the process asleep (`time.sleep`) for that long before each
timed call, as a client is while the daemon votes, next to a host-only row (the same Python
bookkeeping with no device call) and the SM clock nvidia-smi reads meanwhile: whether a slow
step after a gap is the host's wake-up or the GPU's. A negative gap is spent spinning instead
(the process never sleeps); `--other-context` keeps another process using the GPU meanwhile.
Figures are reported, never asserted.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

import cupy as cp
import numpy as np

from safemon.device_io import ExchangeBuffers, digest_hex
from safemon.kernels.model_gpu import DigestBatch, copy_digest


def timed(fn: Callable[[], object], iters: int, gap_s: float = 0.0) -> tuple[float, float]:
    for _ in range(50):
        fn()
    cp.cuda.get_current_stream().synchronize()
    samples = []
    for _ in range(iters):
        if gap_s > 0:
            time.sleep(gap_s)
        elif gap_s < 0:  # a busy gap: the process never sleeps
            end = time.perf_counter() - gap_s
            while time.perf_counter() < end:
                pass
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    cp.cuda.get_current_stream().synchronize()
    return statistics.median(samples) * 1e6, float(np.percentile(samples, 90)) * 1e6


def host_only() -> object:
    """Python bookkeeping of about a request's size, no device call."""
    d = {f"k{i}": i for i in range(200)}
    return sorted(d.items(), key=lambda kv: -kv[1])[:3]


def sm_clock_mhz() -> str:
    """The SM clock nvidia-smi reads now (MHz), or '?'."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return "?"
    return out.splitlines()[0] if out else "?"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", default="80x80x80")
    ap.add_argument("--iters", type=int, default=500)
    ap.add_argument("--gaps-us", default="0",
                    help="gaps before each call, µs; a negative gap is spent spinning")
    ap.add_argument("--other-context", action="store_true",
                    help="meanwhile, another process runs a small kernel and waits for it "
                         "every 0.5 ms on the same GPU (another CUDA context, as a daemon's)")
    args = ap.parse_args()
    if args.other_context:
        other = subprocess.Popen([sys.executable, "-c", OTHER_CONTEXT])
        time.sleep(3.0)  # its context is up and its kernel compiled
        print("# another process launches and waits for a small kernel every 0.5 ms")
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
        "host only (no device call)": host_only,
    }
    print(f"# {cp.cuda.runtime.getDeviceProperties(0)['name'].decode()}, {args.size}, "
          f"{args.iters} calls, wall µs")
    for gap_us in (float(g) for g in args.gaps_us.split(",")):
        print(f"## gap {gap_us:.0f} µs before each call")
        for name, fn in rows.items():
            p50, p90 = timed(fn, args.iters, gap_us / 1e6)
            print(f"  {name:38s} p50 {p50:7.1f}  p90 {p90:7.1f}", flush=True)
        print(f"  SM clock after the rows: {sm_clock_mhz()} MHz")
    if args.other_context:
        other.terminate()
        other.wait(10)
    return 0


#: The other process of `--other-context`: a CUDA context of its own that keeps using the GPU.
OTHER_CONTEXT = """
import time, cupy as cp
x = cp.ones(6400, dtype=cp.float32)
while True:
    (x * 2).sum()
    cp.cuda.get_current_stream().synchronize()
    end = time.perf_counter() + 0.0005
    while time.perf_counter() < end:
        pass
"""


if __name__ == "__main__":
    raise SystemExit(main())
