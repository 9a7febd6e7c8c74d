"""Device probe: what an ECC-protected weight adds to a whole-model forward (issue 16).

    python3 scripts/ecc_model_probe.py [--hidden 4096] [--batch 64] [--layers 4] [--reps 50]

`safemon bench vote --runtime` found three protected forwards of a 4-layer 4096-wide MLP
about 1 ms slower on ECC weights (`ProtectedArray`, as channels keep them) than on plain
CuPy weights: about 86 µs per 64 MiB check, against 36 µs for the check kernel alone in
docs/ECC.md. This probe times, in one process and one run (CUDA events, medians):
the check kernel alone (`count_errors_device`), one layer's product on plain and on ECC
weights (`run_variant`, the status read included), and the whole forward (`run_model`) on
plain and on ECC weights, wall clock with its one wait. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import statistics
import time

import cupy as cp
import numpy as np

from safemon.config import VariantConfig, WeightsConfig
from safemon.ecc import ProtectedArray
from safemon.ecc.gpu import count_errors_device
from safemon.kernels.api import run_variant
from safemon.kernels.backend import Backend
from safemon.models import Layer, run_model
from safemon.models.activations import Activation


def events_us(fn, reps: int) -> float:
    """Median GPU time of `fn`'s queued work, µs (CUDA events around each call)."""
    out = []
    for _ in range(reps):
        s, e = cp.cuda.Event(), cp.cuda.Event()
        s.record()
        fn()
        e.record()
        e.synchronize()
        out.append(cp.cuda.get_elapsed_time(s, e) * 1e3)
    return statistics.median(out)


def wall_us(fn, reps: int) -> float:
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        cp.cuda.get_current_stream().synchronize()
        out.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--reps", type=int, default=50)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    h, m = args.hidden, args.batch
    wc = WeightsConfig()
    vc = VariantConfig()
    hosts = {f"w{i}": (rng.standard_normal((h, h)) / np.sqrt(h)).astype(np.float32)
             for i in range(args.layers)}
    plain = {k: cp.asarray(w) for k, w in hosts.items()}
    ecc = {k: ProtectedArray.from_host(w, name=k, word_bits=wc.word_bits, backend=Backend.CUPY)
           for k, w in hosts.items()}
    layers = [Layer(f"w{i}", None, Activation.GELU) for i in range(args.layers)]
    x = cp.asarray(rng.standard_normal((m, h)).astype(np.float32))
    v = vc.to_variant(m, h, h)
    p0 = ecc["w0"]
    nerr = cp.zeros(1, dtype=cp.uint64)
    for _ in range(3):  # warm-up: compile everything
        run_model(layers, plain, x, vc, "cupy")
        run_model(layers, ecc, x, vc, "cupy")
    r = args.reps
    rows = [
        ("check kernel alone (count_errors_device, 64 MiB)", "events",
         events_us(lambda: count_errors_device(p0._data, p0._check, wc.word_bits, out=nerr), r)),
        (f"one layer {v.name}, plain weight (run_variant)", "wall",
         wall_us(lambda: run_variant(x, plain["w0"], v, "cupy"), r)),
        (f"one layer {v.name}, ECC weight (run_variant)", "wall",
         wall_us(lambda: run_variant(x, p0, v, "cupy"), r)),
        ("one layer, plain weight (GPU)", "events", events_us(lambda: run_variant(x, plain["w0"], v, "cupy", wait=False), r)),
        ("one layer, ECC weight (GPU)", "events", events_us(lambda: run_variant(x, p0, v, "cupy", wait=False), r)),
        (f"forward, {args.layers} layers, plain weights (run_model)", "wall",
         wall_us(lambda: run_model(layers, plain, x, vc, "cupy"), r)),
        (f"forward, {args.layers} layers, ECC weights (run_model)", "wall",
         wall_us(lambda: run_model(layers, ecc, x, vc, "cupy"), r)),
        ("forward, plain weights (GPU)", "events", events_us(lambda: run_model(layers, plain, x, vc, "cupy"), r)),
        ("forward, ECC weights (GPU)", "events", events_us(lambda: run_model(layers, ecc, x, vc, "cupy"), r)),
    ]
    name = cp.cuda.runtime.getDeviceProperties(0)["name"]
    print(f"# {name.decode() if isinstance(name, bytes) else name}; batch {m}, hidden {h}, "
          f"{args.layers} layers, variant {vc.checksum}/{vc.level}/{vc.mode}, ECC {wc.word_bits}-bit "
          f"words; medians of {r}")
    for label, kind, us in rows:
        print(f"{label:60s} {kind:6s} {us:9.1f} µs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
