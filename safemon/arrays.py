"""The array kinds the `Client` accepts and returns: NumPy, CuPy and PyTorch (CPU or CUDA).

`as_host(name, x, devices)` checks an input and returns it as a host NumPy array together
with an `ArrayKind` that turns a host result back into the caller's kind on the caller's
device (`ArrayKind.restore`). Device arrays are recognised by their module (`cupy`, `torch`)
and read through their own API (CuPy `get`, torch `cpu().numpy()`); neither library is
imported unless the caller passed one of its arrays.

Rules (each broken one is an `InvalidInputError`, a ValueError, raised before anything is
sent): float32 only (never converted), 2-D and non-empty, finite; CuPy and torch arrays
must be C-contiguous (a device copy would hide a layout mistake the caller should fix),
and a CUDA array must live on one of the devices the deployment's channels use. NumPy
arrays that are not contiguous are copied (the historical behaviour of `matmul`).

`as_host` stages a device array through host memory (one copy each way); `Client` does
that only when a request cannot go through the CUDA IPC buffers of `safemon.device_io`
(docs/PROTOCOL.md section 11), for which `check_device_array` checks the array in place.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from safemon.errors import InvalidInputError

__all__ = ["ArrayKind", "as_host", "check_device_array"]

F32 = npt.NDArray[np.float32]


@dataclass(frozen=True)
class ArrayKind:
    """Where an input came from: `library` ("numpy", "cupy", "torch") and, for CUDA arrays,
    the device index (None: host memory)."""

    library: str
    device: int | None = None

    def restore(self, host: F32) -> Any:
        """`host` (a result) as this kind of array on this device (a new array)."""
        if self.library == "cupy":
            import cupy

            with cupy.cuda.Device(self.device):
                return cupy.asarray(host)
        if self.library == "torch":
            import torch

            t = torch.from_numpy(np.array(host, dtype=np.float32, copy=True))
            return t if self.device is None else t.to(f"cuda:{self.device}")
        return np.array(host, dtype=np.float32, copy=True)


def _library(x: Any) -> str:
    module = type(x).__module__.split(".")[0]
    if isinstance(x, np.ndarray):
        return "numpy"
    if module in ("cupy", "torch"):
        return module
    raise InvalidInputError(
        f"unsupported array type {type(x).__module__}.{type(x).__name__}: pass a numpy.ndarray, "
        "a cupy.ndarray or a torch.Tensor")


def _check_shape(name: str, shape: tuple[int, ...], dtype: str) -> None:
    if dtype != "float32":
        raise InvalidInputError(f"{name} must be float32, got {dtype} (safemon never converts)")
    if len(shape) != 2 or 0 in shape:
        raise InvalidInputError(f"{name} must be a non-empty 2-D array, got shape {shape}")


def _check_device(name: str, device: int, devices: Collection[int]) -> None:
    if devices and device not in devices:
        raise InvalidInputError(
            f"{name} is on cuda:{device}; this deployment's channels use "
            f"{', '.join(f'cuda:{d}' for d in sorted(devices))}")


def check_device_array(name: str, x: Any, devices: Collection[int] = ()) -> int:
    """Check a CUDA CuPy array or torch tensor by the rules above, except finiteness (the
    caller checks that on the device), without copying it; returns its device index.

    Raises:
        InvalidInputError: see the module docstring.
    """
    lib = _library(x)
    if lib == "cupy":
        _check_shape(name, tuple(x.shape), str(x.dtype))
        if not x.flags.c_contiguous:
            raise InvalidInputError(f"{name} must be C-contiguous (cupy.ascontiguousarray)")
        device = int(x.device.id)
    elif lib == "torch" and x.device.type == "cuda":
        _check_shape(name, tuple(x.shape), str(x.dtype).removeprefix("torch."))
        if not x.is_contiguous():
            raise InvalidInputError(f"{name} must be contiguous (tensor.contiguous())")
        device = int(x.device.index if x.device.index is not None else 0)
    else:
        raise InvalidInputError(f"{name} is not a CUDA array")
    _check_device(name, device, devices)
    return device


def as_host(name: str, x: Any, devices: Collection[int] = ()) -> tuple[F32, ArrayKind]:
    """Check `x` and return (host float32 C-contiguous copy or view, its kind).

    Args:
        name: the argument's name, for messages.
        x: a NumPy, CuPy or torch array.
        devices: CUDA device indices a device array may be on (empty: any).

    Raises:
        InvalidInputError: see the module docstring.
    """
    lib = _library(x)
    if lib == "numpy":
        _check_shape(name, tuple(x.shape), str(x.dtype))
        host: F32 = np.ascontiguousarray(x)
        kind = ArrayKind("numpy")
    elif lib == "cupy":
        _check_shape(name, tuple(x.shape), str(x.dtype))
        if not x.flags.c_contiguous:
            raise InvalidInputError(f"{name} must be C-contiguous (cupy.ascontiguousarray)")
        _check_device(name, int(x.device.id), devices)
        host = np.asarray(x.get(), dtype=np.float32)
        kind = ArrayKind("cupy", int(x.device.id))
    else:
        _check_shape(name, tuple(x.shape), str(x.dtype).removeprefix("torch."))
        if not x.is_contiguous():
            raise InvalidInputError(f"{name} must be contiguous (tensor.contiguous())")
        dev = None
        if x.device.type == "cuda":
            dev = int(x.device.index if x.device.index is not None else 0)
            _check_device(name, dev, devices)
        elif x.device.type != "cpu":
            raise InvalidInputError(f"{name} is on {x.device}; only cpu and cuda tensors are accepted")
        host = np.ascontiguousarray(x.detach().cpu().numpy())
        kind = ArrayKind("torch", dev)
    if not np.isfinite(host).all():
        raise InvalidInputError(f"{name} contains NaN or infinity")
    return host, kind
