"""The CuPy backend: compile the protected-MMM kernel per variant, launch it, return C and ES.

Kernels are compiled once per (device, variant) through `compiler.load_module` and launched on
CuPy's current stream, so a channel in stream mode only needs `with stream:` around the call.
A variant whose K is split (`Variant.slices(k) > 1`) launches the kernel over a (gx, gy, S)
grid into S partial products and then `splitk.cu`'s reduction, both on that stream. A variant
that reads Aᵀ (`Variant.reads_a_transposed`) first gets it from `transpose.cu`, on that
stream too.

Per-call host cost (issue 14, item 1): everything about a launch that depends only on the
variant and the shape is computed once (`_Plan`). Production builds other than inter-block
RMT's launch through `safemon.kernels.launch` (an argument block written in place, no
per-argument boxing), a split product's partials are a bare pool allocation, and its C is
allocated after the MMM launch, while the kernel runs (`_launch_lean`). On the H100 this
took 9–15 µs off a synchronous call at the inference shapes
(evidence/h100-2026-11-24-launch/).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from safemon.kernels.catalog import (
    CHECKSUMS,
    LEVELS,
    TILES,
    WIDE64_READS_AT,
    TileConfig,
    Variant,
    make_variant,
    t_level_tile,
)
from safemon.kernels.compiler import KernelBuild, import_cupy, load_module, on_clear
from safemon.kernels.launch import arg_block, function_pointer, launch

__all__ = [
    "SIG_CODES",
    "all_finite",
    "build_for",
    "build_reads_a_transposed",
    "finite_build",
    "function_for",
    "gpu_matmul",
    "gpu_matmul_recording_sm",
    "launch_finite",
    "launch_inputs_finite",
    "nvcc_builds",
    "rmt_block_buffers",
    "rmt_block_shapes",
    "splitk_build",
    "transpose",
    "transpose_build",
]

CUDA_DIR = Path(__file__).parent / "cuda"
MMM_SOURCE = CUDA_DIR / "mmm.cu"
FINITE_SOURCE = CUDA_DIR / "finite.cu"
SPLITK_SOURCE = CUDA_DIR / "splitk.cu"
TRANSPOSE_SOURCE = CUDA_DIR / "transpose.cu"
#: Threads per block of the split-K reduction and of the finite check.
AUX_THREADS = 256
#: Grid cap of those grid-stride kernels (blocks); enough to fill an H100 several times.
AUX_MAX_BLOCKS = 1024
KERNEL_NAME = "safemon_mmm"
#: Checksum name → the SIG_* code of signature.cuh.
SIG_CODES: dict[str | None, int] = {
    None: 0, "xor": 1, "twos": 2, "ones": 3, "fletcher": 4, "crc32c": 5,
}


def build_for(variant: Variant, *, inject: bool = False, record_sm: bool = False) -> KernelBuild:
    """The compilation of `variant` (the injection build when `inject`; the self-test build,
    which records each block's SM, when `record_sm`).

    The split factor is not part of the build (the kernel reads it from gridDim.z).

    Raises:
        ValueError: `inject` with a split variant: the injection build uses blockIdx.z to
            select the injection and always walks the whole of K (split 1).
    """
    if inject and variant.split != 1:
        raise ValueError(
            f"{variant.name}: the fault-injection build runs split 1 only (blockIdx.z selects "
            "the injection); campaign the split-1 variant"
        )
    t = variant.tile
    levels = {level: kind for kind, level in variant.parts}
    defines: dict[str, object] = {
        "BM": t.bm, "BN": t.bn, "BK": t.bk, "TM": t.tm, "TN": t.tn,
        "MODE_FMA": int(variant.mode == "fma"),
        "SIG_I": SIG_CODES[levels.get("I")],
        "SIG_M": SIG_CODES[levels.get("M")],
        "SIG_E": SIG_CODES[levels.get("E")],
        "SIG_F": SIG_CODES[levels.get("F")],
        "SIG_T": SIG_CODES[levels.get("T")],
        "SAFEMON_INJECT": int(inject),
    }
    if t.async_copy:  # only then, so the other tiles keep their exact cache keys and code
        defines["TILE_ASYNC"] = 1
    if variant.reads_a_transposed and not inject:  # the injection build flips A in registers
        defines["A_KMAJOR"] = 1
    lane_map, mac_order = variant.kernel_schedule
    if lane_map:  # only then, so the other builds keep their exact cache keys and code
        defines["LANE_MAP"] = lane_map
    if mac_order and not inject:  # the injection build flips an accumulator after its MAC
        defines["MAC_ORDER"] = mac_order
    if variant.rmt == "warp":  # only then, so builds without RMT keep their exact code
        defines["RMT_WARP"] = 1
    elif variant.rmt == "block":
        defines["RMT_BLOCK"] = 1
    if inject and variant.abft:  # the campaign model of abft.cu (verdict bit 3)
        defines["SAFEMON_ABFT_VERDICT"] = 1
    if record_sm:  # only then, so production builds keep their exact cache keys and code
        defines["SAFEMON_RECORD_SM"] = 1
    fmad = "--fmad=true" if variant.mode == "fma" else "--fmad=false"
    return KernelBuild.make(MMM_SOURCE, defines, (fmad,))


def build_reads_a_transposed(build: KernelBuild) -> bool:
    """True when the MMM build `build` sets A_KMAJOR=1, i.e. takes Aᵀ (K×M) for A: what
    `build_for` sets for `Variant.reads_a_transposed`, read back from any build (the probes
    compare builds with edited defines)."""
    return str(dict(build.defines).get("A_KMAJOR", 0)) == "1"


_functions: dict[tuple[Any, ...], Any] = {}
_functions_lock = threading.Lock()


def _clear_functions() -> None:
    with _functions_lock:
        _functions.clear()
        _plans.clear()


on_clear(_clear_functions)


def _function(key: tuple[Any, ...], build: Callable[[], KernelBuild], name: str) -> Any:
    """The kernel `name` of `build()` on the current device, looked up by the cheap `key`.

    Building and hashing a `KernelBuild` costs tens of microseconds of Python, paid on every
    call before this cache existed; the key here is a variant or a constant.
    """
    cp = import_cupy()
    full = (cp.cuda.runtime.getDevice(), *key, name)  # one build may hold several kernels
    fn = _functions.get(full)
    if fn is None:
        fn = load_module(build()).get_function(name)
        with _functions_lock:
            _functions[full] = fn
    return fn


def function_for(key: tuple[Any, ...], build: Callable[[], KernelBuild], name: str) -> Any:
    """The kernel `name` of `build()` on the current device, cached under `key` (for the
    kernels of other modules, e.g. safemon.kernels.abft)."""
    return _function(key, build, name)


def kernel_for(variant: Variant, *, inject: bool = False, record_sm: bool = False) -> Any:
    """The compiled `cupy.RawKernel` of `variant` on the current device."""
    if inject and variant.split != 1:
        build_for(variant, inject=True)  # raises: the injection build runs split 1 only
    # Whether the build reads Aᵀ and its schedule are part of the key: variants that differ
    # only there (the tile's `a_kmajor`, `lane_map` and `mac_order`, not part of its
    # identity) compare equal but are different builds.
    return _function(
        ("mmm", variant, variant.reads_a_transposed, variant.kernel_schedule, inject, record_sm),
        lambda: build_for(variant, inject=inject, record_sm=record_sm),
        KERNEL_NAME,
    )


def gpu_matmul(a: Any, b: Any, variant: Variant, status: Any = None) -> tuple[Any, Any]:
    """Run the kernel of `variant` on the current CuPy stream (no host synchronisation).

    Args:
        a: (M, K) float32 C-contiguous, NumPy (uploaded) or CuPy.
        b: (K, N) float32 C-contiguous, NumPy (uploaded) or CuPy.
        status: None, or the uint32 CuPy status block of `safemon.kernels.checked`: when
            any of words 0-3 is nonzero at the start the kernel stores poison instead of
            computing, and its finite check sets word 0 (1) and poisons the tiles that
            loaded a NaN or infinity from A (B) (mmm.cu). Without it nothing is checked.
    Returns:
        (c, es) as CuPy arrays on the current device: (M, N) float32 and
        (variant.es_threads(M, N, K), words) uint32.
    """
    c, es, _ = _launch_mmm(a, b, variant, status, record_sm=False)
    return c, es


class _Plan:
    """Everything a launch of one variant at one shape needs that does not depend on the
    arrays: grid, block, output shapes, the compiled kernel. Computed once per (device,
    variant, M, N, K, build); a call then costs a dictionary look-up instead of the Python of
    tile arithmetic and kernel look-up (issue 14: per-call host cost)."""

    __slots__ = ("a_t_bytes", "a_transposed", "block", "c_shape", "dims", "es_empty", "es_shape",
                 "grid", "kernel", "lean", "mmm_function", "partial_bytes", "partial_shape",
                 "reduce", "reduce_function", "reduce_grid", "rmt_shapes", "sizes",
                 "transpose_function", "transpose_grid", "variant")

    def __init__(self, variant: Variant, m: int, n: int, k: int, record_sm: bool) -> None:
        t = variant.tile
        gx, gy = t.grid(m, n)
        slices = variant.slices(k)
        self.variant = variant  # keeps the variant alive while its id keys the cache
        self.grid = (gx, gy * variant.grid_copies, slices)
        self.rmt_shapes = rmt_block_shapes(variant, m, n, slices)
        self.block = (variant.block_threads, 1, 1)
        self.c_shape = (m, n)
        self.es_shape = (gx * gy * t.threads * slices, variant.words)
        self.partial_shape = None if slices == 1 else (slices, m, n)
        self.dims = (np.int32(m), np.int32(n), np.int32(k))
        self.a_transposed = variant.reads_a_transposed  # the self-test build too
        self.kernel = kernel_for(variant, record_sm=record_sm)
        self.reduce = None if slices == 1 else _function(("splitk",), splitk_build,
                                                          "safemon_splitk_reduce")
        # An unprotected variant's ES has no words: one zero-size array, shared by every
        # call of the plan (it holds no memory, so nothing can be written through it).
        self.es_empty = (import_cupy().empty(self.es_shape, dtype=np.uint32)
                         if variant.words == 0 else None)
        # The lean launch (`_launch_lean`): every production build but inter-block RMT's,
        # whose extra buffers keep the RawKernel call.
        self.lean = not record_sm and self.rmt_shapes is None
        self.sizes = (m, n, k, m * n, slices)
        self.mmm_function = function_pointer(self.kernel) if self.lean else 0
        self.partial_bytes = 0 if slices == 1 else 4 * slices * m * n
        self.reduce_function = function_pointer(self.reduce) if self.reduce is not None else 0
        self.reduce_grid = (_reduce_blocks(m * n), 1, 1)
        # A lean launch of a build that reads Aᵀ queues transpose.cu itself (`transpose`'s
        # grid for an M×K A) into a bare pool allocation of a_t_bytes.
        lean_t = self.lean and self.a_transposed
        self.transpose_function = function_pointer(
            _function(("transpose",), transpose_build, "safemon_transpose")) if lean_t else 0
        self.transpose_grid = _transpose_grid(m, k)
        self.a_t_bytes = 4 * m * k


#: Launch plans by (device, id(variant), M, N, K, record_sm); cleared with the kernels. The
#: plan holds its variant, so the id cannot be reused while the entry exists.
_plans: dict[tuple[int, int, int, int, int, bool], _Plan] = {}
_PLANS_MAX = 4096


def _plan_for(variant: Variant, m: int, n: int, k: int, record_sm: bool) -> _Plan:
    cp = import_cupy()
    key = (cp.cuda.runtime.getDevice(), id(variant), m, n, k, record_sm)
    plan = _plans.get(key)
    if plan is None or plan.variant is not variant:
        plan = _Plan(variant, m, n, k, record_sm)
        with _functions_lock:
            if len(_plans) >= _PLANS_MAX:
                _plans.clear()
            _plans[key] = plan
    return plan


def _launch_mmm(
    a: Any, b: Any, variant: Variant, status: Any, *, record_sm: bool
) -> tuple[Any, Any, Any]:
    """Queue `variant`'s kernel (the self-test build when `record_sm`) over its K-slices and
    reduce them; returns (c, es, sm), sm None unless `record_sm` ((gx·gy,) uint32)."""
    cp = import_cupy()
    a_d = a if isinstance(a, cp.ndarray) else cp.asarray(a)
    b_d = b if isinstance(b, cp.ndarray) else cp.asarray(b)
    m, k = a_d.shape
    n = b_d.shape[1]
    plan = _plan_for(variant, m, n, k, record_sm)
    if plan.lean:
        c, es = _launch_lean(cp, plan, a_d, b_d, status)
        return c, es, None
    if plan.a_transposed:
        a_d = transpose(a_d)
    c = cp.empty(plan.c_shape, dtype=cp.float32)
    es = plan.es_empty if plan.es_empty is not None else cp.empty(plan.es_shape, dtype=cp.uint32)
    out = c if plan.partial_shape is None else cp.empty(plan.partial_shape, dtype=cp.float32)
    args = [a_d, b_d, out, es, *plan.dims, _NULL if status is None else status]
    sm = None
    if record_sm:
        sm = cp.empty(plan.grid[0] * plan.grid[1], dtype=cp.uint32)
        args.append(sm)
    if plan.rmt_shapes is not None:  # inter-block RMT: the spare C tiles, zeroed counters
        args += rmt_block_buffers(plan.rmt_shapes)
    plan.kernel(plan.grid, plan.block, tuple(args))
    if plan.reduce is not None:
        _reduce(plan.reduce, out, c)
    return c, es, sm


_NULL = np.uintp(0)


def _launch_lean(cp: Any, plan: _Plan, a: Any, b: Any, status: Any) -> tuple[Any, Any]:
    """`_launch_mmm` for a plan with `lean` set, through `safemon.kernels.launch` (no
    per-call boxing of arguments). A split product's MMM kernel writes the partials, not C,
    so C is allocated after that launch, while the kernel runs, and the partials are a bare
    pool allocation: the host work before the kernel starts is what a caller waits for. A
    build that reads Aᵀ gets it from transpose.cu the same way (a bare allocation, this
    launch path): through `transpose` it cost 10–15 µs more per call (H100,
    evidence/h100-2026-11-25-lanes/, call 15)."""
    m, n, k, mn, slices = plan.sizes
    a_ptr = a.data.ptr
    if plan.transpose_function:
        a_t = cp.cuda.alloc(plan.a_t_bytes)  # back to the stream's pool on return
        t_args = arg_block(4)  # transpose.cu: src, dst, rows, cols
        t = t_args.values
        t[0], t[1], t[2], t[3] = a_ptr, a_t.ptr, m, k
        launch(plan.transpose_function, plan.transpose_grid, _TRANSPOSE_BLOCK, t_args)
        a_ptr = a_t.ptr
    es = plan.es_empty if plan.es_empty is not None else cp.empty(plan.es_shape, dtype=cp.uint32)
    args = arg_block(8)  # mmm.cu: A, B, C (or the partials), ES, M, N, K, status
    v = args.values
    v[0], v[1], v[3] = a_ptr, b.data.ptr, es.data.ptr
    v[4], v[5], v[6] = m, n, k
    v[7] = 0 if status is None else status.data.ptr
    if not plan.partial_bytes:
        c = cp.empty(plan.c_shape, dtype=cp.float32)
        v[2] = c.data.ptr
        launch(plan.mmm_function, plan.grid, plan.block, args)
        return c, es
    partials = cp.cuda.alloc(plan.partial_bytes)  # back to the stream's pool on return
    v[2] = partials.ptr
    launch(plan.mmm_function, plan.grid, plan.block, args)
    c = cp.empty(plan.c_shape, dtype=cp.float32)
    reduce_args = arg_block(4)  # splitk.cu: P, C, MN, S
    r = reduce_args.values
    r[0], r[1], r[2], r[3] = partials.ptr, c.data.ptr, mn, slices
    launch(plan.reduce_function, plan.reduce_grid, _AUX_BLOCK, reduce_args)
    return c, es


_AUX_BLOCK = (AUX_THREADS, 1, 1)


def rmt_block_shapes(
    variant: Variant, m: int, n: int, z: int, *, inject: bool = False
) -> tuple[tuple[int, ...], int] | None:
    """Shapes of the two extra kernel arguments of an inter-block RMT build (mmm.cu's
    RMT_ARGS), or None for any other variant.

    Args:
        z: gridDim.z: the K-slices (production) or the injections of one launch (`inject`).
    Returns:
        (the float32 rmt_buf shape, the number of uint32 arrival counters). rmt_buf holds
        copy 1's C tiles, (z, M, N), or in the injection build both copies', (z, 2, M, N).
        The counters, one per block tile and z, must be zero at every launch.
    """
    if variant.rmt != "block":
        return None
    gx, gy = variant.tile.grid(m, n)
    return ((z, 2, m, n) if inject else (z, m, n)), z * gy * gx


def rmt_block_buffers(shapes: tuple[tuple[int, ...], int]) -> tuple[Any, Any]:
    """The two extra arguments of an inter-block RMT launch, from `rmt_block_shapes`: an
    uninitialised float32 rmt_buf and the zeroed uint32 arrival counters (CuPy, current
    device and stream). A caller launching again with the same buffers zeroes the counters
    first (`counters.data.memset_async`)."""
    cp = import_cupy()
    return cp.empty(shapes[0], dtype=cp.float32), cp.zeros(shapes[1], dtype=cp.uint32)


def splitk_build() -> KernelBuild:
    """The compilation of splitk.cu (one build for every shape and split)."""
    return KernelBuild.make(SPLITK_SOURCE)


def reduce_slices(partials: Any, c: Any) -> None:
    """c = the sum of the (S, M, N) `partials` in slice order (splitk.cu), on the current stream."""
    _reduce(_function(("splitk",), splitk_build, "safemon_splitk_reduce"), partials, c)


def _reduce_blocks(mn: int) -> int:
    """Blocks of splitk.cu's reduction over `mn` elements (4 per thread when mn % 4 == 0)."""
    units = mn // 4 if mn % 4 == 0 else mn
    return max(1, min(AUX_MAX_BLOCKS, (units + AUX_THREADS - 1) // AUX_THREADS))


def _reduce(kernel: Any, partials: Any, c: Any) -> None:
    s = int(partials.shape[0])
    mn = int(c.size)
    kernel((_reduce_blocks(mn), 1, 1), _AUX_BLOCK, (partials, c, np.int64(mn), np.int32(s)))


def gpu_matmul_recording_sm(a: Any, b: Any, variant: Variant) -> tuple[Any, Any, Any]:
    """`gpu_matmul` through the self-test build: also returns, per block, the SM that ran it.

    Returns:
        (c, es, sm) as CuPy arrays; sm is (blocks,) uint32 with blocks = gx·gy, indexed by
        the linear block id `by·gx + bx` (docs/SIGNATURES.md), each the block's `%smid`. An
        inter-block RMT variant runs every tile twice: sm then has 2·gx·gy entries, copy 1's
        blocks after copy 0's.
    """
    if variant.split != 1:
        raise ValueError(f"{variant.name}: the self-test build runs split 1 only")
    return _launch_mmm(a, b, variant, None, record_sm=True)


def transpose_build() -> KernelBuild:
    """The compilation of transpose.cu (one build for every shape)."""
    return KernelBuild.make(TRANSPOSE_SOURCE)


#: transpose.cu's block: 32 columns × 8 rows of threads, one 32×32 tile per iteration.
_TRANSPOSE_BLOCK = (32, 8, 1)
#: Grid cap along y (CUDA's limit for gridDim.y); the kernel strides over further tiles.
_GRID_Y_MAX = 65535


def transpose(x: Any, out: Any = None) -> Any:
    """xᵀ as a new C-contiguous array (or into `out`), on the current stream, no waiting.

    Args:
        x: (rows, cols) C-contiguous CuPy array of a 4-byte dtype (float32 for the kernels);
            every word is moved as its bit pattern.
        out: None, or a (cols, rows) C-contiguous CuPy array of x's dtype to fill.
    Returns:
        (cols, rows) CuPy array of x's dtype.
    Raises:
        ValueError: x is not 2-D, C-contiguous and of a 4-byte dtype, or `out` does not fit.
    """
    cp = import_cupy()
    if x.ndim != 2 or x.dtype.itemsize != 4 or not x.flags.c_contiguous:
        raise ValueError(f"transpose needs a 2-D C-contiguous array of 4-byte words, got "
                         f"{x.dtype} {tuple(x.shape)}")
    rows, cols = (int(d) for d in x.shape)
    if out is None:
        out = cp.empty((cols, rows), dtype=x.dtype)
    elif out.shape != (cols, rows) or out.dtype != x.dtype or not out.flags.c_contiguous:
        raise ValueError(f"out must be a C-contiguous {x.dtype} array of shape {(cols, rows)}, "
                         f"got {out.dtype} {tuple(out.shape)}")
    if x.size:
        kernel = _function(("transpose",), transpose_build, "safemon_transpose")
        kernel(_transpose_grid(rows, cols), _TRANSPOSE_BLOCK,
               (x, out, np.int32(rows), np.int32(cols)))
    return out


def _transpose_grid(rows: int, cols: int) -> tuple[int, int, int]:
    """transpose.cu's grid for a rows×cols source: one 32-column tile per block along x,
    32-row tiles along y up to CUDA's gridDim.y limit (the kernel strides over the rest)."""
    return (-(-cols // 32), min(_GRID_Y_MAX, -(-rows // 32)), 1)


def finite_build() -> KernelBuild:
    """The compilation of finite.cu (one build for every shape)."""
    return KernelBuild.make(FINITE_SOURCE)


def all_finite(x: Any) -> bool:
    """True when the CuPy float32 array `x` holds no NaN or infinity (numpy.isfinite's rule).

    Runs on CuPy's current stream and waits for it. `x` must be C-contiguous float32.
    """
    cp = import_cupy()
    if x.size == 0:
        return True
    flag = cp.zeros(1, dtype=cp.uint32)
    launch_finite(x, flag)
    return int(flag.get()[0]) == 0


def launch_finite(x: Any, flag: Any) -> None:
    """Queue finite.cu over `x` on the current stream: sets the uint32 `flag` (a CuPy array
    of one element, zeroed by the caller) to 1 when `x` holds NaN or infinity. No waiting."""
    if x.size == 0:
        return
    blocks = int(min(AUX_MAX_BLOCKS, (x.size + AUX_THREADS - 1) // AUX_THREADS))
    kernel = _function(("finite",), finite_build, "safemon_any_nonfinite")
    kernel((blocks, 1, 1), (AUX_THREADS, 1, 1), (x, np.uint64(x.size), flag))


def launch_inputs_finite(a: Any, b: Any, status_ptr: int, *, check_a: bool, check_b: bool) -> None:
    """Queue one finite.cu launch over A and B (float32, C-contiguous CuPy arrays): word 0 of
    the status block at `status_ptr` becomes 1 when A holds NaN or infinity, word 1 when B
    does. An operand not to check counts as empty. No waiting."""
    na = int(a.size) if check_a else 0
    nb = int(b.size) if check_b else 0
    if na + nb == 0:
        return
    blocks = int(min(AUX_MAX_BLOCKS, (na + nb + AUX_THREADS - 1) // AUX_THREADS))
    kernel = _function(("finite2",), finite_build, "safemon_inputs_nonfinite")
    kernel((blocks, 1, 1), (AUX_THREADS, 1, 1),
           (a, np.uint64(na), b, np.uint64(nb), np.uintp(status_ptr)))


def nvcc_builds() -> list[KernelBuild]:
    """Builds that together compile every code path of mmm.cu, and finite.cu (CI's nvcc check).

    Every checksum once, every level with a fold in it, both modes, every tile, a combination and
    the injection build; not the full cross product, which repeats the same code paths.
    """
    tiles: list[TileConfig] = list(TILES.values())
    builds: list[KernelBuild] = []
    for i, kind in enumerate(CHECKSUMS):
        level = LEVELS[i % len(LEVELS)]
        builds.append(build_for(make_variant(kind, level, ("exact", "fma")[i % 2], tiles[i % len(tiles)])))
    builds.append(build_for(make_variant("crc32c", "E", "exact", "small")))
    for i, tile in enumerate(tiles):
        builds.append(build_for(make_variant(None, None, ("fma", "exact")[i % 2], tile)))
    builds.append(build_for(make_variant("ones_crc32c", "I", "exact", "large")))
    # `wide64` reading Aᵀ, as auto_tile picks it at wide outputs (catalog.WIDE64_READS_AT).
    builds.append(build_for(make_variant("ones", "T", "fma", WIDE64_READS_AT)))
    builds.append(build_for(make_variant(None, None, "exact", WIDE64_READS_AT)))
    # Level T's 16-wide k-tiles (`catalog.t_level_variant`): two stages on `large_k16`, three
    # on `wide64_k16` reading Aᵀ.
    builds.append(build_for(make_variant("ones", "T", "fma", "large_k16")))
    builds.append(build_for(make_variant("crc32c", "T", "exact", t_level_tile(WIDE64_READS_AT))))
    # MAC order 1 with level M's folds inside the serpentine (`Variant.kernel_schedule`):
    # under lane map 0 (catalog.M_LEVEL_SCHEDULES) and under `large`'s own map 1; and ones/M's
    # scheduled build, map 0 and order 0, reading Aᵀ.
    builds.append(build_for(make_variant("twos", "M", "fma", "large")))
    builds.append(build_for(make_variant("xor", "M", "exact", "large")))
    builds.append(build_for(make_variant("ones", "M", "fma", "large")))
    builds.append(build_for(make_variant("fletcher_xor", "I", "fma", "small"), inject=True))
    builds.append(build_for(make_variant("ones", "M", "exact", "large", rmt="warp")))
    builds.append(build_for(make_variant("crc32c", "E", "fma", "wide", rmt="warp")))
    builds.append(build_for(make_variant(None, None, "exact", "small", rmt="warp")))
    builds.append(build_for(make_variant("ones", "F", "fma", "skinny", rmt="warp")))
    builds.append(build_for(make_variant("ones", "T", "fma", "half", rmt="warp")))
    builds.append(build_for(make_variant("twos", "M", "exact", "small", rmt="warp"), inject=True))
    # Register staging with fewer A elements per k-tile than threads (skinny, RMT).
    builds.append(build_for(make_variant("xor", "T", "exact", "skinny", rmt="warp"), inject=True))
    builds.append(build_for(make_variant("ones", "M", "fma", "large", rmt="block")))
    builds.append(build_for(make_variant(None, None, "fma", "skinny", rmt="block")))
    builds.append(build_for(make_variant("ones", "T", "exact", "wide", rmt="block")))
    builds.append(build_for(make_variant("twos", "M", "exact", "small", rmt="block"), inject=True))
    builds.append(build_for(make_variant(None, None, "fma", "small", rmt="block", abft=True),
                            inject=True))
    builds.append(build_for(make_variant(None, None, "exact", "small", rmt="block"),
                            record_sm=True))
    builds.append(build_for(make_variant("ones", "M", "fma", "large", abft=True), inject=True))
    builds.append(build_for(make_variant(None, None, "fma", "wide", rmt="warp", abft=True),
                            inject=True))
    builds.append(build_for(make_variant("ones", "I", "exact", "small"), record_sm=True))
    from safemon.kernels.abft import abft_build

    builds.append(abft_build())
    builds.append(finite_build())
    builds.append(splitk_build())
    builds.append(transpose_build())
    return builds
