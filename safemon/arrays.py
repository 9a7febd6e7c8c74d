"""The array kinds the `Client` accepts and returns: NumPy, CuPy, PyTorch (CPU or CUDA), and
any other array that speaks DLPack or `__cuda_array_interface__`.

`as_host(name, x, devices)` checks an input and returns it as a host NumPy array together
with an `ArrayKind` that turns a host result back into the caller's kind on the caller's
device (`ArrayKind.restore`). `device_view(name, x, devices)` checks a CUDA input and returns
a CuPy array over the same memory (no copy), which is how `Client` reads x into its CUDA IPC
buffers (`safemon.device_io`, docs/PROTOCOL.md section 11).

How an input is recognised (`array_library`), in this order:
- "numpy": a `numpy.ndarray`;
- "cupy", "torch": by the module of its type; read through their own API, and given back as
  the same kind on the same device;
- "cuda": another producer of CUDA memory, through `__cuda_array_interface__` (Numba, PyCUDA,
  ...) or through DLPack with a CUDA `__dlpack_device__` (JAX, ...). It is read through CuPy
  (which must be installed) and **given back as a CuPy array** on the same device: safemon
  cannot build an arbitrary library's array type, and a CuPy array speaks both protocols,
  so `yourlib.from_dlpack(result)` gives your kind back without a copy;
- "host": another producer of host memory through DLPack (a CPU `__dlpack_device__`); read
  with `numpy.from_dlpack` and **given back as a NumPy array**, for the same reason.
Only the library of the array at hand is imported.

Rules (each broken one is an `InvalidInputError`, a ValueError, raised before anything is
sent): float32 only (never converted), 2-D and non-empty, finite; CuPy, torch and other
CUDA arrays must be C-contiguous (a device copy would hide a layout mistake the caller
should fix), and a CUDA array must live on one of the devices the deployment's channels use.
NumPy and other host arrays that are not contiguous are copied (the historical behaviour of
`matmul`). A DLPack device other than CPU and CUDA is refused.

`as_host` stages a device array through host memory (one copy each way); `Client` does
that only when a request cannot go through the CUDA IPC buffers.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from safemon.errors import InvalidInputError

__all__ = ["DLPACK_CPU", "DLPACK_CUDA", "ArrayKind", "array_library", "as_host", "device_view"]

F32 = npt.NDArray[np.float32]

DLPACK_CPU = 1
"""`kDLCPU` of dlpack.h's `DLDeviceType`."""
DLPACK_CUDA = 2
"""`kDLCUDA` of dlpack.h's `DLDeviceType`."""


@dataclass(frozen=True)
class ArrayKind:
    """Where an input came from: `library` ("numpy", "cupy", "torch"; other producers are
    given back as "numpy" or "cupy", see the module docstring) and, for CUDA arrays, the
    device index (None: host memory)."""

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


def array_library(name: str, x: Any) -> str:
    """How `x` is read: "numpy", "cupy", "torch", "cuda" (another CUDA producer) or "host"
    (another host producer through DLPack); see the module docstring.

    Raises:
        InvalidInputError: x speaks neither protocol, or its DLPack device is neither CPU
            nor CUDA.
    """
    if isinstance(x, np.ma.MaskedArray | np.matrix):
        raise InvalidInputError(
            f"{name} is a {type(x).__name__}: its mask or matrix semantics would be lost; "
            f"pass a plain numpy.ndarray (e.g. np.asarray({name}) once you decided what a "
            "masked value means)")
    if isinstance(x, np.ndarray):
        return "numpy"
    module = type(x).__module__.split(".")[0]
    if module in ("cupy", "torch"):
        return module
    if hasattr(x, "__cuda_array_interface__"):
        return "cuda"
    if hasattr(x, "__dlpack__") and hasattr(x, "__dlpack_device__"):
        try:
            device_type = int(x.__dlpack_device__()[0])
        except Exception as exc:  # a producer's bug: say so, do not guess
            raise InvalidInputError(f"{name}.__dlpack_device__() failed: {exc!r}") from exc
        if device_type == DLPACK_CPU:
            return "host"
        if device_type == DLPACK_CUDA:
            return "cuda"
        raise InvalidInputError(
            f"{name} is on DLPack device type {device_type}; only CPU ({DLPACK_CPU}) and CUDA "
            f"({DLPACK_CUDA}) memory is accepted")
    raise InvalidInputError(
        f"unsupported array type {type(x).__module__}.{type(x).__name__}: pass a numpy.ndarray, "
        "a cupy.ndarray, a torch.Tensor, or any array that speaks DLPack (__dlpack__) or "
        "__cuda_array_interface__")


def _check_shape(name: str, shape: tuple[int, ...], dtype: str) -> None:
    if dtype != "float32":
        raise InvalidInputError(
            f"{name} must be float32, got {dtype} (safemon never converts: its kernels protect "
            "float32 products; convert it yourself, x.float() or x.astype(numpy.float32), if "
            "that is what you mean)")
    if len(shape) != 2 or 0 in shape:
        raise InvalidInputError(f"{name} must be a non-empty 2-D array, got shape {shape}")


