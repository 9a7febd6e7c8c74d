"""How `Client` routes arrays that are not NumPy (CPU tests): a CUDA tensor without CuPy
goes through host memory instead of failing, and an unknown object is refused before
anything is sent."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import SimpleNamespace

import pytest

from safemon.client import Client
from safemon.errors import InvalidInputError
from safemon.transport import messages as msgs
from tests.runtime.helpers import make_config


class _CudaTensorStandIn:
    """Looks like a CUDA torch tensor to the client's routing (module and device)."""

    __module__ = "torch"
    device = SimpleNamespace(type="cuda", index=0)


@pytest.mark.skipif(importlib.util.find_spec("cupy") is not None,
                    reason="CuPy is installed: the device path is taken (GPU tests)")
def test_a_cuda_tensor_without_cupy_turns_device_io_off_and_goes_through_host(
        tmp_path: Path) -> None:
    """On an ipc:// ingress with no CuPy, the device path declines (None: the caller stages
    through host memory, as `matmul` and `run` do) and says why; it never raises
    ModuleNotFoundError."""
    cfg = make_config(tmp_path, "2oo3", placement="process", transport="ipc")
    with Client(cfg) as client:
        assert client.device_io
        got = client._device_request(
            lambda ms, st: msgs.MatmulRequest(weight_id="w", deadline_ms=ms, **st),
            _CudaTensorStandIn(), 4, 1.0, lambda _reply: None)
        assert got is None and not client.device_io
        assert "CuPy is not installed" in str(client.device_io_off_reason)


def test_an_object_that_is_no_array_is_refused_before_sending(tmp_path: Path) -> None:
    cfg = make_config(tmp_path, "2oo3", placement="process", transport="ipc")
    with Client(cfg) as client, pytest.raises(InvalidInputError, match="DLPack"):
        client.matmul([[1.0]], "0" * 64, timeout=0.5)
