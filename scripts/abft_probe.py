"""Device probe: the ABFT check's cost at given shapes, current abft.cu against a previous one.

usage: python3 scripts/abft_probe.py [--sizes 64x4096x4096:small:4,4096x4096x4096:large:1]
                                     [--iters 20] [--old PATH_TO_OLD_ABFT_CU]

For each size (M×N×K, tile, split) it times with CUDA events (median of `--iters`, after two
warm-ups) the unprotected kernel alone, with the current ABFT check (`launch_checked` of the
`abft=True` variant) and, with `--old`, with the check of a previous abft.cu (its two-kernel
launch: `safemon_abft_vectors` then `safemon_abft_check`, as before 2026-11-23), all in the
same process; every checked run must pass. Under `ncu --kernel-name regex:safemon_abft` it
gives each check kernel's own duration.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path
from typing import Any

import numpy as np


def _old_launch(path: Path, a: Any, b: Any, c: Any, variant: Any, status_ptr: int) -> None:
    """The launch of the two-kernel abft.cu (vectors, then the fused check)."""
    import cupy as cp

    from safemon.kernels.compiler import KernelBuild
    from safemon.kernels.gpu import AUX_MAX_BLOCKS, function_for

    build = KernelBuild.make(path, None, ("--fmad=true",))
    m, k = a.shape
    n = b.shape[1]
    t = variant.tile
    gx, gy = t.grid(m, n)
    work = cp.empty(2 * (gx + gy) * k, dtype=cp.float64)
    a_sum, a_abs = work[: gy * k], work[gy * k: 2 * gy * k]
    b_sum, b_abs = work[2 * gy * k: 2 * gy * k + gx * k], work[2 * gy * k + gx * k:]
    i32 = np.int32
    dims = (i32(m), i32(n), i32(k), i32(t.bm), i32(t.bn), i32(gx), i32(gy))
    vec_blocks = max(1, min(4 * AUX_MAX_BLOCKS, -(-(gy + 32 * gx) * k // 256)))
    function_for(("abft-old",), lambda: build, "safemon_abft_vectors")(
        (vec_blocks, 1, 1), (256, 1, 1), (a, b, a_sum, a_abs, b_sum, b_abs, *dims))
    col_blocks = -(-gy // 4) * -(-n // 32)
    row_blocks = -(-m * -(-gx // 4) // 8)
    function_for(("abft-old",), lambda: build, "safemon_abft_check")(
        (col_blocks + row_blocks, 1, 1), (256, 1, 1),
        (a, b, c, a_sum, a_abs, b_sum, b_abs, np.uintp(status_ptr), *dims,
         i32(variant.slices(k)), i32(col_blocks)))


def _cases(a: Any, b: Any, plain: Any, checked: Any, old: str | None) -> dict[str, Any]:
    """The timed calls of one size: each queues its work and returns its status block."""
    import cupy as cp

    from safemon.kernels.checked import STATUS_WORDS, launch_checked
    from safemon.kernels.gpu import gpu_matmul

    def run_plain() -> Any:
        return launch_checked(a, b, plain).status

    def run_new() -> Any:
        return launch_checked(a, b, checked).status

    def run_old() -> Any:
        status = cp.zeros(STATUS_WORDS, dtype=cp.uint32)
        c, _ = gpu_matmul(a, b, plain, status=status)
        _old_launch(Path(old or ""), a, b, c, checked, int(status.data.ptr))
        return status

    cases = {"unprotected": run_plain, "abft (current)": run_new}
    if old:
        cases["abft (previous)"] = run_old
    return cases


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="64x4096x4096:small:4,4096x4096x4096:large:1")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--old", default=None)
    args = ap.parse_args()
    import cupy as cp

    from safemon.kernels.catalog import make_variant
    from safemon.kernels.checked import read_status

    for spec in args.sizes.split(","):
        size, tile, split = spec.split(":")
        m, n, k = (int(v) for v in size.split("x"))
        rng = np.random.default_rng(0)
        a = cp.asarray(rng.standard_normal((m, k), dtype=np.float32))
        b = cp.asarray(rng.standard_normal((k, n), dtype=np.float32))
        plain = make_variant(None, None, "fma", tile, int(split))
        checked = make_variant(None, None, "fma", tile, int(split), abft=True)

        cases = _cases(a, b, plain, checked, args.old)
        got = {}
        for name, fn in cases.items():
            times = []
            for _ in range(args.iters + 2):
                start, end = cp.cuda.Event(), cp.cuda.Event()
                start.record()
                status = fn()
                end.record()
                end.synchronize()
                times.append(cp.cuda.get_elapsed_time(start, end) * 1e3)
                assert read_status(status).ok, (name, size)  # after the timed window
            got[name] = statistics.median(times[2:])
        base = got["unprotected"]
        print(f"{size} {plain.name}: " + ", ".join(
            f"{name} {t:.1f} µs ({t / base:.2f}×)" for name, t in got.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
