"""GPU identity labels: UUID formatting, the config's index, one device query per GPU."""

from __future__ import annotations

from pathlib import Path

import pytest

from safemon.config import load_config
from safemon.errors import ConfigError
from safemon.gpu_identity import channel_devices, complete_uuid, cuda_uuid, format_uuid
from safemon.metrics import ChannelDevice

CONFIGS = Path(__file__).resolve().parent.parent / "configs"
ENV = {"XDG_RUNTIME_DIR": "/run/user/1000"}


def test_format_uuid_is_nvml_style() -> None:
    raw = bytes(range(16))
    assert format_uuid(raw) == "GPU-00010203-0405-0607-0809-0a0b0c0d0e0f"


@pytest.mark.parametrize("raw", [b"", bytes(15), bytes(17)])
def test_format_uuid_refuses_wrong_lengths(raw: bytes) -> None:
    with pytest.raises(ValueError, match="16 bytes"):
        format_uuid(raw)


def test_channel_devices_ask_each_gpu_once() -> None:
    config = load_config(CONFIGS / "hft1.yaml",
                         env={**ENV, "SAFEMON_CHANNELS__1__GPU": "0"})  # both on GPU 0
    asked: list[int] = []

    def uuid_of(i: int) -> str:
        asked.append(i)
        return format_uuid(bytes([i]) * 16)

    devices = channel_devices(config, uuid_of)
    assert asked == [0]
    assert devices["ch-a"] == devices["ch-b"] == ChannelDevice("0", format_uuid(bytes(16)))


def test_numpy_channels_have_no_device() -> None:
    config = load_config(CONFIGS / "hft0.yaml", env=ENV)
    assert set(channel_devices(config, None).values()) == {ChannelDevice()}


@pytest.mark.gpu
def test_cuda_uuid_of_device_zero() -> None:
    pytest.importorskip("cupy")
    from safemon.kernels.compiler import import_cupy

    if import_cupy().cuda.runtime.getDeviceCount() < 1:
        pytest.skip("no CUDA device")
    assert cuda_uuid(0).startswith("GPU-") and len(cuda_uuid(0)) == 40


def test_a_full_runtime_uuid_is_used_without_asking_the_driver() -> None:
    raw = bytes(range(1, 17))

    def driver() -> bytes:
        raise AssertionError("the driver must not be asked")

    assert complete_uuid(raw, driver) == raw


def test_a_uuid_cut_at_a_zero_byte_is_completed_from_the_driver() -> None:
    full = b"\xcc\xf3\x13#\x00" + bytes(range(1, 12))
    assert complete_uuid(full[:4], lambda: full) == full
    assert format_uuid(complete_uuid(full[:4], lambda: full)).startswith("GPU-ccf31323-00")


def test_a_driver_uuid_that_does_not_extend_the_runtime_prefix_is_refused() -> None:
    with pytest.raises(ConfigError, match="does not extend"):
        complete_uuid(b"\xcc\xf3", lambda: bytes(16))
    with pytest.raises(ConfigError, match="CUDA driver"):
        complete_uuid(b"\xcc\xf3", lambda: (_ for _ in ()).throw(OSError("no libcuda")))
