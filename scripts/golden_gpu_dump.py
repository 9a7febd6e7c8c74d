"""Device probe: GPU vs reference on the golden families; dumps every differing case.

usage: python3 scripts/golden_gpu_dump.py OUT_DIR — writes OUT_DIR/golden_dump.npz (inputs, GPU
and reference C/ES of each differing case) and prints a summary line per case.
"""

from __future__ import annotations

import sys

import cupy as cp
import numpy as np

from safemon.kernels.catalog import auto_tile, make_variant, standard_variants
from safemon.kernels.gpu import gpu_matmul
from safemon.kernels.reference import reference_matmul
from safemon.patterns.golden import FAMILIES, generate_inputs


def main() -> int:
    out: dict[str, np.ndarray] = {}
    bad = 0
    for family in FAMILIES:
        for dims in [(16, 16, 16), (33, 20, 40)]:
            tile = auto_tile(dims[0], dims[1])
            for mode in ("exact", "fma"):
                for v in [make_variant(None, None, mode, tile), *standard_variants(mode, tile)]:
                    a, b = generate_inputs(family, dims)
                    c_r, es_r = reference_matmul(a, b, v)
                    c, es = gpu_matmul(cp.asarray(a), cp.asarray(b), v)
                    c_g, es_g = c.get(), es.get()
                    dc = int(np.sum(c_g.view(np.uint32) != c_r.view(np.uint32)))
                    de = int(np.sum(es_g != es_r))
                    if dc or de:
                        bad += 1
                        key = f"{family}|{'x'.join(map(str, dims))}|{v.name}"
                        print(f"DIFF {key}: C {dc} ES {de}")
                        for name, arr in (("a", a), ("b", b), ("c_gpu", c_g), ("c_ref", c_r),
                                          ("es_gpu", es_g), ("es_ref", es_r)):
                            out[f"{key}|{name}"] = arr
    np.savez(f"{sys.argv[1]}/golden_dump.npz", **out)
    print(f"{bad} differing cases")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
