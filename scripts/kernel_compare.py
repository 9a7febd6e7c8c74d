"""Compare mmm.cu against an earlier version of itself, on the device machine (issue 14).

    python3 scripts/kernel_compare.py BASELINE.cu [--json OUT.json]

BASELINE.cu is an older mmm.cu (e.g. `git show HEAD~1:safemon/kernels/cuda/mmm.cu`) placed
anywhere; it is compiled with today's defines and with today's headers, or with the headers
of `--baseline-include DIR` (an older signature.cuh, say). For every shape × variant (auto
tile and split, as `safemon.matmul` picks them) it checks that the two builds give the same
C and ES bits (the baseline is the version the GPU tests verified against the reference), and
reports the kernel medians (CUDA events) of both and of cupy.matmul's kernel in the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

import cupy as cp
import numpy as np

from safemon.bench.overhead import variant_launcher
from safemon.bench.timing import median_kernel_ms
from safemon.kernels.catalog import TILES, auto_split, auto_tile, make_variant, variant_for_shape
from safemon.kernels.compiler import KernelBuild, load_module
from safemon.kernels.gpu import CUDA_DIR, KERNEL_NAME, build_for, build_reads_a_transposed

SHAPES = "4096x4096x4096,1024x1024x1024,64x4096x4096,1x4096x4096,256x1024x4096,80x80x80,97x61x113"
SPECS = "unprotected/fma,ones/M/fma,ones/F/fma,ones/I/fma,unprotected/exact"


def parse_spec(text: str) -> tuple[str | None, str | None, str]:
    """`unprotected/fma` or `ones/M/fma` → make_variant's (checksum, level, mode)."""
    parts = text.split("/")
    return (None, None, parts[1]) if parts[0] == "unprotected" else (parts[0], parts[1], parts[2])


def _compile(build: KernelBuild) -> None:
    """Compile `build` in a pool worker (fills CuPy's on-disk cache for the parent)."""
    load_module(build)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("baseline", type=Path)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--shapes", default=SHAPES, help="comma-separated MxNxK")
    ap.add_argument("--specs", default=SPECS, help="comma-separated, e.g. unprotected/fma,ones/M/fma")
    ap.add_argument("-D", dest="defines", action="append", default=[],
                    help="NAME=VALUE set in the new build's defines, replacing a define of the "
                         "same name (to try a setting)")
    ap.add_argument("-B", dest="baseline_defines", action="append", default=[],
                    help="NAME=VALUE set in the baseline build's defines (e.g. BK=32 for a tile "
                         "whose k-tile width changed)")
    ap.add_argument("--baseline-include", type=Path, default=CUDA_DIR,
                    help="directory of the headers the baseline includes (default: today's)")
    ap.add_argument("--warm", action="store_true",
                    help="compile every build in a pool of processes first (CuPy's disk cache)")
    ap.add_argument("--tile", default=None,
                    help="a tile name for every shape instead of auto_tile's (split: auto_split)")
    ap.add_argument("--split", type=int, default=None,
                    help="this split-K factor for every shape instead of auto_split's")
    ap.add_argument("--status", action="store_true",
                    help="give every launch a zeroed status block, as production launches have")
    args = ap.parse_args()
    shapes = [tuple(int(x) for x in s.split("x")) for s in args.shapes.split(",")]
    specs = [parse_spec(s) for s in args.specs.split(",")]
    rng = np.random.default_rng(0)
    rows = []
    mismatches = 0
    plans = []
    for m, n, k in shapes:
        for spec in specs:
            if args.tile is None and args.split is None:  # what safemon.matmul runs (level T's k-tiles too)
                v = variant_for_shape(m, n, k, *spec, None, None)
            else:
                tile = auto_tile(m, n, k, spec[1]) if args.tile is None else TILES[args.tile]
                v = make_variant(*spec, tile, args.split or auto_split(m, n, k, tile))
            build = build_for(v)
            old_defines = {**dict(build.defines), **dict(d.split("=", 1) for d in args.baseline_defines)}
            old_build = KernelBuild(args.baseline, tuple(sorted(old_defines.items())), build.options,
                                    (args.baseline_include,))
            extra = dict(d.split("=", 1) for d in args.defines)
            defines = {**dict(build.defines), **extra}
            new_build = KernelBuild(build.source, tuple(sorted(defines.items())), build.options,
                                    build.include_dirs)
            plans.append(((m, n, k), v, new_build, old_build))
    if args.warm:
        builds = list(dict.fromkeys(b for _, _, nb, ob in plans for b in (nb, ob)))
        workers = max(1, min(15, (os.cpu_count() or 2) - 1, len(builds)))
        with ProcessPoolExecutor(workers, mp_context=get_context("spawn")) as pool:
            list(pool.map(_compile, builds, chunksize=1))
        print(f"compiled {len(builds)} builds in {workers} processes", flush=True)
    blas = {}
    inputs = {}
    for (m, n, k), v, new_build, old_build in plans:
        if (m, n, k) not in inputs:
            a = cp.asarray(rng.standard_normal((m, k), dtype=np.float32))
            b = cp.asarray(rng.standard_normal((k, n), dtype=np.float32))
            inputs[(m, n, k)] = (a, b)
            blas[(m, n, k)] = median_kernel_ms(cp, lambda a=a, b=b: cp.matmul(a, b), args.repeats, 3) * 1e3
            print(f"{m}x{n}x{k}: cupy.matmul kernel {blas[(m, n, k)]:.1f} us", flush=True)
        a, b = inputs[(m, n, k)]
        blas_us = blas[(m, n, k)]
        # A build with A_KMAJOR=1 reads Aᵀ (a baseline mmm.cu older than that define
        # ignores it: give it -B A_KMAJOR=0).
        new = variant_launcher(cp, v, a, b, load_module(new_build).get_function(KERNEL_NAME),
                               build_reads_a_transposed(new_build), status_block=args.status)
        old = variant_launcher(cp, v, a, b, load_module(old_build).get_function(KERNEL_NAME),
                               build_reads_a_transposed(old_build), status_block=args.status)
        c_new, es_new = (x.copy() for x in new())
        c_old, es_old = (x.copy() for x in old())
        same = bool(cp.array_equal(c_new.view(cp.uint32), c_old.view(cp.uint32))) and (
            v.words == 0 or bool(cp.array_equal(es_new, es_old)))  # no ES words: buffer unused
        mismatches += not same
        t_new = median_kernel_ms(cp, new, args.repeats, 3) * 1e3
        t_old = median_kernel_ms(cp, old, args.repeats, 3) * 1e3
        row = {"shape": [m, n, k], "variant": v.name, "split": v.slices(k), "same_bits": same,
               "kernel_us": t_new, "baseline_us": t_old, "cupy_matmul_us": blas_us}
        rows.append(row)
        print(f"  {v.name:28s} x{v.slices(k):<3d} {'same' if same else 'DIFFERENT':9s} "
              f"new {t_new:9.1f} us  baseline {t_old:9.1f} us  ({t_old / t_new:4.2f}x faster)  "
              f"vs cuBLAS {blas_us / t_new:4.2f}x", flush=True)
    if args.json:
        args.json.write_text(json.dumps({"device": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(),
                                         "rows": rows}, indent=1))
    print(f"{mismatches} variant(s) with different bits")
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
