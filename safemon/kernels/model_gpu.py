"""The CuPy side of whole-model requests and digest voting: the layer epilogue
(`cuda/epilogue.cu`, bias add then activation, in place) and the digest word sum
(`cuda/digest.cu`). Their NumPy references are `safemon.models.activations.epilogue` and
`safemon.digest.digest64`; the GPU tests hold each pair bit for bit.

Everything is queued on CuPy's current stream; only `device_digests` and `copy_digest`
wait (one read-back of 8 or 16 bytes per array, into page-locked memory).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from safemon.digest import finish
from safemon.kernels.compiler import KernelBuild, import_cupy
from safemon.kernels.gpu import AUX_MAX_BLOCKS, AUX_THREADS, function_for
from safemon.models.activations import Activation

__all__ = ["copy_digest", "device_digests", "digest_build", "epilogue_build",
           "launch_epilogue", "nvcc_builds"]

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


_pinned = threading.local()


def _read_u64(cp: Any, sums: Any) -> list[int]:
    """Copy the uint64 CuPy array `sums` into this thread's page-locked buffer on the
    current stream, wait for it, and return the values (one DMA and one wait, where a
    pageable `get()` costs a staging copy too)."""
    n = int(sums.size)
    host = getattr(_pinned, "block", None)
    if host is None or host.size < n:
        mem = cp.cuda.alloc_pinned_memory(8 * max(n, 64))
        host = np.frombuffer(mem, dtype=np.uint64, count=max(n, 64))
        _pinned.block, _pinned.mem = host, mem  # the view keeps no reference to mem
    stream = cp.cuda.get_current_stream()
    cp.cuda.runtime.memcpyAsync(host.ctypes.data, sums.data.ptr, 8 * n,
                                cp.cuda.runtime.memcpyDeviceToHost, stream.ptr)
    stream.synchronize()
    return [int(v) for v in host[:n]]


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
    host = _read_u64(cp, sums)
    return [finish(s, int(a.size)) for s, a in zip(host, arrays, strict=True)]


def copy_digest(src: Any, dst: Any | None = None) -> tuple[int, int]:
    """(safemon-digest64 of `src`, the number of its float32 NaN or infinity words),
    copying `src` into `dst` on the way when given: one kernel (`safemon_copy_digest`) and
    one 16-byte read-back. `src` and `dst` are C-contiguous CuPy arrays of 4-byte elements
    and equal size on the current device.

    Raises:
        ValueError: another element size, a non-contiguous array, or sizes that differ.
    """
    cp = import_cupy()
    for name, a in (("src", src), ("dst", dst)):
        if a is not None and (a.dtype.itemsize != 4 or not a.flags.c_contiguous):
            raise ValueError(f"copy_digest {name}: a {a.dtype} array (C-contiguous 4-byte "
                             "elements only)")
    n = int(src.size)
    if dst is not None and int(dst.size) != n:
        raise ValueError(f"copy_digest: src has {n} elements, dst {int(dst.size)}")
    sums = cp.zeros(2, dtype=cp.uint64)
    if n:
        kernel = function_for(("digest",), digest_build, "safemon_copy_digest")
        kernel((_blocks(n), 1, 1), (AUX_THREADS, 1, 1),
               (src, dst if dst is not None else np.uintp(0), np.uint64(n), sums))
    s, bad = _read_u64(cp, sums)
    return finish(s, n), bad
