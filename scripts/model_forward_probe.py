"""Device probe: where one channel's whole-model forward spends its time (issues 16, 17).

usage: python3 scripts/model_forward_probe.py [--variant unprotected/fma] [--iters 30]
                                              [--batch 64] [--hidden 4096] [--layers 4]

In this process, on one stream, for the runtime benchmark's MLP (`safemon.bench.runtime`):
times (wall clock with a sync, median) `run_model` as a channel runs it, the same layers as
bare `run_variant` calls with and without the epilogue, the bare MMM kernels
(`bench.overhead.variant_launcher`), and cupy.matmul; then profiles `run_model`'s host side
(cProfile, own time). Prints one line per case and the top functions.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import sys
import time
from typing import Any

import numpy as np


def main() -> int:
    import cupy as cp

    from safemon.bench.overhead import variant_launcher
    from safemon.bench.runtime import ModelShape, _model_operands, channel_variant
    from safemon.config import VariantConfig
    from safemon.kernels.api import run_variant
    from safemon.kernels.model_gpu import launch_epilogue
    from safemon.models import run_model

    ap = argparse.ArgumentParser()
    ap.add_argument("--variant", default="unprotected/fma")
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--layers", type=int, default=4)
    args = ap.parse_args()
    shape = ModelShape(args.batch, args.hidden, args.layers)
    layers, weights, x_host = _model_operands(shape, np.random.default_rng(0))
    vc = VariantConfig(**channel_variant(args.variant))
    dw = {k: cp.asarray(w) for k, w in weights.items()}
    dx = cp.asarray(x_host)
    biases = [cp.asarray(ly.bias) for ly in layers]
    sync = cp.cuda.get_current_stream().synchronize

    def timed(fn: Any) -> float:
        for _ in range(3):
            fn()
        sync()
        out = []
        for _ in range(args.iters):
            t0 = time.perf_counter()
            fn()
            sync()
            out.append(time.perf_counter() - t0)
        return statistics.median(out) * 1e6

    def model() -> Any:
        return run_model(layers, dw, dx, vc, "cupy")

    def bare_calls(epilogue: bool) -> Any:
        def go() -> None:
            h = dx
            for ly, b in zip(layers, biases, strict=True):
                w = dw[ly.weight_id]
                r = run_variant(h, w, vc.to_variant(h.shape[0], w.shape[1], h.shape[1]), "cupy",
                                wait=False)
                if epilogue:
                    launch_epilogue(r.c, b, ly.act)
                h = r.c
            sync()
        return go

    runs = []
    h = dx
    for ly in layers:
        w = dw[ly.weight_id]
        v = vc.to_variant(h.shape[0], w.shape[1], h.shape[1])
        runs.append(variant_launcher(cp, v, h, w))
        h = cp.empty((h.shape[0], w.shape[1]), dtype=cp.float32)

    def kernels() -> None:
        for r in runs:
            r()

    def cupy_forward() -> None:
        h = dx
        for ly, b in zip(layers, biases, strict=True):
            h = cp.matmul(h, dw[ly.weight_id])
            launch_epilogue(h, b, ly.act)

    v0 = vc.to_variant(args.batch, args.hidden, args.hidden)
    print(f"{shape.label}, variant {v0.name}: median of {args.iters} (µs, wall, synced)")
    for name, fn in [("run_model (a channel's pass)", model),
                     ("run_variant per layer + epilogue", bare_calls(True)),
                     ("run_variant per layer", bare_calls(False)),
                     ("MMM kernels (+ split-K reduce) only", kernels),
                     ("cupy.matmul + epilogue", cupy_forward)]:
        print(f"  {name:40s} {timed(fn):10.1f}", flush=True)
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(args.iters):
        model()
    sync()
    prof.disable()
    print(f"===== run_model host profile, {args.iters} passes (own time)")
    pstats.Stats(prof).sort_stats("tottime").print_stats(18)
    return 0


if __name__ == "__main__":
    sys.exit(main())
