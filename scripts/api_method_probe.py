"""How the API wall-time ratio against `cupy.matmul` depends on the way it is measured
(issue 14, "API wall ≥ 0.80× at the inference shapes").

usage: python3 scripts/api_method_probe.py [MxNxK ...]   (default: the issue's inference shapes)

`safemon bench` times each call in a block of its own (cupy.matmul's block first, then
safemon's), with one A and one B for every call, so B stays in the L2 cache from one call to
the next wherever it fits. `scripts/launch_path_probe.py` alternates the calls round by round.
An inference app does neither: it calls one layer after another, each with its own weight, so
a layer's B is not in L2 when its product starts. This probe times `cupy.matmul(a, b)` and
`safemon.matmul(a, b, mode="fma")` (each call followed by a stream synchronisation, wall
clock) three ways in one process:

  block        the bench's method: `REPS` calls of one, then `REPS` of the other, one B
  interleaved  one call of each per round, one B
  rotating     one call of each per round, B taken in turn from `ROTATE` weights of the
               shape's size, together at least `ROTATE_BYTES` (twice the H100's 50 MiB L2),
               so that no call finds its B in L2 from its previous use

and prints p50 / p99 µs and the ratio cupy ÷ safemon for each (every call on an idle GPU).
Before timing, two safemon calls on each of two weights are compared bit for bit (the
call is repeatable whichever weight it gets). Figures are reported, never asserted.
"""

from __future__ import annotations

import sys
import time

import cupy as cp
import numpy as np

import safemon

REPS, WARMUP = 1000, 100
ROTATE_BYTES = 2 * 50 * 2**20
SHAPES = ["1x4096x4096", "64x4096x4096", "256x1024x4096", "80x80x80"]


def _timed(fn, sync) -> float:
    t0 = time.perf_counter()
    fn()
    sync()
    return time.perf_counter() - t0


def probe(m: int, n: int, k: int) -> list[tuple[str, float, float, float, float]]:
    rng = np.random.default_rng(0)
    a = cp.asarray(rng.standard_normal((m, k), dtype=np.float32))
    rotate = max(2, -(-ROTATE_BYTES // (4 * k * n)))
    bs = [cp.asarray(rng.standard_normal((k, n), dtype=np.float32)) for _ in range(rotate)]
    sync = cp.cuda.get_current_stream().synchronize
    calls = {"cupy": lambda b: cp.matmul(a, b),
             "safemon": lambda b: safemon.matmul(a, b, mode="fma")}
    for b in bs[:2]:  # every weight gives the product of the public call
        want = safemon.matmul(a, b, mode="fma")
        again = calls["safemon"](b)
        sync()
        assert bool((want.view(cp.uint32) == again.view(cp.uint32)).all())
    rows = []
    # block: the bench's order (cupy first), one B
    block = {}
    for name, fn in calls.items():
        for _ in range(WARMUP):
            fn(bs[0])
        sync()
        block[name] = [_timed(lambda: fn(bs[0]), sync) for _ in range(REPS)]
    rows.append(("block", *_stats(block)))
    for method in ("interleaved", "rotating"):
        samples: dict[str, list[float]] = {name: [] for name in calls}
        for rep in range(REPS + WARMUP):
            b = bs[rep % len(bs)] if method == "rotating" else bs[0]
            order = list(calls.items()) if rep % 2 == 0 else list(calls.items())[::-1]
            for name, fn in order:
                t = _timed(lambda: fn(b), sync)
                if rep >= WARMUP:
                    samples[name].append(t)
        rows.append((f"{method}" + (f" ({len(bs)} weights)" if method == "rotating" else ""),
                     *_stats(samples)))
    return rows


def _stats(samples: dict[str, list[float]]) -> tuple[float, float, float, float]:
    c = np.asarray(samples["cupy"]) * 1e6
    s = np.asarray(samples["safemon"]) * 1e6
    return (float(np.median(c)), float(np.percentile(c, 99)), float(np.median(s)),
            float(np.percentile(s, 99)))


def main(argv: list[str]) -> int:
    shapes = argv or SHAPES
    props = cp.cuda.runtime.getDeviceProperties(0)
    print(f"device {props['name'].decode()}, L2 {props['l2CacheSize'] / 2**20:.0f} MiB; "
          f"{REPS} timed calls of each after {WARMUP}; p50 / p99 µs")
    print("| M×N×K | method | cupy.matmul | safemon.matmul fma | cupy ÷ safemon (p50) |")
    print("|---|---|---:|---:|---:|")
    for shape in shapes:
        m, n, k = (int(v) for v in shape.split("x"))
        for method, c50, c99, s50, s99 in probe(m, n, k):
            print(f"| {shape} | {method} | {c50:.1f} / {c99:.1f} | {s50:.1f} / {s99:.1f} | "
                  f"{c50 / s50:.3f} |", flush=True)
        cp.get_default_memory_pool().free_all_blocks()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
