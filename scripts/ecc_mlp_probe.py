"""Device probe: what the per-use ECC checks cost the three channels' MLP passes (issue 16).

    python3 scripts/ecc_mlp_probe.py [--rounds 4] [--reps 20] [--hidden 4096] [--batch 64]

Channels keep their weights under SEC-DED ECC (`WeightsConfig.ecc`, on by default) and check
each weight with every use. For the issue's 4-layer MLP this probe times, in one process, the
three channels' passes captured as CUDA graphs, back to back and side by side (one stream
each), as `safemon bench vote --runtime` times them (`bench.runtime._three_captured_passes`,
which also checks every pass's digests against a pass run by hand), on the weights kept
three ways in alternating rounds: plain CuPy arrays (no check), ECC with 32-bit words
((39,32), the default) and ECC with 64-bit words ((72,64), `weights.word_bits: 64`). It
also times one check kernel of a 64 MiB weight for each code (CUDA events, back to back),
and one unprotected forward with `cupy.matmul` (the issue's "≤ 3.5×" baseline).

Medians (µs) per row. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import time
from typing import Any

import cupy as cp
import numpy as np

from safemon.bench.runtime import _three_captured_passes
from safemon.config import VariantConfig
from safemon.ecc import ProtectedArray
from safemon.ecc.gpu import count_errors_device
from safemon.kernels.backend import Backend
from safemon.kernels.model_gpu import launch_epilogue
from safemon.models import Layer
from safemon.models.activations import Activation


def _events_us(fn: Any, reps: int) -> float:
    s, e = cp.cuda.Event(), cp.cuda.Event()
    out = []
    for _ in range(reps):
        s.record()
        fn()
        e.record()
        e.synchronize()
        out.append(cp.cuda.get_elapsed_time(s, e) * 1e3)
    return statistics.median(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--batch", type=int, default=64)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    h, m = args.hidden, args.batch
    hosts = {f"w{i}": (rng.standard_normal((h, h)) / np.sqrt(h)).astype(np.float32)
             for i in range(4)}
    layers = [Layer(f"w{i}", rng.standard_normal(h).astype(np.float32), Activation.GELU)
              for i in range(4)]
    kept: dict[str, dict[str, Any]] = {"plain": {k: cp.asarray(w) for k, w in hosts.items()}}
    for bits in (32, 64):
        kept[f"ECC {bits}-bit words"] = {
            k: ProtectedArray.from_host(w, name=k, word_bits=bits, backend=Backend.CUPY)
            for k, w in hosts.items()}
    x = cp.asarray(rng.standard_normal((m, h)).astype(np.float32))
    vc = VariantConfig()
    rows: dict[str, list[float]] = {}
    for r in range(args.rounds):
        names = list(kept) if r % 2 == 0 else list(kept)[::-1]
        for name in names:
            serial, side = _three_captured_passes(cp, layers, kept[name], x, vc, args.reps, 3)
            rows.setdefault(f"3 captured passes back to back, {name}", []).extend(
                s * 1e6 for s in serial)
            rows.setdefault(f"3 captured passes side by side, {name}", []).extend(
                s * 1e6 for s in side)
        print(f"round {r + 1} of {args.rounds} done", flush=True)
    checks = {}
    for bits in (32, 64):
        pa = kept[f"ECC {bits}-bit words"]["w0"]
        data, check = pa.storage
        nerr = cp.zeros(1, dtype=cp.uint64)
        checks[bits] = _events_us(
            lambda d=data, c=check, b=bits, n=nerr: count_errors_device(d, c, b, out=n), 50)
    dw, biases = kept["plain"], [cp.asarray(ly.bias) for ly in layers]

    def plain_forward() -> None:
        hh = x
        for ly, b in zip(layers, biases, strict=True):
            hh = cp.matmul(hh, dw[ly.weight_id])
            launch_epilogue(hh, b, ly.act)

    for _ in range(5):
        plain_forward()
    cp.cuda.get_current_stream().synchronize()
    walls = []
    for _ in range(50):
        t0 = time.perf_counter()
        plain_forward()
        cp.cuda.get_current_stream().synchronize()
        walls.append((time.perf_counter() - t0) * 1e6)
    name = cp.cuda.runtime.getDeviceProperties(0)["name"]
    name = name.decode() if isinstance(name, bytes) else name
    print(f"# ECC and the MLP's captured passes: {name}, "
          f"{datetime.datetime.now(datetime.UTC):%Y-%m-%dT%H:%MZ}; batch {m}, hidden {h}, "
          f"4 layers (gelu, biases), variant {vc.checksum}/{vc.level}/{vc.mode}; "
          f"{args.rounds} rounds alternating, medians (µs)\n")
    print("| row | median µs |")
    print("|---|---:|")
    for row, values in rows.items():
        print(f"| {row} | {statistics.median(values):,.0f} |")
    for bits, us in checks.items():
        print(f"| one check kernel, {h}×{h} weight, {bits}-bit words (GPU) | {us:,.1f} |")
    print(f"| one unprotected forward with cupy.matmul (wall) | {statistics.median(walls):,.0f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
