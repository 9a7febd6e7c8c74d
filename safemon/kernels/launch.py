"""Kernel launches through `cuLaunchKernel` with an argument block that is built once.

`cupy.RawKernel.__call__` turns every argument into a boxed pointer object on every call.
The per-call path of a synchronous product (issue 14, item 1) instead writes its few
changing values (the arrays' device addresses) into 8-byte slots whose addresses it hands
to `cupy.cuda.driver.launchKernel`. On the H100 this and two other host-path changes
(safemon.kernels.gpu) took 9–15 µs off a synchronous call at the inference shapes
(evidence/h100-2026-11-24-launch/).

Contract of a slot: it holds one kernel parameter of at most 8 bytes, little-endian, so a
pointer, an `int` or a `long long` are written as the Python int they hold (a 4-byte `int`
parameter is read from the slot's low half). Values must be non-negative. `cuLaunchKernel`
copies the parameters before it returns, so a block may be rewritten for the next launch at
once; each thread has its own blocks, so threads never share one.
"""

from __future__ import annotations

import ctypes
import threading
from typing import Any

__all__ = ["ArgBlock", "arg_block", "function_pointer", "launch"]


class ArgBlock:
    """`n` parameter slots (`values`, a ctypes uint64 array) and the array of their
    addresses that `cuLaunchKernel` takes as kernelParams (`address`)."""

    __slots__ = ("_pointers", "address", "values")

    def __init__(self, n: int) -> None:
        self.values = (ctypes.c_uint64 * n)()
        base = ctypes.addressof(self.values)
        self._pointers = (ctypes.c_void_p * n)(*[base + 8 * i for i in range(n)])
        self.address = ctypes.addressof(self._pointers)


class _Blocks(threading.local):
    def __init__(self) -> None:
        self.by_size: dict[int, ArgBlock] = {}


_blocks = _Blocks()


def arg_block(n: int) -> ArgBlock:
    """This thread's block of `n` slots (made on first use, then reused; module docstring)."""
    block = _blocks.by_size.get(n)
    if block is None:
        block = _blocks.by_size[n] = ArgBlock(n)
    return block


def function_pointer(kernel: Any) -> int:
    """The `CUfunction` of a `cupy.RawKernel` (loaded on the current device), as an int."""
    return int(kernel.kernel.ptr)


class _Driver:
    """The two CuPy entry points a launch needs, looked up on first use (CuPy is imported
    only by callers that have a device)."""

    launch_kernel: Any = None
    stream_ptr: Any = None

    @classmethod
    def load(cls) -> None:
        import cupy

        cls.launch_kernel = cupy.cuda.driver.launchKernel
        try:  # what RawKernel launches on: honours the per-thread default stream setting
            from cupy_backends.cuda.stream import get_current_stream_ptr

            cls.stream_ptr = get_current_stream_ptr
        except ImportError:  # pragma: no cover - older CuPy
            cls.stream_ptr = lambda: cupy.cuda.get_current_stream().ptr


def launch(function: int, grid: tuple[int, int, int], block: tuple[int, int, int],
           args: ArgBlock) -> None:
    """Queue `function` over `grid` × `block` on the current CuPy stream (the one
    `cupy.RawKernel` would launch on) with the parameters in `args`; no shared memory
    beyond the kernel's static one. No waiting.

    Raises:
        cupy.cuda.driver.CUDADriverError: the driver refused the launch.
    """
    if _Driver.launch_kernel is None:
        _Driver.load()
    _Driver.launch_kernel(function, grid[0], grid[1], grid[2], block[0], block[1], block[2],
                          0, _Driver.stream_ptr(), args.address, 0)
