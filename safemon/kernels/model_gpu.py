"""The CuPy side of whole-model requests and digest voting: the layer epilogue
(`cuda/epilogue.cu`, bias add then activation, in place), the steps besides products
(`cuda/ops.cu`: layer norm, attention, residual add) and the digest word sum
(`cuda/digest.cu`). Their NumPy references are `safemon.models.activations.epilogue`,
`safemon.models.ops` and `safemon.digest.digest64`; the GPU tests hold each pair bit for bit.

Everything is queued on CuPy's current stream; only `DigestBatch.values` (and
`device_digests` and `copy_digest`, which use it) waits: one read-back of 16 bytes per
digest, into page-locked memory. The step launchers allocate their outputs with
`cupy.empty` and neither wait nor copy to or from the host, so they can be captured in a
CUDA graph.
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
from safemon.models.ops import (
    ATTENTION_CHUNK,
    MAX_HEAD_DIM,
    MAX_TOKENS,
    STORED_TOKENS,
    attention_scale,
)

__all__ = ["DigestBatch", "copy_digest", "device_digests", "digest_build", "epilogue_build",
           "launch_add", "launch_attention", "launch_epilogue", "launch_layer_norm",
           "nvcc_builds", "ops_build"]

CUDA_DIR = Path(__file__).parent / "cuda"
#: --fmad=false: the comparisons and the exp polynomial must never be contracted.
_NO_FMA = ("--fmad=false",)


def epilogue_build() -> KernelBuild:
    """The compilation of epilogue.cu (one build for every shape and activation)."""
    return KernelBuild.make(CUDA_DIR / "epilogue.cu", options=_NO_FMA)


def digest_build() -> KernelBuild:
    """The compilation of digest.cu."""
    return KernelBuild.make(CUDA_DIR / "digest.cu")


def ops_build() -> KernelBuild:
    """The compilation of ops.cu (layer norm, attention, add; one build for every shape).
    Its per-thread arrays are sized by `safemon.models.ops.STORED_TOKENS` and
    `ATTENTION_CHUNK`."""
    return KernelBuild.make(CUDA_DIR / "ops.cu",
                            defines={"SAFEMON_STORED_TOKENS": STORED_TOKENS,
                                     "SAFEMON_ATTENTION_CHUNK": ATTENTION_CHUNK},
                            options=_NO_FMA)


def nvcc_builds() -> list[KernelBuild]:
    """Every build of this module, for CI's nvcc check and the PTX audit."""
    return [epilogue_build(), digest_build(), ops_build()]


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


def _check_f32(name: str, a: Any, ndim: int) -> None:
    """`a` must be a C-contiguous float32 CuPy array of `ndim` dimensions."""
    shape = getattr(a, "shape", None)
    if (getattr(a, "dtype", None) != np.float32 or shape is None or len(shape) != ndim
            or not a.flags.c_contiguous):
        raise ValueError(f"{name} must be a C-contiguous {ndim}-D float32 CuPy array, got "
                         f"{type(a).__name__} {getattr(a, 'dtype', '')} {shape}")


def _ops_kernel(name: str) -> Any:
    return function_for(("ops",), ops_build, name)


