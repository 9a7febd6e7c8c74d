"""Probe: the `large` tile's k-tile copies, asynchronous from Aᵀ (mmm.cu's A_KMAJOR) against
the alternatives, on the device machine (issue 14).

    python3 scripts/kmajor_probe.py [--shapes 4096x4096x4096,...] [--specs unprotected/fma,...]

For every shape × variant on its automatic tile and split it times the production build and
the builds of `ALTERNATIVES` (the production defines with some removed or replaced). Every
launch includes what a caller pays: a build that reads Aᵀ transposes A on every call
(`variant_launcher`), and that time is also reported alone. Each alternative's C and ES must
equal the production build's bit for bit. Kernel medians (CUDA events) of every build and of
cupy.matmul in the same run, interleaved in rounds.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import cupy as cp
import numpy as np

from safemon.bench.overhead import variant_launcher
from safemon.bench.timing import median_kernel_ms
from safemon.kernels.catalog import auto_split, auto_tile, make_variant
from safemon.kernels.compiler import KernelBuild, load_module
from safemon.kernels.gpu import KERNEL_NAME, build_for, build_reads_a_transposed, transpose

#: name → (defines removed from the production build, defines set on it). A build reads Aᵀ
#: exactly when it ends up with A_KMAJOR=1.
ALTERNATIVES: dict[str, tuple[tuple[str, ...], dict[str, str]]] = {
    # The `large` loop before the change: k-tiles through registers.
    "registers": (("TILE_ASYNC", "A_KMAJOR"), {}),
    # Asynchronous copies of A as it is: one word per copy.
    "async-a": (("A_KMAJOR",), {}),
    "stages2": ((), {"ASYNC_STAGES": "2"}),
}


def parse_spec(text: str) -> tuple[str | None, str | None, str]:
    parts = text.split("/")
    return (None, None, parts[1]) if parts[0] == "unprotected" else (parts[0], parts[1], parts[2])


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="4096x4096x4096,2048x2048x2048,1024x1024x1024,512x4096x4096,"
                    "64x4096x4096,256x1024x4096")
    ap.add_argument("--specs", default="unprotected/fma,ones/M/fma,ones/T/fma,twos/M/fma")
    ap.add_argument("--candidates", default=",".join(ALTERNATIVES))
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    names = args.candidates.split(",")
    rng = np.random.default_rng(0)
    rows, mismatches = [], 0
    for shape in args.shapes.split(","):
        m, n, k = (int(x) for x in shape.split("x"))
        a = cp.asarray(rng.standard_normal((m, k), dtype=np.float32))
        b = cp.asarray(rng.standard_normal((k, n), dtype=np.float32))
        a_t = cp.empty((k, m), dtype=cp.float32)
        transpose_us = median_kernel_ms(cp, lambda a=a, a_t=a_t: transpose(a, a_t), args.repeats, 3) * 1e3
        for spec in args.specs.split(","):
            checksum, level, mode = parse_spec(spec)
            tile = auto_tile(m, n, k, level)
            v = make_variant(checksum, level, mode, tile, auto_split(m, n, k, tile))
            base = build_for(v)
            launchers = {"production": variant_launcher(cp, v, a, b)}
            for name in names:
                removed, added = ALTERNATIVES[name]
                defines = {key: val for key, val in base.defines if key not in removed}
                defines.update(added)
                if "TILE_ASYNC" not in defines:
                    defines.pop("A_KMAJOR", None)
                build = KernelBuild(base.source, tuple(sorted(defines.items())), base.options,
                                    base.include_dirs)
                fn = load_module(build).get_function(KERNEL_NAME)
                launchers[name] = variant_launcher(cp, v, a, b, fn, build_reads_a_transposed(build))
            c0, es0 = (x.copy() for x in launchers["production"]())
            same = {}
            for name in names:
                c1, es1 = launchers[name]()
                same[name] = bool(cp.array_equal(c0.view(cp.uint32), c1.view(cp.uint32))) and (
                    v.words == 0 or bool(cp.array_equal(es0, es1)))
                mismatches += not same[name]
            times: dict[str, list[float]] = {name: [] for name in ["cublas", "production", *names]}
            for _ in range(args.rounds):
                times["cublas"].append(median_kernel_ms(cp, lambda a=a, b=b: cp.matmul(a, b), args.repeats, 2))
                for name, fn in launchers.items():
                    times[name].append(median_kernel_ms(cp, fn, args.repeats, 2))
            med = {name: float(np.median(t)) * 1e3 for name, t in times.items()}
            line = (f"{shape} {v.name:24s} x{v.slices(k):<2d} cuBLAS {med['cublas']:8.1f}  "
                    f"production {med['production']:8.1f} "
                    f"({med['cublas'] / med['production']:.2f}x cuBLAS)")
            for name in names:
                line += (f"  {name} {med[name]:8.1f} (production {med[name] / med['production']:.2f}x"
                         " faster"
                         f"{'' if same[name] else ', DIFFERENT BITS'})")
            print(line + f"  transpose {transpose_us:.1f}", flush=True)
            rows.append({"shape": [m, n, k], "variant": v.name, "split": v.slices(k),
                         "kernel_us": med, "same_bits": same, "transpose_us": transpose_us})
    if args.json:
        args.json.write_text(json.dumps({
            "device": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(), "rows": rows},
            indent=1))
    print(f"{mismatches} alternative build(s) with different bits")
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
