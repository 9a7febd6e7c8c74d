"""Where the API time goes, and what other tiles would give (issue 14; device machine).

`python3 scripts/speed_explore.py profile`: cProfile of repeated calls (80³, device arrays):
safemon.matmul, protected_matmul ones/F and the same with an ECC-protected B; the top
functions by own time.
`python3 scripts/speed_explore.py tiles`: kernel-only CUDA-event medians of the inference
shapes for each tile with its automatic split, unprotected fma (what a tile change would buy).
"""

from __future__ import annotations

import cProfile
import pstats
import sys

import cupy as cp
import numpy as np

import safemon
from safemon.bench.overhead import variant_launcher
from safemon.bench.timing import median_kernel_ms
from safemon.ecc import ProtectedArray
from safemon.kernels.catalog import TILES, auto_split, make_variant


def profile() -> None:
    rng = np.random.default_rng(0)
    a = cp.asarray(rng.standard_normal((80, 80), dtype=np.float32))
    b = cp.asarray(rng.standard_normal((80, 80), dtype=np.float32))
    pb = ProtectedArray(b, name="w")
    calls = {
        "matmul": lambda: safemon.matmul(a, b, mode="fma"),
        "ones/F": lambda: safemon.protected_matmul(a, b, checksum="ones", level="F", mode="fma"),
        "ones/F ECC": lambda: safemon.protected_matmul(a, pb, checksum="ones", level="F", mode="fma"),
        "cupy.matmul+sync": lambda: (cp.matmul(a, b), cp.cuda.get_current_stream().synchronize()),
    }
    for name, fn in calls.items():
        for _ in range(50):
            fn()
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(500):
            fn()
        prof.disable()
        print(f"===== {name}: 500 calls")
        pstats.Stats(prof).sort_stats("tottime").print_stats(14)


def tiles() -> None:
    rng = np.random.default_rng(0)
    for m, n, k in [(1, 4096, 4096), (64, 4096, 4096), (256, 1024, 4096), (1024, 1024, 1024)]:
        a = cp.asarray(rng.standard_normal((m, k), dtype=np.float32))
        b = cp.asarray(rng.standard_normal((k, n), dtype=np.float32))
        for name, tile in TILES.items():
            for split in sorted({1, auto_split(m, n, k, tile)}):
                v = make_variant(None, None, "fma", tile, split)
                us = median_kernel_ms(cp, variant_launcher(cp, v, a, b), 30, 5) * 1e3
                print(f"{m}x{n}x{k} {name:6s} split {split:3d} ({v.slices(k):3d} slices): {us:9.1f} us")


if __name__ == "__main__":
    {"profile": profile, "tiles": tiles}[sys.argv[1]]()
