"""The CuPy side of whole-model requests and digest voting: the layer epilogue
(`cuda/epilogue.cu`, bias add then activation, in place) and the digest word sum
(`cuda/digest.cu`). Their NumPy references are `safemon.models.activations.epilogue` and
`safemon.digest.digest64`; the GPU tests hold each pair bit for bit.

Everything is queued on CuPy's current stream; only `DigestBatch.values` (and
`device_digests` and `copy_digest`, which use it) waits: one read-back of 16 bytes per
digest, into page-locked memory.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from safemon.digest import finish
from safemon.kernels.compiler import KernelBuild, import_cupy
from safemon.kernels.gpu import AUX_MAX_BLOCKS, AUX_THREADS, function_for
from safemon.kernels.launch import arg_block, function_pointer, launch
from safemon.kernels.pinned import PinnedBuffer
from safemon.models.activations import Activation

__all__ = ["DigestBatch", "copy_digest", "device_digests", "digest_build", "epilogue_build",
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


_AUX_BLOCK = (AUX_THREADS, 1, 1)


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


#: Page-locked words for the digests' read-backs.
_HOST_WORDS = PinnedBuffer(np.uint64, 64)


def _check_words(name: str, a: Any) -> None:
    if a.dtype.itemsize != 4 or not a.flags.c_contiguous:
        raise ValueError(f"digest of {name}: a {a.dtype} array (C-contiguous 4-byte "
                         "elements only)")


class DigestBatch:
    """safemon-digest64s queued on CuPy's current stream into one zeroed device buffer and
    read back with one copy: `add` digests an array, `add_copy` also copies it (one
    `safemon_copy_digest` kernel: a copy by the SMs, not the copy engine, so a channel's
    step has no copy between its kernels), `queue_read` queues the read-back into this
    thread's page-locked buffer, `values` waits and finishes the digests.

    Args:
        capacity: the most digests this batch takes (the device buffer holds two uint64
            words per digest: the word sum and the count of non-finite float32 words).

    The page-locked buffer belongs to the thread: collect `values` before the thread's next
    read-back.
    """

    def __init__(self, capacity: int) -> None:
        self._cp = import_cupy()
        self._capacity = max(capacity, 1)
        # A bare pool allocation zeroed on the current stream: no ndarray is made, since
        # the kernels and the read-back only need its address (`cupy.zeros` costs several
        # microseconds more per batch, and a channel's step makes one per request).
        self._sums = self._cp.cuda.alloc(16 * self._capacity)
        self._sums.memset_async(0, 16 * self._capacity)
        self._sizes: list[int] = []
        self._host: npt.NDArray[np.uint64] | None = None
        self._stream: Any = None

    def _enqueue(self, kernel: str, src: Any, dst: Any | None) -> int:
        """Launch `kernel` of digest.cu over `src` (and `dst` for the copying kernel, None
        for its digest-only form) into the next entry's two words; returns the entry's
        index. The launch goes through `safemon.kernels.launch` (no per-call boxing of
        arguments): same kernel, grid and arguments as a `RawKernel` call."""
        if self._host is not None:
            raise ValueError("digests added after queue_read")
        i = len(self._sizes)
        if i >= self._capacity:
            raise ValueError(f"a DigestBatch of {self._capacity} digests is full")
        n = int(src.size)
        self._sizes.append(n)
        if n:
            function = function_pointer(function_for(("digest",), digest_build, kernel))
            out = self._sums.ptr + 16 * i
            if kernel == "safemon_digest_sum":  # (words, n, out)
                args = arg_block(3)
                v = args.values
                v[0], v[1], v[2] = src.data.ptr, n, out
            else:  # safemon_copy_digest (src, dst, n, out)
                args = arg_block(4)
                v = args.values
                v[0], v[1], v[2], v[3] = src.data.ptr, 0 if dst is None else dst.data.ptr, n, out
            launch(function, (_blocks(n), 1, 1), _AUX_BLOCK, args)
        return i

    def add(self, a: Any) -> int:
        """Queue the digest of the CuPy array `a` (C-contiguous, 4-byte elements); returns
        its index in `values`.

        Raises:
            ValueError: another element size, a non-contiguous array, or a full batch.
        """
        _check_words("an array", a)
        return self._enqueue("safemon_digest_sum", a, None)

    def add_copy(self, src: Any, dst: Any | None) -> int:
        """Queue the copy of `src` into `dst` (CuPy arrays of equal size, C-contiguous,
        4-byte elements) with the digest and the non-finite count of the words copied;
        `dst` None only digests and counts. Returns the entry's index.

        Raises:
            ValueError: as `add`, or sizes that differ.
        """
        _check_words("src", src)
        if dst is not None:
            _check_words("dst", dst)
            if int(dst.size) != int(src.size):
                raise ValueError(f"copy_digest: src has {int(src.size)} elements, "
                                 f"dst {int(dst.size)}")
        return self._enqueue("safemon_copy_digest", src, dst)

    def queue_read(self) -> None:
        """Queue the read-back on the current stream (no wait)."""
        if self._host is not None:
            return
        n = 2 * len(self._sizes)
        self._stream = self._cp.cuda.get_current_stream()
        self._host = _HOST_WORDS.get(self._cp, n)
        if n:
            rt = self._cp.cuda.runtime
            rt.memcpyAsync(self._host.ctypes.data, self._sums.ptr, 8 * n,
                           rt.memcpyDeviceToHost, self._stream.ptr)

    def values(self) -> list[tuple[int, int]]:
        """(digest, non-finite words) per entry, in the order added; queues the read-back
        if not yet queued, then waits for the stream (the one host synchronisation). The
        non-finite count is counted by `add_copy` only (0 for `add`)."""
        self.queue_read()
        self._stream.synchronize()
        assert self._host is not None
        words = [int(v) for v in self._host[:2 * len(self._sizes)]]
        return [(finish(words[2 * i], n), words[2 * i + 1])
                for i, n in enumerate(self._sizes)]


def device_digests(arrays: Sequence[Any]) -> list[int]:
    """safemon-digest64 of each CuPy array (4-byte elements, C-contiguous), computed on the
    device: one kernel per array into one buffer, one read-back and one wait.

    Raises:
        ValueError: another element size or a non-contiguous array.
    """
    batch = DigestBatch(len(arrays))
    for a in arrays:
        batch.add(a)
    return [d for d, _ in batch.values()]


def copy_digest(src: Any, dst: Any | None = None) -> tuple[int, int]:
    """(safemon-digest64 of `src`, the number of its float32 NaN or infinity words),
    copying `src` into `dst` on the way when given: one kernel (`safemon_copy_digest`) and
    one read-back. `src` and `dst` are C-contiguous CuPy arrays of 4-byte elements and
    equal size on the current device.

    Raises:
        ValueError: another element size, a non-contiguous array, or sizes that differ.
    """
    batch = DigestBatch(1)
    batch.add_copy(src, dst)
    return batch.values()[0]
