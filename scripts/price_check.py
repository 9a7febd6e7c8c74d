"""CPU check: does the embedded default's price of a work item cover what the NumPy reference takes?

usage: .venv/bin/python scripts/price_check.py [--processes 3] [--floor GFLOP/s ...] [--out DIR]

Admission prices a work item at `limits.item_overhead_s + padded_flops /
(limits.min_channel_gflops * 1e9)` (`safemon.admission`), and a channel that takes longer
than `timing.request_deadline_s` plus that price is faulted (`deadline_miss`). On the NumPy
backend that is only safe if the reference, as the channels run it, is never slower than the
floor on a shape the daemon admits. This script times `reference_matmul` under the embedded
default's channel variant over a grid of 176 shapes (M 1-4096, K 32-4096, N 10-1024, up to
128 MFLOP), in `--processes` processes at once (each in its own shuffled order: three
channel processes share the machine's cores as the embedded default's do), and then, for
each floor (default: the configured one), lists the admitted shapes whose slowest time
exceeded their budget, the closest ones, and the fast shapes the floor refuses. It prints
the same figures with the unpadded price 2·M·K·N for comparison. Timings go to
`DIR/times-<i>.jsonl`, the report to stdout. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import collections
import itertools
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SHAPES = [(m, k, n) for m, k, n in itertools.product(
    (1, 8, 16, 32, 64, 256, 1024, 2048, 4096), (32, 64, 256, 1024, 4096), (10, 32, 64, 256, 1024))
    if 2 * m * k * n <= 128e6]


def _time_shapes(seed: int) -> None:
    """Time every shape once, in a shuffled order; one JSON line per shape."""
    import numpy as np

    from safemon.config import load_config
    from safemon.kernels.reference import reference_matmul

    variant = load_config(None, env={}).channels[0].variant  # type: ignore[index]
    rng = np.random.default_rng(seed)
    order = list(SHAPES)
    rng.shuffle(order)
    for m, k, n in order:
        x = rng.standard_normal((m, k), dtype=np.float32)
        w = rng.standard_normal((k, n), dtype=np.float32)
        v = variant.to_variant(m, n, k)
        t0 = time.perf_counter()
        reference_matmul(x, w, v)
        print(json.dumps({"m": m, "k": k, "n": n, "s": time.perf_counter() - t0}), flush=True)


def _report(times: dict[tuple[int, int, int], list[float]], floors: list[float]) -> None:
    from safemon import admission
    from safemon.config import load_config

    base = load_config(None, env={})
    most = admission.max_ahead_s(base)
    print(f"{len(times)} shapes, each the slowest of {min(map(len, times.values()))}+ runs; "
          f"a request is admitted up to a price of {most:.3f} s (admission.max_ahead_s)")
    for padded in (True, False):
        for floor in floors:
            cfg = base.model_copy(update={"limits": base.limits.model_copy(
                update={"min_channel_gflops": floor})})
            over, ratios, refused_fast = [], [], []
            admitted = 0
            for (m, k, n), ts in sorted(times.items()):
                flops = admission.padded_flops(cfg, m, k, n) if padded else 2.0 * m * k * n
                price = cfg.limits.item_overhead_s + flops / (floor * 1e9)
                slowest = max(ts)
                if price > most:
                    if slowest < most / 2:
                        refused_fast.append(f"{m}x{k}x{n} ({slowest:.3f} s)")
                    continue
                admitted += 1
                budget = cfg.timing.request_deadline_s + price
                ratios.append((slowest / budget, f"{m}x{k}x{n} {slowest:.3f} / {budget:.3f} s"))
                if slowest > budget:
                    over.append(f"{m}x{k}x{n} {slowest:.3f} s > {budget:.3f} s")
            ratios.sort(reverse=True)
            print(f"\n{'padded' if padded else 'unpadded 2*M*K*N'}, floor {floor:g} GFLOP/s: "
                  f"{admitted} admitted, {len(over)} over their budget")
            for line in over:
                print(f"  over: {line}")
            print("  closest: " + "; ".join(f"{r:.2f} ({what})" for r, what in ratios[:4]))
            print(f"  refused though they took under {most / 2:.2f} s: {len(refused_fast)}"
                  + (f" (e.g. {', '.join(refused_fast[:4])})" if refused_fast else ""))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--processes", type=int, default=3)
    ap.add_argument("--floor", type=float, nargs="*", default=None)
    ap.add_argument("--out", default=None)
    ap.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker is not None:
        _time_shapes(args.worker)
        return 0
    from safemon.config import load_config

    floors = args.floor or [load_config(None, env={}).limits.min_channel_gflops]
    out = Path(args.out or tempfile.mkdtemp(prefix="safemon-price-check-"))
    out.mkdir(parents=True, exist_ok=True)
    files = [out / f"times-{i}.jsonl" for i in range(args.processes)]
    procs = [subprocess.Popen([sys.executable, __file__, "--worker", str(i)], stdout=f.open("w"))
             for i, f in enumerate(files)]
    if any(p.wait() != 0 for p in procs):
        raise SystemExit("a timing process failed")
    times: dict[tuple[int, int, int], list[float]] = collections.defaultdict(list)
    for f in files:
        for line in f.read_text().splitlines():
            d = json.loads(line)
            times[(d["m"], d["k"], d["n"])].append(d["s"])
    print(f"price check, {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}, "
          f"{args.processes} processes at once, timings in {out}")
    _report(times, floors)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