def launch_layer_norm(h: Any, weight: Any, bias: Any, eps: float) -> Any:
    """Queue `LayerNorm` (safemon.models.ops.layer_norm_f32) over each row of `h`.

    Args:
        h: (R, N) float32 C-contiguous CuPy array, N >= 1.
        weight, bias: (N,) float32 C-contiguous CuPy arrays (γ, β).
        eps: ε, rounded to float32 as the reference rounds it.
    Returns:
        A new (R, N) float32 C-contiguous CuPy array (`cupy.empty`), filled by the kernel
        queued on the current stream. Nothing waits.

    Raises:
        ValueError: another dtype, layout or shape.
    """
    _check_f32("layer norm input", h, 2)
    _check_f32("layer norm weight", weight, 1)
    _check_f32("layer norm bias", bias, 1)
    rows, n = int(h.shape[0]), int(h.shape[1])
    if n < 1 or weight.shape != (n,) or bias.shape != (n,):
        raise ValueError(f"layer norm over {n} columns with weight {weight.shape} and bias "
                         f"{bias.shape}: both must be ({n},), N >= 1")
    cp = import_cupy()
    out = cp.empty((rows, n), dtype=cp.float32)
    if rows:
        _ops_kernel("safemon_layer_norm")(
            (_blocks(rows), 1, 1), _AUX_BLOCK,
            (h, weight, bias, out, np.uint64(rows), np.uint64(n), np.float32(n),
             np.float32(eps)))
    return out


def launch_attention(h: Any, heads: int, tokens: int, causal: bool = False) -> Any:
    """Queue `Attention` (safemon.models.ops.attention_f32) over `h`.

    Args:
        h: (R, 3·heads·dh) float32 C-contiguous CuPy array, columns [q | k | v]; R a
            multiple of `tokens` (each run of `tokens` rows is one sequence).
        heads: H >= 1.
        tokens: T, 1 .. MAX_TOKENS.
        causal: each token attends to itself and the ones before it only.
    Returns:
        A new (R, heads·dh) float32 C-contiguous CuPy array (`cupy.empty`), filled by the
        kernel queued on the current stream. Nothing waits.

    Raises:
        ValueError: another dtype or layout, a width that is not 3·heads·dh with
            1 <= dh <= MAX_HEAD_DIM, R not a multiple of `tokens`, or `heads`/`tokens` out
            of range.
    """
    _check_f32("attention input", h, 2)
    if not 1 <= tokens <= MAX_TOKENS or heads < 1:
        raise ValueError(f"attention with {heads} heads over {tokens} tokens: heads >= 1, "
                         f"tokens 1 .. {MAX_TOKENS}")
    rows, width = int(h.shape[0]), int(h.shape[1])
    dh = width // (3 * heads)
    if width % (3 * heads) or not 1 <= dh <= MAX_HEAD_DIM:
        raise ValueError(f"attention with {heads} heads takes 3·{heads}·dh columns, "
                         f"1 <= dh <= {MAX_HEAD_DIM}; got {width}")
    if rows % tokens:
        raise ValueError(f"attention over {tokens} tokens: {rows} rows is not a multiple")
    cp = import_cupy()
    out = cp.empty((rows, heads * dh), dtype=cp.float32)
    groups = rows // tokens
    if groups:
        _ops_kernel("safemon_attention")(
            (_blocks(groups * heads * tokens), 1, 1), _AUX_BLOCK,
            (h, out, np.uint64(groups), np.int32(tokens), np.int32(heads), np.int32(dh),
             attention_scale(dh), np.int32(bool(causal))))
    return out


def launch_add(a: Any, b: Any) -> Any:
    """Queue a + b elementwise (safemon.models.ops.add_f32).

    Args:
        a, b: float32 C-contiguous CuPy arrays of the same shape.
    Returns:
        A new float32 C-contiguous CuPy array of that shape (`cupy.empty`), filled by the
        kernel queued on the current stream. Nothing waits.

    Raises:
        ValueError: another dtype or layout, or shapes that differ.
    """
    _check_f32("add operand a", a, len(getattr(a, "shape", ())))
    _check_f32("add operand b", b, len(getattr(b, "shape", ())))
    if a.shape != b.shape:
        raise ValueError(f"add of shapes {a.shape} and {b.shape}: they must be equal")
    cp = import_cupy()
    out = cp.empty(a.shape, dtype=cp.float32)
    n = int(a.size)
    if n:
        _ops_kernel("safemon_add")((_blocks(n), 1, 1), _AUX_BLOCK,
                                   (a, b, out, np.uint64(n)))
    return out


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
