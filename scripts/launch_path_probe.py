"""Which of the synchronous API's host steps sit on the critical path, and what leaner
orderings of the same launch would save (issue 14, item 1), on the device.

usage: python3 scripts/launch_path_probe.py [MxNxK ...]   (default: the issue's inference shapes)

For each shape, two tables:

1. host time of each step of one synchronous unprotected call, the GPU idle before it
   (`perf_counter_ns` between steps, median of 2000 calls): what the host does before the
   MMM kernel can start, and what it does while the kernel runs;
2. wall p50/p99 (µs, the call and a stream synchronisation, 2000 calls after 200 warm-up) of
   the same call built several ways, interleaved round by round so that drift hits all alike:
     cupy.matmul      cuBLAS (the issue's baseline)
     safemon.matmul   the public call as it stands
     lean             the same kernels and status block, with C allocated after the MMM
                      launch of a split product (its kernel writes the partials, not C)
     lean+raw         ... and both kernels launched through cuLaunchKernel with an argument
                      block built once (`cupy.cuda.driver.launchKernel`)
     lean+raw+part    ... and the partials as a bare pool allocation (no ndarray)
     -reduce, -status lean+raw+part without the split-K reduction / without the status
                      read-back (a bare synchronisation): timing only, C is not the product
     RawKernel        the public call through the plan's RawKernel launch (before 45cf814)
     validating       the public call on its validating path (every call outside the tests
                      until d96a946)

Every variant's C is compared bit for bit with safemon.matmul's once before timing. Figures
are reported, never asserted. It needs a tree with `safemon.kernels.launch` (call 1 of
evidence/h100-2026-11-24-launch/ ran an earlier version, with its own argument block, on the
tree before it).
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
from safemon.kernels import api
from safemon.kernels.checked import STATUS_WORDS
from safemon.kernels.gpu import _plan_for
from safemon.kernels.launch import ArgBlock

REPS, WARMUP = 2000, 200
SHAPES = ["1x4096x4096", "64x4096x4096", "256x1024x4096", "1x11008x4096", "80x80x80"]


def probe(m: int, n: int, k: int) -> dict[str, object]:
    rng = np.random.default_rng(0)
    a = cp.asarray(rng.standard_normal((m, k), dtype=np.float32))
    b = cp.asarray(rng.standard_normal((k, n), dtype=np.float32))
    variant = api._variant_for(a, b, None, None, "fma", None, None)
    plan = _plan_for(variant, m, n, k, False)
    stream = cp.cuda.get_current_stream()
    status = cp.zeros(STATUS_WORDS, dtype=cp.uint32)
    host = cp.cuda.alloc_pinned_memory(4 * STATUS_WORDS)
    host_words = np.frombuffer(host, np.uint32, STATUS_WORDS)
    mn = m * n
    red_blocks = plan.reduce_grid[0]
    slices = plan.grid[2]
    mmm_fn, red_fn = plan.mmm_function, plan.reduce_function
    mmm_args, red_args = ArgBlock(8), ArgBlock(4)
    mmm_args.values[4], mmm_args.values[5], mmm_args.values[6] = m, n, k
    red_args.values[2], red_args.values[3] = mn, slices
    launch = cp.cuda.driver.launchKernel
    d2h = cp.cuda.runtime.memcpyDeviceToHost
    memcpy = cp.cuda.runtime.memcpyAsync
    es = plan.es_empty
    gx, gy, gz = plan.grid
    bx = plan.block[0]

    def read() -> None:
        memcpy(host.ptr, status.data.ptr, 4 * STATUS_WORDS, d2h, stream.ptr)
        stream.synchronize()
        if host_words.any():
            raise RuntimeError("status block not zero")

    def lean() -> cp.ndarray:
        if plan.partial_shape is None:
            c = cp.empty(plan.c_shape, dtype=cp.float32)
            plan.kernel(plan.grid, plan.block, (a, b, c, es, *plan.dims, status))
        else:
            part = cp.empty(plan.partial_shape, dtype=cp.float32)
            plan.kernel(plan.grid, plan.block, (a, b, part, es, *plan.dims, status))
            c = cp.empty(plan.c_shape, dtype=cp.float32)
            plan.reduce((red_blocks, 1, 1), (256, 1, 1), (part, c, np.int64(mn), np.int32(slices)))
        read()
        return c

    def lean_raw(bare_partials: bool, reduce: bool = True,
                 status_copy: bool = True) -> Callable[[], cp.ndarray]:
        def call() -> cp.ndarray:
            s = stream.ptr
            v = mmm_args.values
            v[0], v[1], v[3], v[7] = a.data.ptr, b.data.ptr, es.data.ptr, status.data.ptr
            if plan.partial_shape is None:
                c = cp.empty(plan.c_shape, dtype=cp.float32)
                v[2] = c.data.ptr
                launch(mmm_fn, gx, gy, gz, bx, 1, 1, 0, s, mmm_args.address, 0)
            else:
                if bare_partials:
                    part = cp.cuda.alloc(4 * slices * mn)
                    v[2] = part.ptr
                else:
                    part = cp.empty(plan.partial_shape, dtype=cp.float32)
                    v[2] = part.data.ptr
                launch(mmm_fn, gx, gy, gz, bx, 1, 1, 0, s, mmm_args.address, 0)
                c = cp.empty(plan.c_shape, dtype=cp.float32)
                if reduce:
                    r = red_args.values
                    r[0], r[1] = v[2], c.data.ptr
                    launch(red_fn, red_blocks, 1, 1, 256, 1, 1, 0, s, red_args.address, 0)
            if status_copy:
                read()
            else:
                stream.synchronize()
            return c
        return call

    def rawkernel_path() -> object:  # the public call with the plan's RawKernel launches
        plan.lean = False
        try:
            return safemon.matmul(a, b, mode="fma")
        finally:
            plan.lean = True

    def validating_path() -> object:  # the public call as when cupy_if_imported said None
        real = api.cupy_if_imported
        api.cupy_if_imported = lambda: None
        try:
            return safemon.matmul(a, b, mode="fma")
        finally:
            api.cupy_if_imported = real

    ways: dict[str, Callable[[], object]] = {
        "cupy.matmul": lambda: cp.matmul(a, b),
        "safemon.matmul": lambda: safemon.matmul(a, b, mode="fma"),
        "lean": lean,
        "lean+raw": lean_raw(False),
        "lean+raw+part": lean_raw(True),
        # timing only (C not reduced / status not read): what those two steps cost
        "-reduce (timing)": lean_raw(True, reduce=False),
        "-status (timing)": lean_raw(True, status_copy=False),
        "safemon.matmul RawKernel": rawkernel_path,
        # Backend resolution and both operands validated: what a process whose first call
        # preceded CuPy's import took while cupy_if_imported was cached (until d96a946).
        "safemon.matmul validating": validating_path,
    }
    want = safemon.matmul(a, b, mode="fma")
    same = {}
    for name, fn in ways.items():
        if name == "cupy.matmul" or "timing" in name:
            continue
        got = fn()
        stream.synchronize()
        same[name] = bool((got.view(cp.uint32) == want.view(cp.uint32)).all())

    samples: dict[str, list[float]] = {name: [] for name in ways}
    sync = stream.synchronize
    for rep in range(REPS + WARMUP):
        for name, fn in ways.items():
            sync()
            t0 = time.perf_counter()
            fn()
            sync()
            if rep >= WARMUP:
                samples[name].append(time.perf_counter() - t0)
    wall = {name: (float(np.percentile(s, 50)) * 1e6, float(np.percentile(s, 99)) * 1e6)
            for name, s in samples.items()}

    # Host steps of the public call's path, the GPU idle before each call.
    steps: dict[str, list[int]] = {}
    ns = time.perf_counter_ns
    from safemon.kernels.checked import _zero_blocks
    for rep in range(REPS + WARMUP):
        sync()
        t = [ns()]
        v = api._variant_for(a, b, None, None, "fma", None, None)
        api._device_ok(cp, a), api._device_ok(cp, b)
        t.append(ns())
        dev = cp.cuda.runtime.getDevice()
        st = _zero_blocks.by_device.pop(dev, None)
        if st is None:
            st = cp.zeros(STATUS_WORDS, dtype=cp.uint32)
        p = _plan_for(v, m, n, k, False)
        t.append(ns())
        c = cp.empty(p.c_shape, dtype=cp.float32)
        t.append(ns())
        out = c if p.partial_shape is None else cp.empty(p.partial_shape, dtype=cp.float32)
        t.append(ns())
        p.kernel(p.grid, p.block, (a, b, out, p.es_empty, *p.dims, st))
        t.append(ns())
        if p.reduce is not None:
            p.reduce((red_blocks, 1, 1), (256, 1, 1), (out, c, np.int64(mn), np.int32(slices)))
        t.append(ns())
        memcpy(host.ptr, st.data.ptr, 4 * STATUS_WORDS, d2h, stream.ptr)
        t.append(ns())
        sync()
        t.append(ns())
        _zero_blocks.by_device[dev] = st
        names = ["variant+checks", "status+plan", "empty C", "empty partials", "MMM launch",
                 "reduce launch", "status memcpy", "wait"]
        if rep >= WARMUP:
            for i, name in enumerate(names):
                steps.setdefault(name, []).append(t[i + 1] - t[i])
    step_us = {name: float(np.median(s)) / 1e3 for name, s in steps.items()}
    step_us.update(public_path_marks(a, b, sync))
    step_us.update(python_layers(m, n, k))
    return {"shape": f"{m}x{n}x{k}", "variant": variant.name, "split": slices,
            "bit_exact": same, "wall_us": wall, "host_steps_us": step_us}


def public_path_marks(a: cp.ndarray, b: cp.ndarray, sync: Callable[[], None]) -> dict[str, float]:
    """Host time of safemon.matmul from its start to its first kernel launch, to its status
    read, and in all (the GPU idle before each call): marks set by wrapping the module
    globals `safemon.kernels.gpu.launch` and `safemon.kernels.checked.read_status`."""
    from safemon.kernels import checked, gpu

    marks: dict[str, int] = {}
    ns = time.perf_counter_ns
    real_launch, real_read = gpu.launch, checked.read_status

    def launch(*args: object) -> None:
        marks.setdefault("launch", ns())
        real_launch(*args)

    def read_status(status: object) -> object:
        marks["read"] = ns()
        return real_read(status)

    gpu.launch, checked.read_status = launch, read_status
    rows: dict[str, list[int]] = {"public: to 1st launch": [], "public: to status read": [],
                                  "public: whole call": []}
    try:
        for rep in range(REPS + WARMUP):
            sync()
            marks.clear()
            t0 = ns()
            safemon.matmul(a, b, mode="fma")
            t1 = ns()
            if rep >= WARMUP:
                rows["public: to 1st launch"].append(marks["launch"] - t0)
                rows["public: to status read"].append(marks["read"] - t0)
                rows["public: whole call"].append(t1 - t0)
    finally:
        gpu.launch, checked.read_status = real_launch, real_read
    return {name: float(np.median(s)) / 1e3 for name, s in rows.items()}


def python_layers(m: int, n: int, k: int) -> dict[str, float]:
    """Host time (µs per call, 20000 calls) of each layer of the synchronous public path with
    the kernel launches and the status read stubbed out: what the Python of each layer costs,
    the difference between a row and the next."""
    from safemon.kernels import checked, gpu

    rng = np.random.default_rng(0)
    a = cp.asarray(rng.standard_normal((m, k), dtype=np.float32))
    b = cp.asarray(rng.standard_normal((k, n), dtype=np.float32))
    variant = api._variant_for(a, b, None, None, "fma", None, None)
    real_launch, real_read = gpu.launch, checked.read_status
    gpu.launch = lambda *args: None
    checked.read_status = lambda status: checked._OK
    status = cp.zeros(STATUS_WORDS, dtype=cp.uint32)
    rows = {
        "matmul": lambda: safemon.matmul(a, b, mode="fma"),
        "run_variant": lambda: api.run_variant(a, b, variant),
        "run_checked": lambda: checked.run_checked(a, b, variant),
        "gpu_matmul": lambda: gpu.gpu_matmul(a, b, variant, status),
        "_launch_mmm": lambda: gpu._launch_mmm(a, b, variant, status, record_sm=False),
        "_variant_for": lambda: api._variant_for(a, b, None, None, "fma", None, None),
        "getDevice": cp.cuda.runtime.getDevice,
        "cp.empty C": lambda: cp.empty((m, n), dtype=cp.float32),
        "cp.cuda.alloc": lambda: cp.cuda.alloc(4 * m * n),
        "MatmulResult": lambda: api.MatmulResult(a, b, variant, api.Backend.CUPY),
    }
    out: dict[str, float] = {}
    try:
        for name, fn in rows.items():
            for _ in range(500):
                fn()
            t0 = time.perf_counter()
            for _ in range(20000):
                fn()
            out[f"py {name}"] = (time.perf_counter() - t0) / 20000 * 1e6
    finally:
        gpu.launch, checked.read_status = real_launch, real_read
    return out


def main() -> None:
    shapes = sys.argv[1:] or SHAPES
    results = []
    for s in shapes:
        m, n, k = (int(x) for x in s.split("x"))
        r = probe(m, n, k)
        results.append(r)
        print(f"== {r['shape']} {r['variant']} split {r['split']}; C equal to safemon.matmul's: "
              f"{r['bit_exact']}")
        base = r["wall_us"]["cupy.matmul"][0]  # type: ignore[index]
        for name, (p50, p99) in r["wall_us"].items():  # type: ignore[attr-defined]
            print(f"  {name:15s} p50 {p50:7.1f}  p99 {p99:7.1f} µs   cupy/this {base / p50:5.2f}")
        for name, us in r["host_steps_us"].items():  # type: ignore[attr-defined]
            print(f"  step {name:15s} {us:6.2f} µs")
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "launch_path.json"), "w") as f:
            json.dump({"device": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(),
                       "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                       "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
