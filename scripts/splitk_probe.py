"""The split-K reduction (splitk.cu) against an earlier version of itself, on the device
machine (issue 14).

    python3 scripts/splitk_probe.py BASELINE.cu [--json OUT.json] [--repeats N]

For each (slices S, M, N) below, the reduction of the same random partials by both builds:
bit-equality of C, and the kernel medians (CUDA events) of each in the same run. The cases
are the splits `safemon.matmul` picks at the inference shapes, plus odd element counts (the
one-element path) and the largest split. Figures are reported, never asserted.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import cupy as cp
import numpy as np

from safemon.bench.timing import median_kernel_ms
from safemon.kernels.compiler import KernelBuild, load_module
from safemon.kernels.gpu import SPLITK_SOURCE, _reduce  # the production launch, any build

#: (S, M, N): 1×4096×4096, 8×4096×4096 (32); 64×4096×4096, 256×1024×4096 (8); 1×11008×4096
#: (12); 1×14336×4096 (9); 1×5120×5120 (25); 1024³ (4); odd M·N; the largest split (64).
CASES = [(32, 1, 4096), (32, 8, 4096), (8, 64, 4096), (8, 256, 1024), (12, 1, 11008),
         (9, 1, 14336), (25, 1, 5120), (4, 1024, 1024), (29, 1, 257), (6, 3, 1001), (64, 1, 4096)]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("baseline", type=Path)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--repeats", type=int, default=200)
    args = ap.parse_args()
    new = load_module(KernelBuild.make(SPLITK_SOURCE)).get_function("safemon_splitk_reduce")
    old = load_module(KernelBuild.make(args.baseline)).get_function("safemon_splitk_reduce")
    rng = np.random.default_rng(0)
    rows, different = [], 0
    print(f"device {cp.cuda.runtime.getDeviceProperties(0)['name'].decode()}; kernel medians of "
          f"{args.repeats} (CUDA events)")
    for s, m, n in CASES:
        p = cp.asarray(rng.standard_normal((s, m, n), dtype=np.float32))
        c_new, c_old = cp.empty((m, n), cp.float32), cp.empty((m, n), cp.float32)

        def run_new(p: Any = p, c: Any = c_new) -> None:
            _reduce(new, p, c)

        def run_old(p: Any = p, c: Any = c_old) -> None:
            _reduce(old, p, c)

        run_new()
        run_old()
        same = bool(cp.array_equal(c_new.view(cp.uint32), c_old.view(cp.uint32)))
        different += not same
        t_new = median_kernel_ms(cp, run_new, args.repeats, 10) * 1e3
        t_old = median_kernel_ms(cp, run_old, args.repeats, 10) * 1e3
        rows.append({"slices": s, "m": m, "n": n, "same_bits": same, "new_us": t_new, "baseline_us": t_old})
        print(f"  S={s:2d} {m}x{n:<6d} {'same' if same else 'DIFFERENT':9s} new {t_new:6.2f} us  "
              f"baseline {t_old:6.2f} us  ({t_old / t_new:4.2f}x faster)", flush=True)
    if args.json:
        args.json.write_text(json.dumps({"rows": rows}, indent=1))
    print(f"{different} case(s) with different bits")
    return 1 if different else 0


if __name__ == "__main__":
    sys.exit(main())
