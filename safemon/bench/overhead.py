"""The overhead benchmark: protected vs unprotected (same K-slices) vs cuBLAS, per variant and size.

For each size, the tile and split are the library's `auto_tile` / `auto_split` choice for a
variant without a fold at every MAC (one tiling for every variant of the size; a level-I call
of the API may pick another tile at some shapes, docs/SIGNATURES.md; intra-warp RMT runs the
tile the library gives it, `half` for `large` and `wide` for `wide64`, and level T its
16-wide k-tiles on `large` and `wide64` (`catalog.t_level_variant`), against the same
baseline: same K-slices, hence the same C), and
every variant of `standard_variants(mode, tile, split)` and of `checked_variants(mode, tile,
split)` (intra-warp RMT, ABFT, each with ES-M: docs/RMT.md) is timed (its kernel, when split
the split-K reduction, for ABFT the check kernels) with the unprotected kernel of the same block
tile and K-slices and `cupy.matmul` (cuBLAS) *in the same run*, so the ratios do not depend on clock drift between
runs. Each timing is the median of `repeats` runs measured with CUDA events after a warm-up;
before each timed run a short spin kernel is queued on the stream, so the kernel is already
queued when its start event fires and Python's launch latency is not counted (the same
method as `safemon.bench.ecc`). Clocks are read (nvidia-smi query or device attributes) and
recorded, never set. Timings are reported, never asserted in tests. The API section
(`safemon.bench.api`) adds what a user pays per call, wall clock, against cupy.matmul.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from safemon.bench.timing import median_kernel_ms
from safemon.dims import BENCH_DIMS, Dims
from safemon.evidence.campaign import variant_label
from safemon.evidence.store import BENCH_SCHEMA, BenchEvidence, now_utc
from safemon.kernels.catalog import (
    Variant,
    auto_split,
    auto_tile,
    checked_variants,
    make_variant,
    rmt_warp_variant,
    standard_variants,
    t_level_variant,
)
from safemon.kernels.checked import STATUS_WORDS
from safemon.kernels.precompile import precompile

__all__ = [
    "LARGE_SIZE_REPEATS",
    "bench_markdown",
    "device_info",
    "run_bench",
    "variant_launcher",
]

#: Minimum repeats at sizes of at least 2**36 MACs (4096³): the brief's "≥ 10 at 4096³".
LARGE_SIZE_REPEATS = 10

_SMI_FIELDS = (
    "clocks.sm", "clocks.mem", "clocks.max.sm", "clocks.max.mem",
    "clocks.applications.graphics", "power.limit", "driver_version", "pstate",
)


def device_info(cp: Any) -> dict[str, Any]:
    """Name, clocks and versions of the current device, read-only.

    Clocks come from `nvidia-smi --query-gpu` when it is on PATH, else from CuPy's device
    attributes (`clockRate`, `memoryClockRate`, kHz).
    """
    dev = cp.cuda.Device()
    props = cp.cuda.runtime.getDeviceProperties(dev.id)
    name = props["name"]
    clocks: dict[str, str] = {}
    smi = shutil.which("nvidia-smi")
    if smi is not None:
        try:
            out = subprocess.run(
                [smi, f"--id={dev.id}", "--query-gpu=" + ",".join(_SMI_FIELDS),
                 "--format=csv,noheader"],
                capture_output=True, text=True, timeout=20, check=True,
            ).stdout.strip()
            clocks = {k: v.strip() for k, v in zip(_SMI_FIELDS, out.split(","), strict=False)}
        except (OSError, subprocess.SubprocessError):
            clocks = {}
    if not clocks:
        clocks = {
            "clockRate_khz": str(props.get("clockRate", "unknown")),
            "memoryClockRate_khz": str(props.get("memoryClockRate", "unknown")),
        }
    return {
        "device": name.decode() if isinstance(name, bytes) else str(name),
        "clocks": clocks,
        "cuda_runtime": int(cp.cuda.runtime.runtimeGetVersion()),
        "cuda_driver": int(cp.cuda.runtime.driverGetVersion()),
        "cupy": str(cp.__version__),
    }


def variant_launcher(
    cp: Any, variant: Variant, a: Any, b: Any, kernel: Any = None,
    a_transposed: bool | None = None, status_block: bool = False,
) -> Callable[[], tuple[Any, Any]]:
    """The variant's kernels alone, on preallocated buffers: for a variant that reads Aᵀ
    (`Variant.reads_a_transposed`) the transpose of A, the MMM kernel over its K-slices,
    when split the reduction, and for an ABFT variant the check kernels of abft.cu (no input
    checks: those are part of the API wall time). A row-only ABFT check ("rows") takes B's
    vectors made once, before the first call, as a registered weight has them. Each call
    returns the (c, es) buffers.
    `kernel`: another compilation of the MMM kernel to launch instead of the variant's own
    (scripts/kernel_compare.py times an earlier mmm.cu this way); `a_transposed` says whether
    that build reads Aᵀ (None: as the variant's own build does). `status_block`: pass every
    launch a zeroed status block, as production launches have (the kernel's finite check
    runs only with one); without it only RMT and ABFT variants get one."""
    from safemon.kernels.abft import abft_weight_vectors, begin_abft, finish_abft
    from safemon.kernels.gpu import (
        kernel_for,
        reduce_slices,
        rmt_block_buffers,
        rmt_block_shapes,
        transpose,
    )

    m, k = a.shape
    n = b.shape[1]
    t = variant.tile
    gx, gy = t.grid(m, n)
    slices = variant.slices(k)
    c = cp.empty((m, n), dtype=cp.float32)
    out = c if slices == 1 else cp.empty((slices, m, n), dtype=cp.float32)
    es = cp.empty((max(1, gx * gy * t.threads * slices * variant.words),), dtype=cp.uint32)
    kernel = kernel_for(variant) if kernel is None else kernel
    # RMT and ABFT report through a status block (checked.py); the input-check words stay 0.
    checks = status_block or variant.rmt != "none" or variant.abft
    status = cp.zeros(STATUS_WORDS, dtype=cp.uint32) if checks else None
    # Aᵀ, remade on every call (a caller pays it with every product).
    if a_transposed is None:
        a_transposed = variant.reads_a_transposed
    a_t = cp.empty((k, m), dtype=cp.float32) if a_transposed else None
    # The array itself is the argument: the closure keeps it alive (a bare pointer would let
    # the memory pool hand its memory to the next allocation).
    args: tuple[Any, ...] = (a if a_t is None else a_t, b, out, es, np.int32(m), np.int32(n),
                             np.int32(k),
                             np.uintp(0) if status is None else status)
    # Inter-block RMT: copy 1's C tiles and the arrival counters, cleared before every
    # launch (the clearing is timed with the kernel: every call pays it).
    rmt = rmt_block_shapes(variant, m, n, slices)
    counters = None
    if rmt is not None:
        spare, counters = rmt_block_buffers(rmt)
        args += (spare, counters)

    # The row-only ABFT check of a weight: B's vectors made once, before timing, as a channel's
    # ECC-protected weight keeps them (`checked.weight_vectors`).
    weights = abft_weight_vectors(b, t) if variant.abft_kind == "rows" else None

    def run() -> tuple[Any, Any]:
        # The ABFT check as `checked.launch_checked` queues it (a side stream for the
        # checksum products of large products, planned before the kernel).
        pending = (begin_abft(m, n, k, variant, weights=weights)
                   if status is not None and variant.abft else None)
        if counters is not None:
            counters.data.memset_async(0, counters.nbytes)
        if a_t is not None:
            transpose(a, a_t)
        kernel((gx, gy * variant.grid_copies, slices), (variant.block_threads, 1, 1), args)
        if slices > 1:
            reduce_slices(out, c)
        if pending is not None:
            assert status is not None
            finish_abft(pending, a, b, c, int(status.data.ptr))
        return c, es

    return run


def _repeats_for(dims: Dims, repeats: int) -> int:
    """`repeats`, but a tenth of it (at least `LARGE_SIZE_REPEATS`) at ≥ 2**36 MACs."""
    if dims.m * dims.n * dims.k >= 1 << 36:
        return max(LARGE_SIZE_REPEATS, repeats // 10)
    return repeats


def run_bench(
    *,
    dims_list: Sequence[Dims] = tuple(BENCH_DIMS.values()),
    modes: Sequence[str] = ("fma", "exact"),
    variant_filter: Callable[[Variant], bool] | None = None,
    repeats: int = 100,
    warmup: int = 10,
    ecc: bool = True,
    ecc_sizes_mib: Sequence[int] = (64, 256),
    ecc_dims: Sequence[Dims] = (BENCH_DIMS["1024"], BENCH_DIMS["4096"]),
    api_dims: Sequence[Dims] = (),
    api_repeats: int = 200,
    seed: int = 0,
    progress: Callable[[str], None] | None = None,
) -> BenchEvidence:
    """Time every standard variant at every size and mode; return validated evidence.

    Args:
        dims_list: sizes; the tile at each is `auto_tile(M, N, K)` (one block tile and split for
            every variant of a size, so that overheads compare the same decomposition; level
            T and intra-warp RMT run the tile the library gives them there).
        modes: arithmetic modes ("fma", "exact").
        variant_filter: keep only variants for which it returns True (None: all standard).
        repeats: timed runs per median; at sizes of ≥ 2**36 MACs (4096³) a tenth of it,
            but never fewer than `LARGE_SIZE_REPEATS` (10).
        ecc: also run `safemon.bench.ecc.run_ecc_bench(ecc_sizes_mib)` and time
            `ProtectedArray.verified()` + the kernel against the kernel alone at `ecc_dims`.
        api_dims: sizes of the API wall-time section (`safemon.bench.api`); empty
            skips it. `api_repeats` calls per median there (fewer at large sizes).
        progress: called with a short text before each measurement.

    Raises:
        BackendUnavailableError: no CuPy or no CUDA device.
        ValueError: repeats < 1 or an unknown mode.
    """
    from safemon import __version__
    from safemon.kernels.compiler import import_cupy

    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, not {repeats}")
    cp = import_cupy()
    info = device_info(cp)
    rng = np.random.default_rng(seed)
    if progress is not None:
        progress("compiling the kernels of this run in parallel")
    precompile([*_kernel_variants(dims_list, modes, variant_filter), *_api_variants(api_dims)])
    rows: list[dict[str, Any]] = []
    for dims in dims_list:
        rows += _bench_dims(cp, dims, modes, variant_filter, _repeats_for(dims, repeats),
                            warmup, rng, progress)
        cp.get_default_memory_pool().free_all_blocks()
    ecc_result: dict[str, Any] | None = None
    ecc_rows: list[dict[str, Any]] = []
    if ecc:
        from safemon.bench.ecc import run_ecc_bench

        if progress is not None:
            progress("ecc")
        ecc_result = run_ecc_bench(ecc_sizes_mib, repeats=max(10, min(repeats, 50)))
        ecc_rows = _ecc_mmm(cp, ecc_dims, repeats, warmup, rng, progress)
    api_rows: list[dict[str, Any]] = []
    if api_dims:
        from safemon.bench.api import run_api_bench

        api_rows = run_api_bench(api_dims, repeats=api_repeats, warmup=warmup, seed=seed,
                                 progress=progress)
    return BenchEvidence.model_validate({
        "schema": BENCH_SCHEMA, "safemon_version": __version__, "date": now_utc(),
        **info, "rows": rows, "ecc": ecc_result, "ecc_mmm": ecc_rows, "api": api_rows,
    })


def _variants_at(dims: Dims, mode: str, variant_filter: Callable[[Variant], bool] | None
                 ) -> list[Variant]:
    """The variants `_bench_dims` times at `dims` in `mode` (one tile for all of them)."""
    tile = auto_tile(dims.m, dims.n, dims.k)
    split = auto_split(dims.m, dims.n, dims.k, tile)
    out = []
    for v in standard_variants(mode, tile, split) + checked_variants(mode, tile, split):
        if v.rmt == "warp":  # the tile the library runs intra-warp RMT on here
            v = rmt_warp_variant(v, dims.k)
        v = t_level_variant(v, dims.k)  # and level T's k-tiles
        if variant_filter is None or variant_filter(v):
            out.append(v)
    return out


def _kernel_variants(dims_list: Sequence[Dims], modes: Sequence[str],
                     variant_filter: Callable[[Variant], bool] | None) -> list[Variant]:
    """Every variant the kernel section builds, with each size's unprotected baseline."""
    out: list[Variant] = []
    for dims in dims_list:
        for mode in modes:
            chosen = _variants_at(dims, mode, variant_filter)
            if chosen:
                out += [*chosen, replace(chosen[0], checksum=None, level=None, rmt="none",
                                         abft_kind="none")]
    return out


def _api_variants(api_dims: Sequence[Dims]) -> list[Variant]:
    """The variants the API section's calls pick (`safemon.bench.api.API_CALLS`)."""
    from safemon.bench.api import API_CALLS
    from safemon.kernels.catalog import variant_for_shape

    return [variant_for_shape(d.m, d.n, d.k, checksum, None if checksum is None else level or "I",
                              mode, None, None, "none", False)
            for d in api_dims for _, checksum, level, mode, _ in API_CALLS]


def _bench_dims(
    cp: Any, dims: Dims, modes: Sequence[str], variant_filter: Callable[[Variant], bool] | None,
    reps: int, warmup: int, rng: np.random.Generator, progress: Callable[[str], None] | None,
) -> list[dict[str, Any]]:
    tile = auto_tile(dims.m, dims.n, dims.k)
    split = auto_split(dims.m, dims.n, dims.k, tile)
    a = cp.asarray(rng.standard_normal((dims.m, dims.k), dtype=np.float32))
    b = cp.asarray(rng.standard_normal((dims.k, dims.n), dtype=np.float32))
    c_blas = cp.empty((dims.m, dims.n), dtype=cp.float32)

    def run_blas() -> None:
        cp.matmul(a, b, out=c_blas)

    rows: list[dict[str, Any]] = []
    for mode in modes:
        variants = _variants_at(dims, mode, variant_filter)
        if not variants:
            continue
        base = make_variant(None, None, mode, tile, split)
        run_base = variant_launcher(cp, base, a, b)
        for v in variants:
            if progress is not None:
                progress(f"{dims.label} {v.name}")
            run_prot = variant_launcher(cp, v, a, b)
            # All three in the same run, per variant: the ratios share clocks and thermal state.
            prot = median_kernel_ms(cp, run_prot, reps, warmup)
            unprot = median_kernel_ms(cp, run_base, reps, warmup)
            blas = median_kernel_ms(cp, run_blas, reps, warmup)
            gflop = dims.flops / 1e9  # GFLOP / ms = TFLOP/s
            rows.append({
                "variant": variant_label(v), "name": v.name, "checksum": v.checksum,
                "level": v.level, "mode": mode, "tile": v.tile.name + (f"/split{v.split}" if v.split > 1 else ""), "dims": dims.key,
                "repeats": reps, "protected_ms": prot, "unprotected_ms": unprot,
                "cublas_ms": blas, "overhead": prot / unprot, "vs_cublas": prot / blas,
                "tflops_protected": gflop / prot, "tflops_unprotected": gflop / unprot,
                "tflops_cublas": gflop / blas,
                "schedule": v.kernel_schedule, "unprotected_schedule": base.kernel_schedule,
            })
    return rows


def _ecc_mmm(
    cp: Any, dims_list: Sequence[Dims], repeats: int, warmup: int, rng: np.random.Generator,
    progress: Callable[[str], None] | None,
) -> list[dict[str, Any]]:
    """ECC-verified B + MMM vs MMM alone (ones/I, fma, auto tile), same run."""
    from safemon.ecc import ProtectedArray
    from safemon.kernels.gpu import kernel_for

    out = []
    for dims in dims_list:
        v = make_variant("ones", "I", "fma", auto_tile(dims.m, dims.n, dims.k, "I"))
        if progress is not None:
            progress(f"ecc+mmm {dims.label}")
        a = cp.asarray(rng.standard_normal((dims.m, dims.k), dtype=np.float32))
        b = cp.asarray(rng.standard_normal((dims.k, dims.n), dtype=np.float32))
        pb = ProtectedArray(b, name="bench-b")
        run_mmm = variant_launcher(cp, v, a, b)
        t = v.tile
        gx, gy = t.grid(dims.m, dims.n)
        c = cp.empty((dims.m, dims.n), dtype=cp.float32)
        es = cp.empty((gx * gy * t.threads * v.words,), dtype=cp.uint32)
        kernel = kernel_for(v)

        shape = (np.int32(dims.m), np.int32(dims.n), np.int32(dims.k))

        def run_verified(pb: Any = pb, kernel: Any = kernel, a: Any = a, c: Any = c,
                         es: Any = es, grid: tuple[int, int, int] = (gx, gy, 1),
                         block: tuple[int, int, int] = (v.block_threads, 1, 1),
                         shape: tuple[Any, ...] = shape) -> None:
            kernel(grid, block, (a, pb.verified(), c, es, *shape, np.uintp(0)))

        reps = _repeats_for(dims, repeats)
        mmm = median_kernel_ms(cp, run_mmm, reps, warmup)
        ver = median_kernel_ms(cp, run_verified, reps, warmup)
        out.append({"name": v.name, "dims": dims.key, "repeats": reps, "mmm_ms": mmm,
                    "verified_mmm_ms": ver, "ratio": ver / mmm})
    return out


def bench_markdown(ev: BenchEvidence) -> str:
    """The benchmark as Markdown: a header line, then one table per mode (variants × sizes)."""
    lines = [
        f"Device: {ev.device}; CuPy {ev.cupy}, CUDA runtime {ev.cuda_runtime}, driver "
        f"{ev.cuda_driver}; {ev.date}.",
        "Clocks (read only): " + ", ".join(f"{k}={v}" for k, v in ev.clocks.items()),
        "",
    ]
    for mode in ("fma", "exact"):
        rows = [r for r in ev.rows if r.mode == mode]
        if not rows:
            continue
        dims_order: list[str] = []
        for r in rows:
            if r.dims not in dims_order:
                dims_order.append(r.dims)
        lines += [f"### Overhead (protected / unprotected, same K-slices), mode {mode}", "",
                  "| variant | " + " | ".join(dims_order) + " |",
                  "|---|" + "---:|" * len(dims_order)]
        names: list[str] = []
        for r in rows:
            if r.variant not in names:
                names.append(r.variant)
        cell = {(r.variant, r.dims): r for r in rows}
        for nm in names:
            vals = [f"{cell[(nm, d)].overhead:.2f}" if (nm, d) in cell else "—" for d in dims_order]
            lines.append(f"| {nm} | " + " | ".join(vals) + " |")
        lines += ["", "| size | tile | unprotected TFLOP/s | cuBLAS TFLOP/s | unprotected / cuBLAS time |",
                  "|---|---|---:|---:|---:|"]
        for d in dims_order:
            r = next(x for x in rows if x.dims == d)
            lines.append(f"| {d} | {r.tile} | {r.tflops_unprotected:.2f} | {r.tflops_cublas:.2f} | "
                         f"{r.unprotected_ms / r.cublas_ms:.2f} |")
        lines.append("")
    if ev.api:
        from safemon.bench.api import api_markdown

        lines += [api_markdown(ev.api)]
    if ev.ecc_mmm:
        lines += ["### ECC-verified B + MMM vs MMM alone", "",
                  "| variant | size | MMM (ms) | verify + MMM (ms) | ratio |", "|---|---|---:|---:|---:|"]
        for e in ev.ecc_mmm:
            lines.append(f"| {e.name} | {e.dims} | {e.mmm_ms:.3f} | {e.verified_mmm_ms:.3f} | {e.ratio:.2f} |")
        lines.append("")
    if ev.ecc is not None:
        from safemon.bench.ecc import markdown_table

        lines += ["### ECC throughput", "", markdown_table(ev.ecc), ""]
    return "\n".join(lines)
