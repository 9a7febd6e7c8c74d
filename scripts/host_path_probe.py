"""Where the host time of one checked call goes (issue 14, item 1), step by step, on the device.

usage: python3 scripts/host_path_probe.py [MxNxK ...]   (default 80x80x80 1x4096x4096)

For each shape, wall p50/p99 (µs, `perf_counter` around the call and a stream
synchronisation, 2000 calls after 200 warm-up) of cumulative steps, each a superset of the one
before, so that the differences say what each step costs:

  sync             a stream synchronisation alone (the floor of every row)
  cupy.matmul      cuBLAS, allocating its output (the baseline of the issue's target)
  kernel           the compiled unprotected kernel on preallocated C and ES, no status
  +status          ... with a status block zeroed by a memset and read back (memcpy D2H)
  +alloc           ... allocating C, ES and the status block per call (cp.empty, cp.zeros)
  launch_checked   safemon.kernels.checked.launch_checked + read_status
  run_variant      safemon.kernels.api.run_variant with the variant given
  safemon.matmul   the public call (variant looked up from the shape)

then cupy.matmul again (the spread between the two is the run's noise) and
protected_matmul ones/M fma. The script runs unchanged on earlier trees (PYTHONPATH), so
one device call can time two versions of the host path.

and the Python-only cost (no device work, 20000 calls) of the pieces before the launch.
The kernel's own time (CUDA events, launch latency hidden) is printed with each shape.
Figures are reported, never asserted; they depend on the machine and its load.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable

import cupy as cp
import numpy as np

import safemon
from safemon.bench.timing import median_kernel_ms, percentiles, wall_samples_s
from safemon.kernels import api
from safemon.kernels.backend import resolve_backend
from safemon.kernels.checked import STATUS_WORDS, launch_checked, read_status
from safemon.kernels.gpu import _plan_for

REPS, WARMUP = 2000, 200


def wall(fn: Callable[[], object]) -> tuple[float, float]:
    sync = cp.cuda.get_current_stream().synchronize
    p50, p99 = percentiles(wall_samples_s(fn, REPS, WARMUP, sync), (50, 99), 1e6)
    return p50, p99


def python_us(fn: Callable[[], object], n: int = 20000) -> float:
    for _ in range(200):
        fn()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) / n * 1e6


def probe(m: int, n: int, k: int) -> dict[str, object]:
    rng = np.random.default_rng(0)
    a = cp.asarray(rng.standard_normal((m, k), dtype=np.float32))
    b = cp.asarray(rng.standard_normal((k, n), dtype=np.float32))
    variant = api._variant_for(a, b, None, None, "fma", None, None)
    plan = _plan_for(variant, m, n, k, False)
    c = cp.empty(plan.c_shape, dtype=cp.float32)
    es = cp.empty(plan.es_shape, dtype=cp.uint32)
    out = c if plan.partial_shape is None else cp.empty(plan.partial_shape, dtype=cp.float32)
    status = cp.zeros(STATUS_WORDS, dtype=cp.uint32)
    host = cp.cuda.alloc_pinned_memory(4 * STATUS_WORDS)
    host_ptr = host.ptr
    stream = cp.cuda.get_current_stream()
    null = np.uintp(0)

    def kernel_only() -> None:
        plan.kernel(plan.grid, plan.block, (a, b, out, es, *plan.dims, null))

    def with_status() -> None:
        status.data.memset_async(0, 4 * STATUS_WORDS)
        plan.kernel(plan.grid, plan.block, (a, b, out, es, *plan.dims, status))
        cp.cuda.runtime.memcpyAsync(host_ptr, status.data.ptr, 4 * STATUS_WORDS,
                                    cp.cuda.runtime.memcpyDeviceToHost, stream.ptr)

    def with_alloc() -> None:
        st = cp.zeros(STATUS_WORDS, dtype=cp.uint32)
        c2 = cp.empty(plan.c_shape, dtype=cp.float32)
        es2 = cp.empty(plan.es_shape, dtype=cp.uint32)
        o2 = c2 if plan.partial_shape is None else cp.empty(plan.partial_shape, dtype=cp.float32)
        plan.kernel(plan.grid, plan.block, (a, b, o2, es2, *plan.dims, st))
        cp.cuda.runtime.memcpyAsync(host_ptr, st.data.ptr, 4 * STATUS_WORDS,
                                    cp.cuda.runtime.memcpyDeviceToHost, stream.ptr)

    rows = {
        "sync": wall(lambda: None),
        "cupy.matmul": wall(lambda: cp.matmul(a, b)),
        "kernel": wall(kernel_only),
        "+status": wall(with_status),
        "+alloc": wall(with_alloc),
        "launch_checked": wall(lambda: read_status(launch_checked(a, b, variant).status)),
        "run_variant": wall(lambda: api.run_variant(a, b, variant)),
        "safemon.matmul": wall(lambda: safemon.matmul(a, b, mode="fma")),
        "cupy.matmul again": wall(lambda: cp.matmul(a, b)),
        "protected ones/M": wall(lambda: safemon.protected_matmul(a, b, checksum="ones",
                                                                  level="M", mode="fma")),
    }
    py = {
        "_variant_for": python_us(lambda: api._variant_for(a, b, None, None, "fma", None, None)),
        "resolve_backend": python_us(lambda: resolve_backend("auto")),
        "_validate x2": python_us(lambda: (api._validate("a", a, api.Backend.CUPY),
                                           api._validate("b", b, api.Backend.CUPY))),
        "cp.empty": python_us(lambda: cp.empty(plan.c_shape, dtype=cp.float32), 5000),
        "cp.zeros(8)": python_us(lambda: cp.zeros(STATUS_WORDS, dtype=cp.uint32), 5000),
        "kernel launch": python_us(kernel_only, 5000),
    }
    stream.synchronize()
    kernel_us = median_kernel_ms(cp, kernel_only, 200, 20) * 1e3
    cupy_kernel_us = median_kernel_ms(cp, lambda: cp.matmul(a, b), 200, 20) * 1e3
    return {"shape": f"{m}x{n}x{k}", "variant": variant.name, "kernel_us": kernel_us,
            "cupy_kernel_us": cupy_kernel_us, "wall_us": rows, "python_us": py}


def main() -> None:
    shapes = sys.argv[1:] or ["80x80x80", "1x4096x4096"]
    results = []
    for s in shapes:
        m, n, k = (int(x) for x in s.split("x"))
        r = probe(m, n, k)
        results.append(r)
        print(f"== {r['shape']} {r['variant']}: kernel {r['kernel_us']:.1f} µs, "
              f"cuBLAS kernel {r['cupy_kernel_us']:.1f} µs")
        for name, (p50, p99) in r["wall_us"].items():  # type: ignore[attr-defined]
            print(f"  {name:16s} p50 {p50:7.1f}  p99 {p99:7.1f} µs")
        for name, us in r["python_us"].items():  # type: ignore[attr-defined]
            print(f"  py {name:13s} {us:6.2f} µs")
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "host_path.json"), "w") as f:
            json.dump({"device": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(),
                       "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                       "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
