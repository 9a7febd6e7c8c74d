"""What a user pays: API wall time with device arrays, against `cupy.matmul`, in one run.

For each size, inputs are CuPy arrays already on the device and every call is timed as a
user would see it: `time.perf_counter()` around the call and a synchronisation of the
current stream (so work still queued is paid for). Each call's kernels are also timed alone
with CUDA events (the launch sequence of `safemon.bench.overhead`: a spin kernel queued first,
so that launch latency is not counted), which splits the wall time into kernel time and
everything else (checks, allocation, Python, launches, the status read-back).

Calls: `cupy.matmul` (cuBLAS, allocating its output), `safemon.matmul` and
`safemon.protected_matmul` with the shape's automatic tile and split, and
`protected_matmul` with an ECC-protected B (`safemon.ecc.ProtectedArray`). Medians and p99
are reported, never asserted.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from safemon.bench.timing import median_kernel_ms, percentiles, wall_samples_s
from safemon.dims import Dims

__all__ = ["API_CALLS", "api_markdown", "run_api_bench"]

#: (label, checksum, level, mode, ECC-protected B) of the timed safemon calls.
API_CALLS: tuple[tuple[str, str | None, str | None, str, bool], ...] = (
    ("safemon.matmul fma", None, None, "fma", False),
    ("protected_matmul ones/I fma", "ones", "I", "fma", False),
    ("protected_matmul ones/F fma", "ones", "F", "fma", False),
    ("protected_matmul ones/F fma, ECC B", "ones", "F", "fma", True),
)


def _wall_us(cp: Any, fn: Callable[[], object], repeats: int, warmup: int) -> tuple[float, float]:
    """(p50, p99) wall microseconds of `fn()` followed by a stream synchronisation."""
    stream = cp.cuda.get_current_stream()
    p50, p99 = percentiles(wall_samples_s(fn, repeats, warmup, stream.synchronize), (50, 99), 1e6)
    return p50, p99


def _repeats(dims: Dims, repeats: int) -> int:
    macs = dims.m * dims.n * dims.k
    if macs >= 1 << 36:
        return max(10, repeats // 20)
    if macs >= 1 << 30:
        return max(20, repeats // 4)
    return repeats


def run_api_bench(
    dims_list: Sequence[Dims], *, repeats: int = 200, warmup: int = 10, seed: int = 0,
    progress: Callable[[str], None] | None = None,
) -> list[dict[str, Any]]:
    """Rows for `ApiRow`: every call of `API_CALLS` and `cupy.matmul` at every size.

    Raises:
        BackendUnavailableError: no CuPy or no device.
    """
    from safemon.kernels.compiler import import_cupy

    cp = import_cupy()
    rng = np.random.default_rng(seed)
    rows: list[dict[str, Any]] = []
    for dims in dims_list:
        a = cp.asarray(rng.standard_normal((dims.m, dims.k), dtype=np.float32))
        b = cp.asarray(rng.standard_normal((dims.k, dims.n), dtype=np.float32))
        rows += _time_size(cp, dims, a, b, _repeats(dims, repeats), warmup, progress)
        cp.get_default_memory_pool().free_all_blocks()
    return rows


def _call_for(a: Any, b: Any, checksum: str | None, level: str | None, mode: str) -> Callable[[], object]:
    import safemon

    if checksum is None:
        return lambda: safemon.matmul(a, b, mode=mode)
    return lambda: safemon.protected_matmul(a, b, checksum=checksum, level=level or "I", mode=mode)


def _time_size(
    cp: Any, dims: Dims, a: Any, b: Any, reps: int, warmup: int,
    progress: Callable[[str], None] | None,
) -> list[dict[str, Any]]:
    from safemon.bench.overhead import variant_launcher
    from safemon.ecc import ProtectedArray
    from safemon.kernels.api import _variant_for

    pb = ProtectedArray(b, name="bench-b")
    if progress is not None:
        progress(f"api {dims.label} cupy.matmul")
    cupy_p50, cupy_p99 = _wall_us(cp, lambda: cp.matmul(a, b), reps, warmup)
    cupy_kernel = median_kernel_ms(cp, lambda: cp.matmul(a, b), reps, warmup) * 1e3
    rows = [_row("cupy.matmul", None, dims, reps, cupy_p50, cupy_p99, cupy_kernel, cupy_p50)]
    for label, checksum, level, mode, ecc in API_CALLS:
        if progress is not None:
            progress(f"api {dims.label} {label}")
        v = _variant_for(a, b, checksum, level, mode, None, None)
        p50, p99 = _wall_us(cp, _call_for(a, pb if ecc else b, checksum, level, mode), reps, warmup)
        kernel = median_kernel_ms(cp, variant_launcher(cp, v, a, b), reps, warmup) * 1e3
        rows.append(_row(label, v.name, dims, reps, p50, p99, kernel, cupy_p50))
    return rows


def _row(call: str, variant: str | None, dims: Dims, reps: int, p50: float, p99: float,
         kernel_us: float, cupy_p50: float) -> dict[str, Any]:
    return {"call": call, "variant": variant, "dims": dims.key, "repeats": reps,
            "wall_p50_us": p50, "wall_p99_us": max(p99, p50), "kernel_us": kernel_us,
            "cupy_wall_p50_us": cupy_p50, "vs_cupy": p50 / cupy_p50}


def api_markdown(rows: Sequence[Any]) -> str:
    """The API table: one line per size, wall p50 (µs) and ratio to cupy.matmul per call,
    then the wall-minus-kernel overhead per call."""
    calls: list[str] = []
    dims_order: list[str] = []
    for r in rows:
        if r.call not in calls:
            calls.append(r.call)
        if r.dims not in dims_order:
            dims_order.append(r.dims)
    cell = {(r.call, r.dims): r for r in rows}
    head = "| M×N×K | " + " | ".join(calls) + " |"
    lines = ["### API wall time, device arrays (p50 µs; ratio to cupy.matmul, same run)", "",
             head, "|---|" + "---:|" * len(calls)]
    for d in dims_order:
        vals = []
        for c in calls:
            r = cell.get((c, d))
            vals.append("—" if r is None else f"{r.wall_p50_us:.0f} ({r.vs_cupy:.2f}×)")
        lines.append(f"| {d} | " + " | ".join(vals) + " |")
    lines += ["", "### Kernel time (CUDA events, µs) and wall − kernel (µs)", "",
              head, "|---|" + "---:|" * len(calls)]
    for d in dims_order:
        vals = []
        for c in calls:
            r = cell.get((c, d))
            vals.append("—" if r is None else
                        f"{r.kernel_us:.1f} / +{r.wall_p50_us - r.kernel_us:.1f}")
        lines.append(f"| {d} | " + " | ".join(vals) + " |")
    tiles = {r.dims: r.variant.rsplit("/", 2)[-2:] for r in rows
             if r.variant and r.call.startswith("safemon.matmul")}
    lines += ["", "Tile / split picked per size: " + "; ".join(
        f"{d}: {'/'.join(t)}" for d, t in tiles.items()), ""]
    return "\n".join(lines)
