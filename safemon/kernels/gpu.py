"""The CuPy backend: compile the protected-MMM kernel per variant, launch it, return C and ES.

Kernels are compiled once per (device, variant) through `compiler.load_module` and launched on
CuPy's current stream, so a channel in stream mode only needs `with stream:` around the call.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from safemon.kernels.catalog import (
    CHECKSUMS,
    LEVELS,
    TILES,
    TileConfig,
    Variant,
    make_variant,
)
from safemon.kernels.compiler import KernelBuild, import_cupy, load_module

__all__ = ["SIG_CODES", "all_finite", "build_for", "finite_build", "gpu_matmul",
           "gpu_matmul_recording_sm", "nvcc_builds"]

CUDA_DIR = Path(__file__).parent / "cuda"
MMM_SOURCE = CUDA_DIR / "mmm.cu"
FINITE_SOURCE = CUDA_DIR / "finite.cu"
KERNEL_NAME = "safemon_mmm"
#: Checksum name → the SIG_* code of signature.cuh.
SIG_CODES: dict[str | None, int] = {
    None: 0, "xor": 1, "twos": 2, "ones": 3, "fletcher": 4, "crc32c": 5,
}


def build_for(variant: Variant, *, inject: bool = False, record_sm: bool = False) -> KernelBuild:
    """The compilation of `variant` (the injection build when `inject`; the self-test build,
    which records each block's SM, when `record_sm`)."""
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
    if record_sm:  # only then, so production builds keep their exact cache keys and code
        defines["SAFEMON_RECORD_SM"] = 1
    fmad = "--fmad=true" if variant.mode == "fma" else "--fmad=false"
    return KernelBuild.make(MMM_SOURCE, defines, (fmad,))


def kernel_for(variant: Variant, *, inject: bool = False, record_sm: bool = False) -> Any:
    """The compiled `cupy.RawKernel` of `variant` on the current device."""
    return load_module(build_for(variant, inject=inject, record_sm=record_sm)).get_function(KERNEL_NAME)


def gpu_matmul(a: Any, b: Any, variant: Variant) -> tuple[Any, Any]:
    """Run the kernel of `variant` on the current CuPy stream.

    Args:
        a: (M, K) float32 C-contiguous, NumPy (uploaded) or CuPy.
        b: (K, N) float32 C-contiguous, NumPy (uploaded) or CuPy.
    Returns:
        (c, es) as CuPy arrays on the current device: (M, N) float32 and (threads, words) uint32.
    """
    cp = import_cupy()
    a_d = cp.asarray(a)
    b_d = cp.asarray(b)
    m, k = a_d.shape
    n = b_d.shape[1]
    t = variant.tile
    gx, gy = t.grid(m, n)
    c = cp.empty((m, n), dtype=cp.float32)
    es = cp.empty((gx * gy * t.threads, variant.words), dtype=cp.uint32)
    kernel = kernel_for(variant)
    kernel((gx, gy, 1), (t.threads, 1, 1), (a_d, b_d, c, es, np.int32(m), np.int32(n), np.int32(k)))
    return c, es


def gpu_matmul_recording_sm(a: Any, b: Any, variant: Variant) -> tuple[Any, Any, Any]:
    """`gpu_matmul` through the self-test build: also returns, per block, the SM that ran it.

    Returns:
        (c, es, sm) as CuPy arrays; sm is (blocks,) uint32 with blocks = gx·gy, indexed by
        the linear block id `by·gx + bx` (docs/SIGNATURES.md), each the block's `%smid`.
    """
    cp = import_cupy()
    a_d = cp.asarray(a)
    b_d = cp.asarray(b)
    m, k = a_d.shape
    n = b_d.shape[1]
    t = variant.tile
    gx, gy = t.grid(m, n)
    c = cp.empty((m, n), dtype=cp.float32)
    es = cp.empty((gx * gy * t.threads, variant.words), dtype=cp.uint32)
    sm = cp.empty(gx * gy, dtype=cp.uint32)
    kernel = kernel_for(variant, record_sm=True)
    kernel((gx, gy, 1), (t.threads, 1, 1),
           (a_d, b_d, c, es, np.int32(m), np.int32(n), np.int32(k), sm))
    return c, es, sm


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
    words = x.view(cp.uint32).ravel()
    flag = cp.zeros(1, dtype=cp.uint32)
    threads = 256
    blocks = int(min(1024, (words.size + threads - 1) // threads))
    kernel = load_module(finite_build()).get_function("safemon_any_nonfinite")
    kernel((blocks, 1, 1), (threads, 1, 1), (words, np.uint64(words.size), flag))
    return int(flag.get()[0]) == 0


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
    builds.append(build_for(make_variant("fletcher_xor", "I", "fma", "small"), inject=True))
    builds.append(build_for(make_variant("ones", "I", "exact", "small"), record_sm=True))
    builds.append(finite_build())
    return builds