def _check_device(name: str, device: int, devices: Collection[int]) -> None:
    if devices and device not in devices:
        raise InvalidInputError(
            f"{name} is on cuda:{device}; this deployment's channels use "
            f"{', '.join(f'cuda:{d}' for d in sorted(devices))}")


def _from_foreign_cuda(name: str, x: Any) -> Any:
    """A CuPy array over the memory of another library's CUDA array (no copy)."""
    try:
        import cupy
    except ImportError as exc:
        raise InvalidInputError(
            f"{name} is a CUDA array of {type(x).__module__}, which safemon reads through "
            "CuPy, and CuPy is not installed (pip install cupy-cuda12x), or pass a torch "
            "tensor or a NumPy array") from exc
    try:
        if hasattr(x, "__cuda_array_interface__"):
            return cupy.asarray(x)  # no copy; CuPy honours the interface's stream
        return cupy.from_dlpack(x)  # the producer orders x before CuPy's stream
    except Exception as exc:
        raise InvalidInputError(f"{name} could not be read as a CUDA array: {exc}") from exc


def _from_foreign_host(name: str, x: Any) -> npt.NDArray[Any]:
    """A NumPy array over another library's host DLPack array (no copy where NumPy can)."""
    try:
        return np.from_dlpack(x)
    except Exception as exc:  # e.g. a dtype NumPy has not (bfloat16)
        raise InvalidInputError(f"{name} could not be read through DLPack: {exc}") from exc


def _check_cupy(name: str, x: Any, devices: Collection[int]) -> int:
    _check_shape(name, tuple(x.shape), str(x.dtype))
    if not x.flags.c_contiguous:
        raise InvalidInputError(f"{name} must be C-contiguous (cupy.ascontiguousarray)")
    device = int(x.device.id)
    _check_device(name, device, devices)
    return device


def _check_torch(name: str, x: Any, devices: Collection[int]) -> int | None:
    """Checks a torch tensor; its CUDA device index, None on the CPU."""
    _check_shape(name, tuple(x.shape), str(x.dtype).removeprefix("torch."))
    if not x.is_contiguous():
        raise InvalidInputError(f"{name} must be contiguous (tensor.contiguous())")
    if x.device.type == "cuda":
        device = int(x.device.index if x.device.index is not None else 0)
        _check_device(name, device, devices)
        return device
    if x.device.type != "cpu":
        raise InvalidInputError(f"{name} is on {x.device}; only cpu and cuda tensors are accepted")
    return None


def device_view(name: str, x: Any, devices: Collection[int] = ()) -> Any:
    """A CuPy array over the memory of the CUDA array `x` (no copy), checked by the rules
    above except finiteness (the caller checks that on the device). For a torch tensor on a
    stream other than the legacy default one, that stream is synchronised first: CuPy
    stages on the legacy default stream, which orders itself after torch's default stream
    but not after another one. Needs CuPy.

    Raises:
        InvalidInputError: see the module docstring; also when x is not a CUDA array.
    """
    lib = array_library(name, x)
    if lib == "cupy":
        _check_cupy(name, x, devices)
        return x
    if lib == "torch" and x.device.type == "cuda":
        import cupy
        import torch

        _check_torch(name, x, devices)
        current = torch.cuda.current_stream(x.device)
        if current.cuda_stream != 0:
            current.synchronize()
        return cupy.from_dlpack(x.detach())
    if lib == "cuda":
        xs = _from_foreign_cuda(name, x)
        _check_cupy(name, xs, devices)
        return xs
    raise InvalidInputError(f"{name} is not a CUDA array")


def as_host(name: str, x: Any, devices: Collection[int] = ()) -> tuple[F32, ArrayKind]:
    """Check `x` and return (host float32 C-contiguous copy or view, its kind).

    Args:
        name: the argument's name, for messages.
        x: an array of a kind the module docstring lists.
        devices: CUDA device indices a device array may be on (empty: any).

    Raises:
        InvalidInputError: see the module docstring.
    """
    lib = array_library(name, x)
    if lib in ("numpy", "host"):
        a = x if lib == "numpy" else _from_foreign_host(name, x)
        _check_shape(name, tuple(a.shape), str(a.dtype))
        host: F32 = np.ascontiguousarray(a)
        kind = ArrayKind("numpy")
    elif lib in ("cupy", "cuda"):
        xs = x if lib == "cupy" else _from_foreign_cuda(name, x)
        device = _check_cupy(name, xs, devices)
        host = np.asarray(xs.get(), dtype=np.float32)
        kind = ArrayKind("cupy", device)
    else:
        dev = _check_torch(name, x, devices)
        host = np.ascontiguousarray(x.detach().cpu().numpy())
        kind = ArrayKind("torch", dev)
    if not np.isfinite(host).all():
        raise InvalidInputError(f"{name} contains NaN or infinity")
    return host, kind
