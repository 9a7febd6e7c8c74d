"""One product for Nsight Compute: `python3 scripts/ncu_target.py MxNxK:variant`.

variant is "unprotected", "checksum/level" (fma mode, automatic tile and split) or "cublas"
(cupy.matmul, the baseline). Runs the call five times through `safemon.protected_matmul` /
`safemon.matmul` / `cupy.matmul` with device arrays.
"""

from __future__ import annotations

import sys

import cupy as cp
import numpy as np

import safemon
from safemon.dims import parse_dims


def main(spec: str) -> None:
    shape, variant = spec.split(":")
    m, n, k = parse_dims(shape)
    rng = np.random.default_rng(0)
    a = cp.asarray(rng.standard_normal((m, k), dtype=np.float32))
    b = cp.asarray(rng.standard_normal((k, n), dtype=np.float32))
    for _ in range(5):
        if variant == "cublas":
            cp.matmul(a, b)
        elif variant == "unprotected":
            safemon.matmul(a, b, mode="fma")
        else:
            checksum, level = variant.split("/")
            safemon.protected_matmul(a, b, checksum=checksum, level=level, mode="fma")
    cp.cuda.Device().synchronize()


if __name__ == "__main__":
    main(sys.argv[1])
