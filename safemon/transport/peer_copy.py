"""Moving a released product from a channel's GPU to the app's GPU without the host.

A multi-GPU deployment computes on GPUs other than the app's (issue 21: channels on GPUs
1-3, the app on GPU 0). Once a product is released on a channel's GPU, `copy_to_device`
moves it to the app's GPU with one device-to-device copy (`cudaMemcpyPeerAsync`), after
enabling peer access where the two GPUs allow it (NVLink or PCIe P2P). Where they do not,
CUDA still performs the copy but stages it through host memory inside the driver:
`peer_path` says which of the two a pair of GPUs gets, and the benchmark records it.
`host_staged_copy` is the explicit host round trip (download, then upload) that the peer
copy replaces; it is kept as the baseline the benchmark measures against.

Both take and return CuPy arrays; the copy is bit-exact (bytes, not values, are moved).
CuPy is imported lazily, so this module imports on a machine without a GPU.
"""

from __future__ import annotations

from typing import Any

from safemon.errors import InvalidInputError

__all__ = ["copy_to_device", "enable_peer_access", "host_staged_copy", "peer_path"]

#: cudaErrorPeerAccessAlreadyEnabled: enabling twice is not a failure.
_ALREADY_ENABLED = 704


def _cupy() -> Any:
    from safemon.kernels.compiler import import_cupy

    return import_cupy()


def peer_path(src: int, dst: int) -> str:
    """"same-device", "peer" (direct P2P, no host) or "staged" (the driver goes through
    host memory) for a copy from device `src` to device `dst`."""
    if src == dst:
        return "same-device"
    can = _cupy().cuda.runtime.deviceCanAccessPeer(dst, src)
    return "peer" if can else "staged"


def enable_peer_access(src: int, dst: int) -> bool:
    """Let device `dst` access device `src`'s memory (idempotent); False when the pair has
    no P2P path (copies then stage through the host)."""
    if src == dst:
        return True
    cp = _cupy()
    if not cp.cuda.runtime.deviceCanAccessPeer(dst, src):
        return False
    with cp.cuda.Device(dst):
        try:
            cp.cuda.runtime.deviceEnablePeerAccess(src)
        except cp.cuda.runtime.CUDARuntimeError as exc:
            if getattr(exc, "status", None) != _ALREADY_ENABLED:
                raise
    return True


def _check(array: Any, device: int) -> None:
    cp = _cupy()
    if not isinstance(array, cp.ndarray):
        raise InvalidInputError(f"expected a CuPy array, got {type(array).__name__}")
    if not array.flags.c_contiguous:
        raise InvalidInputError("the array must be C-contiguous (a released product is)")
    if isinstance(device, bool) or not isinstance(device, int) or not (
            0 <= device < cp.cuda.runtime.getDeviceCount()):
        raise InvalidInputError(f"no CUDA device {device!r}")


def copy_to_device(array: Any, device: int) -> Any:
    """A copy of `array` (CuPy, C-contiguous, any dtype and shape) on CUDA device `device`,
    moved device to device; synchronised (the copy is complete when it returns).

    Raises:
        InvalidInputError: not a CuPy array, not C-contiguous, or no such device.
    """
    _check(array, device)
    cp = _cupy()
    src = array.device.id
    if src == device:
        with cp.cuda.Device(device):
            return array.copy()
    enable_peer_access(src, device)
    with cp.cuda.Device(device):
        out = cp.empty(array.shape, dtype=array.dtype)
        stream = cp.cuda.get_current_stream()
        # The source must be complete before the copy reads it.
        with cp.cuda.Device(src):
            cp.cuda.get_current_stream().synchronize()
        cp.cuda.runtime.memcpyPeerAsync(out.data.ptr, device, array.data.ptr, src,
                                        array.nbytes, stream.ptr)
        stream.synchronize()
    return out


def host_staged_copy(array: Any, device: int) -> Any:
    """The host round trip `copy_to_device` avoids: download `array`, upload it to `device`.

    Raises:
        InvalidInputError: as `copy_to_device`.
    """
    _check(array, device)
    cp = _cupy()
    host = cp.asnumpy(array)
    with cp.cuda.Device(device):
        out = cp.asarray(host)
        cp.cuda.get_current_stream().synchronize()
    return out
