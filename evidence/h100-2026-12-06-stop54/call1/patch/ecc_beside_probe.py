"""Device probe: a weight's ECC check beside its product instead of before it (issue 16).

    python3 scripts/ecc_beside_probe.py [--rounds 5] [--reps 40] [--model-reps 30]

A device weight under ECC (`ProtectedArray`) is checked with every use. The check only
counts bad words into the call's status block, which is read after the product, so it need
not run before the kernel: from `checked.ECC_BESIDE_MIN_BYTES` on it runs on a side stream
beside it (`safemon.kernels.checked`, step 2). This probe measures, in one process, with the
threshold set to 0 ("beside") and beyond every weight ("before") in alternating rounds:

- one checked product on an ECC weight (`run_variant`, the status read included: wall µs)
  and its GPU time (CUDA events around the queued call), at five shapes from 80³ to
  64×4096×4096;
- the three channels' captured passes of the 4-layer 64×4096 MLP, back to back and side by
  side, as `safemon bench vote --runtime` times them (`bench.runtime._three_captured_passes`,
  which also checks every pass's digests against a pass run by hand), on ECC weights and,
  once per round, on plain weights (the floor that hiding the checks can approach).

Medians per row and side, and the ratio beside / before of the medians. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import time
from collections.abc import Callable
from typing import Any

import cupy as cp
import numpy as np

from safemon.bench.runtime import _three_captured_passes
from safemon.config import VariantConfig, WeightsConfig
from safemon.ecc import ProtectedArray
from safemon.kernels import checked
from safemon.kernels.api import run_variant
from safemon.kernels.backend import Backend
from safemon.models import Layer
from safemon.models.activations import Activation

SHAPES = ((80, 80, 80), (1024, 1024, 64), (64, 1024, 1024), (64, 2048, 2048), (64, 4096, 4096))
SIDES = {"before": 1 << 62, "beside": 0}


def _wall_us(fn: Callable[[], Any], reps: int) -> list[float]:
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        cp.cuda.get_current_stream().synchronize()
        out.append((time.perf_counter() - t0) * 1e6)
    return out


def _gpu_us(fn: Callable[[], Any], reps: int) -> list[float]:
    out = []
    for _ in range(reps):
        s, e = cp.cuda.Event(), cp.cuda.Event()
        s.record()
        fn()
        e.record()
        e.synchronize()
        out.append(cp.cuda.get_elapsed_time(s, e) * 1e3)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=40)
    ap.add_argument("--model-reps", type=int, default=30)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    wc, vc = WeightsConfig(), VariantConfig()
    singles = []
    for m, n, k in SHAPES:
        w = rng.standard_normal((k, n)).astype(np.float32)
        pa = ProtectedArray.from_host(w, name=f"w{m}x{n}x{k}", word_bits=wc.word_bits,
                                      backend=Backend.CUPY)
        x = cp.asarray(rng.standard_normal((m, k)).astype(np.float32))
        singles.append((f"{m}x{n}x{k}", x, pa, vc.to_variant(m, n, k)))
    h, batch = 4096, 64
    hosts = {f"w{i}": (rng.standard_normal((h, h)) / np.sqrt(h)).astype(np.float32)
             for i in range(4)}
    ecc_w = {k: ProtectedArray.from_host(w, name=k, word_bits=wc.word_bits,
                                         backend=Backend.CUPY) for k, w in hosts.items()}
    plain_w = {k: cp.asarray(w) for k, w in hosts.items()}
    layers = [Layer(f"w{i}", rng.standard_normal(h).astype(np.float32), Activation.GELU)
              for i in range(4)]
    xm = cp.asarray(rng.standard_normal((batch, h)).astype(np.float32))
    rows: dict[tuple[str, str], list[float]] = {}

    def add(row: str, side: str, values: list[float]) -> None:
        rows.setdefault((row, side), []).extend(values)

    for _label, x, pa, v in singles:  # compile and load everything once
        for limit in SIDES.values():
            checked.ECC_BESIDE_MIN_BYTES = limit
            run_variant(x, pa, v, "cupy")
    for r in range(args.rounds):
        order = list(SIDES) if r % 2 == 0 else list(SIDES)[::-1]
        for side in order:
            checked.ECC_BESIDE_MIN_BYTES = SIDES[side]
            for label, x, pa, v in singles:
                add(f"one product {label}, wall", side,
                    _wall_us(lambda x=x, pa=pa, v=v: run_variant(x, pa, v, "cupy"), args.reps))
                add(f"one product {label}, GPU", side,
                    _gpu_us(lambda x=x, pa=pa, v=v: run_variant(x, pa, v, "cupy", wait=False),
                            args.reps))
            serial, beside = _three_captured_passes(cp, layers, ecc_w, xm, vc, args.model_reps, 3)
            add("MLP: 3 captured passes back to back, ECC weights", side,
                [s * 1e6 for s in serial])
            add("MLP: 3 captured passes side by side, ECC weights", side,
                [s * 1e6 for s in beside])
        serial, beside = _three_captured_passes(cp, layers, plain_w, xm, vc, args.model_reps, 3)
        add("MLP: 3 captured passes back to back, plain weights", "plain", [s * 1e6 for s in serial])
        add("MLP: 3 captured passes side by side, plain weights", "plain", [s * 1e6 for s in beside])
        print(f"round {r + 1} of {args.rounds} done", flush=True)
    name = cp.cuda.runtime.getDeviceProperties(0)["name"]
    name = name.decode() if isinstance(name, bytes) else name
    print(f"# ECC check before / beside the product: {name}, "
          f"{datetime.datetime.now(datetime.UTC):%Y-%m-%dT%H:%MZ}; variant {vc.checksum}/"
          f"{vc.level}/{vc.mode}, ECC {wc.word_bits}-bit words; {args.rounds} rounds alternating, "
          f"medians (µs) of {args.reps} per round (products) and {args.model_reps} (MLP)\n")
    print("| row | before | beside | beside / before | plain weights |")
    print("|---|---:|---:|---:|---:|")
    for row in dict.fromkeys(k[0] for k in rows):
        if (row, "plain") in rows:
            continue
        before = statistics.median(rows[(row, "before")])
        beside = statistics.median(rows[(row, "beside")])
        plain_row = row.replace("ECC weights", "plain weights")
        plain = (f"{statistics.median(rows[(plain_row, 'plain')]):,.0f}"
                 if (plain_row, "plain") in rows else "")
        print(f"| {row} | {before:,.1f} | {beside:,.1f} | {beside / before:.3f} | {plain} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
