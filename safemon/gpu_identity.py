"""Which GPU each channel runs on, as the `gpu` and `UUID` metric labels show it.

dcgm-exporter labels its series `gpu` (the device index) and `UUID` (`GPU-` and the
device's 16-byte UUID in dashed hex). safemon uses the same names so a channel's series
join with its GPU's: `on (UUID)` always; `on (gpu)` only where the CUDA index equals
NVML's (bare metal with `CUDA_DEVICE_ORDER=PCI_BUS_ID` and no `CUDA_VISIBLE_DEVICES`; inside a
container the index is the container's, not the host's, so join on `UUID` there).

The index comes from the config; the UUID is asked of the device (CUDA's device
properties) once at start-up, never taken from a message. `format_uuid` is the pure part.
"""

from __future__ import annotations

from collections.abc import Callable

from safemon.config import Config
from safemon.errors import ConfigError
from safemon.metrics import ChannelDevice

__all__ = ["channel_devices", "complete_uuid", "cuda_uuid", "format_uuid"]

_UUID_BYTES = 16
#: Dash positions of the canonical 8-4-4-4-12 form, in hex digits.
_GROUPS = (8, 4, 4, 4, 12)


def format_uuid(raw: bytes) -> str:
    """`GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx` (lower-case hex) from CUDA's 16 UUID bytes.

    Raises:
        ValueError: `raw` is not 16 bytes.
    """
    if not isinstance(raw, bytes | bytearray) or len(raw) != _UUID_BYTES:
        raise ValueError(f"a GPU UUID is {_UUID_BYTES} bytes, got {raw!r}")
    digits = bytes(raw).hex()
    parts, at = [], 0
    for n in _GROUPS:
        parts.append(digits[at:at + n])
        at += n
    return "GPU-" + "-".join(parts)


def cuda_uuid(index: int) -> str:
    """The UUID of CUDA device `index` (as the calling process numbers devices).

    Raises:
        ConfigError: CuPy is missing or the device cannot be asked.
    """
    from safemon.kernels.compiler import import_cupy

    try:
        raw = import_cupy().cuda.runtime.getDeviceProperties(index)["uuid"]
    except Exception as exc:
        raise ConfigError(f"cannot read the UUID of CUDA device {index}: {exc}") from None
    if isinstance(raw, str):  # some CuPy versions decode it already
        raw = raw.encode("latin-1")
    return format_uuid(complete_uuid(bytes(raw), lambda: _driver_uuid(index)))


def complete_uuid(raw: bytes, from_driver: Callable[[], bytes]) -> bytes:
    """The 16 UUID bytes, given what CuPy's device properties returned (`raw`).

    CuPy hands the UUID over as a C string, so it ends at the UUID's first zero byte (seen on
    an H200: 4 bytes). A shorter `raw` is completed from the driver API (`from_driver`,
    `cuDeviceGetUuid`), whose answer must start with `raw`.

    Raises:
        ConfigError: the driver cannot be asked, or its UUID does not extend `raw`.
    """
    if len(raw) == _UUID_BYTES:
        return raw
    try:
        full = from_driver()
    except Exception as exc:
        raise ConfigError(f"cannot read a GPU UUID from the CUDA driver: {exc}") from None
    if len(full) != _UUID_BYTES or not full.startswith(raw):
        raise ConfigError(f"the CUDA driver's UUID {full.hex()} does not extend the runtime's "
                          f"{raw.hex()}")
    return full


def _driver_uuid(index: int) -> bytes:
    """`cuDeviceGetUuid` of driver device `index`: 16 bytes, zero bytes included."""
    import ctypes

    lib = ctypes.CDLL("libcuda.so.1")
    dev = ctypes.c_int()
    buf = ctypes.create_string_buffer(_UUID_BYTES)
    get: Callable[..., int] = getattr(lib, "cuDeviceGetUuid_v2", None) or lib.cuDeviceGetUuid
    steps: tuple[tuple[str, Callable[[], int]], ...] = (
        ("cuInit", lambda: int(lib.cuInit(0))),
        ("cuDeviceGet", lambda: int(lib.cuDeviceGet(ctypes.byref(dev), index))),
        ("cuDeviceGetUuid", lambda: int(get(buf, dev))))
    for step, call in steps:
        rc = call()
        if rc != 0:
            raise RuntimeError(f"{step} returned CUDA error {rc}")
    return bytes(buf.raw)


def channel_devices(
    config: Config, uuid_of: Callable[[int], str] | None
) -> dict[str, ChannelDevice]:
    """channel name -> `ChannelDevice` for every configured channel.

    Args:
        config: the deployment; each channel's `gpu` is its index.
        uuid_of: asks a device index for its UUID (`cuda_uuid` on the GPU backend); None
            leaves every UUID empty (the NumPy backend uses no GPU). With `uuid_of`, a
            channel whose `gpu` is null runs on the default device, index 0, as the worker
            and `safemon.hft.gpu_unit` take it.

    Raises:
        ConfigError: from `uuid_of`.
    """
    assert config.channels is not None  # resolved by Config's validator
    seen: dict[int, str] = {}
    out: dict[str, ChannelDevice] = {}
    for ch in config.channels:
        index = 0 if ch.gpu is None and uuid_of is not None else ch.gpu
        if index is None:
            out[ch.name] = ChannelDevice()
            continue
        if uuid_of is not None and index not in seen:
            seen[index] = uuid_of(index)
        out[ch.name] = ChannelDevice(gpu=str(index), uuid=seen.get(index, ""))
    return out
