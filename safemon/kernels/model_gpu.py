"""The CuPy side of whole-model requests and digest voting: the layer epilogue
(`cuda/epilogue.cu`, bias add then activation, in place) and the digest word sum
(`cuda/digest.cu`). Their NumPy references are `safemon.models.activations.epilogue` and
`safemon.digest.digest64`; the GPU tests hold each pair bit for bit.

Everything is queued on CuPy's current stream; only `device_digests` waits (one 8-byte-
per-array read-back).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from safemon.digest import finish
from safemon.kernels.compiler import KernelBuild, import_cupy
from safemon.kernels.gpu import AUX_MAX_BLOCKS, AUX_THREADS, function_for
from safemon.models.activations import Activation

__all__ = ["device_digests", "digest_build", "epilogue_build", "launch_epilogue",
           "nvcc_builds"]

CUDA_DIR = Path(__file__).parent / "cuda"
#: --fmad=false: the comparisons and the exp polynomial must never be contracted.
_NO_FMA = ("--fmad=false",)


def epilogue_build() -> KernelBuild:
    """The compilation of epilogue.cu (one build for every shape and activation)."""
    return KernelBuild.make(CUDA_DIR / "epilogue.cu", options=_NO_FMA)


def digest_build() -> KernelBuild:
    """The compilation of digest.cu."""
    return KernelBuild.make(CUDA_DIR / "digest.cu")


def nvcc_builds() -> list[KernelBuild]:
    """Both builds, for CI's nvcc check."""
    return [epilogue_build(), digest_build()]


def _blocks(n: int) -> int:
    return int(max(1, min(AUX_MAX_BLOCKS, (n + AUX_THREADS - 1) // AUX_THREADS)))


def launch_epilogue(h: Any, bias: Any | None, activation: Activation) -> None:
    """Queue bias add and activation over the (M, N) float32 C-contiguous CuPy array `h`,
    in place; `bias` a (N,) float32 CuPy array or None. No waiting."""
    if bias is None and activation is Activation.IDENTITY:
        return
    m, n = int(h.shape[0]), int(h.shape[1])
    kernel = function_for(("epilogue",), epilogue_build, "safemon_epilogue")
    kernel((_blocks(m * n), 1, 1), (AUX_THREADS, 1, 1),
           (h, bias if bias is not None else np.uintp(0), np.uint64(m), np.uint64(n),
            np.int32(activation.code)))


def device_digests(arrays: Sequence[Any]) -> list[int]:
    """safemon-digest64 of each CuPy array (4-byte elements, C-contiguous), computed on the
    device: one kernel per array into one uint64 buffer, one read-back of 8 bytes each."""
    cp = import_cupy()
    sums = cp.zeros(len(arrays), dtype=cp.uint64)
    kernel = function_for(("digest",), digest_build, "safemon_digest_sum")
    for i, a in enumerate(arrays):
        if a.dtype.itemsize != 4 or not a.flags.c_contiguous:
            raise ValueError(f"digest of a {a.dtype} array (C-contiguous 4-byte elements only)")
        n = int(a.size)
        if n:
            kernel((_blocks(n), 1, 1), (AUX_THREADS, 1, 1),
                   (a, np.uint64(n), sums[i:i + 1]))
    host = sums.get(stream=cp.cuda.get_current_stream())
    cp.cuda.get_current_stream().synchronize()
    return [finish(int(s), int(a.size)) for s, a in zip(host, arrays, strict=True)]
