"""Quick kernel throughput probe (not the full `safemon bench`): TFLOP/s of the unprotected and a
few protected variants against cupy.matmul, measured in the same run with CUDA events (medians)."""

from __future__ import annotations

import json
import sys

import cupy as cp
import numpy as np

from safemon.kernels.catalog import auto_tile, make_variant
from safemon.kernels.gpu import gpu_matmul


def median_ms(fn, reps: int) -> float:
    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        s, e = cp.cuda.Event(), cp.cuda.Event()
        s.record()
        fn()
        e.record()
        e.synchronize()
        times.append(cp.cuda.get_elapsed_time(s, e))
    return float(np.median(times))


def main() -> None:
    out = []
    for m, n, k, reps in [(80, 80, 80, 200), (1024, 1024, 1024, 50), (4096, 4096, 4096, 10)]:
        rng = np.random.default_rng(0)
        a = cp.asarray(rng.standard_normal((m, k)).astype(np.float32))
        b = cp.asarray(rng.standard_normal((k, n)).astype(np.float32))
        flop = 2.0 * m * n * k
        base = median_ms(lambda: cp.matmul(a, b), reps)
        row = {"dims": f"{m}x{n}x{k}", "cublas_ms": base, "cublas_tflops": flop / base / 1e9}
        tile = auto_tile(m, n, k)
        specs = [(None, None, "fma"), (None, None, "exact"), ("ones", "I", "fma"), ("ones", "M", "fma"),
                 ("xor", "I", "fma"), ("twos", "I", "fma"), ("fletcher", "I", "fma"), ("crc32c", "I", "fma"),
                 ("crc32c", "M", "fma"), ("ones_fletcher", "I", "fma")]
        unprot = None
        for c, lv, mode in specs:
            v = make_variant(c, lv, mode, tile)
            ms = median_ms(lambda v=v: gpu_matmul(a, b, v), reps)
            if c is None and mode == "fma":
                unprot = ms
            row[v.name] = {"ms": ms, "tflops": flop / ms / 1e9, "vs_cublas": ms / base,
                           "vs_unprotected_fma": ms / unprot if unprot else None}
        out.append(row)
        print(json.dumps(row), flush=True)
    json.dump({"device": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(), "rows": out},
              open(sys.argv[1], "w"), indent=1)


if __name__ == "__main__":
    main()
