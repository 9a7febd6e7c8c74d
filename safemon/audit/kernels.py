"""The audit-only CUDA kernels (`cuda/block_order.cu`, `cuda/atomic_sum.cu`) and their builds.

Neither is loaded by the runtime. `block_order_build(variant)` compiles the shipped MMM tile
code of `variant` with a block-start counter (same defines and flags as `build_for(variant)`);
`atomic_sum_build()` is the float-atomic contrast. `nvcc_builds()` lists both for CI's nvcc
check (which refuses a `.cu` file no build compiles).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from safemon.kernels.catalog import Variant, make_variant
from safemon.kernels.compiler import KernelBuild
from safemon.kernels.gpu import build_for

__all__ = ["ATOMIC_SUM_SOURCE", "BLOCK_ORDER_SOURCE", "atomic_sum_build", "block_order_build",
           "nvcc_builds"]

CUDA_DIR = Path(__file__).parent / "cuda"
BLOCK_ORDER_SOURCE = CUDA_DIR / "block_order.cu"
ATOMIC_SUM_SOURCE = CUDA_DIR / "atomic_sum.cu"


def block_order_build(variant: Variant) -> KernelBuild:
    """The instrumented build of `variant`: its exact defines and options, mmm.cu included."""
    shipped = build_for(variant)
    return replace(shipped, source=BLOCK_ORDER_SOURCE,
                   include_dirs=(CUDA_DIR, *shipped.include_dirs))


def atomic_sum_build() -> KernelBuild:
    return KernelBuild.make(ATOMIC_SUM_SOURCE, {}, ("--fmad=false",))


def nvcc_builds() -> list[KernelBuild]:
    return [block_order_build(make_variant("crc32c", "I", "exact", "small")), atomic_sum_build()]
