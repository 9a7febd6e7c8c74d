"""A protected model on a CUDA device through an in-process 2oo3 daemon on the CuPy
backend: outputs stay CUDA tensors and equal the NumPy reference bit for bit."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402

from safemon.torch import ProtectedConv2d, ProtectedLinear, ProtectedSequence, protect  # noqa: E402

from ..runtime.helpers import make_config, same_bits, system  # noqa: E402
from .test_protect_daemon import TIMING, Net, inputs  # noqa: E402

pytestmark = pytest.mark.gpu


def test_cuda_model_outputs_are_cuda_tensors_equal_to_the_reference(tmp_path: Path) -> None:
    """On the GPU every protected module returns a CUDA tensor whose bits equal
    reference_forward on its input (computed by NumPy on the host)."""
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA device")
    torch.manual_seed(0)
    model = Net().cuda().eval()
    x = inputs().cuda()
    cfg = make_config(tmp_path, "2oo3", extra={"backend": "cupy", "timing": TIMING})
    assert cfg.channels is not None
    with system(cfg) as (_daemon, client):
        protect(model, client=client, verbose=False)
        seen: list[tuple[nn.Module, torch.Tensor, torch.Tensor]] = []
        for m in model.modules():
            if isinstance(m, ProtectedLinear | ProtectedSequence | ProtectedConv2d):
                m.register_forward_hook(lambda mod, a, out: seen.append((mod, a[0], out)))
        with torch.inference_mode():
            y = model(x)
    assert y.is_cuda and len(seen) == 2
    for module, inp, out in seen:
        assert out.is_cuda
        ref: np.ndarray = module.reference(inp, cfg.channels[0].variant)  # type: ignore[operator]
        assert same_bits(out.cpu().numpy(), ref)


def test_cuda_model_through_channel_processes_stays_on_the_gpu_with_a_fault(
        tmp_path: Path) -> None:
    """With channel processes on an ipc:// ingress (the deployment of issue 17's example),
    every protected module's request takes the CUDA IPC path (`last_request_device`: x and
    the output never cross host memory), outputs equal the reference bit for bit, and a bit
    flip injected into one channel's C is outvoted: nothing wrong is released."""
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA device")
    torch.manual_seed(0)
    model = Net().cuda().eval()
    x = inputs().cuda()
    cfg = make_config(tmp_path, "2oo3", placement="process", transport="ipc",
                      extra={"backend": "cupy", "timing": TIMING}, injection=True)
    assert cfg.channels is not None
    with system(cfg) as (_daemon, client):
        protect(model, client=client, verbose=False)
        seen: list[tuple[nn.Module, torch.Tensor, torch.Tensor, bool]] = []
        for m in model.modules():
            if isinstance(m, ProtectedLinear | ProtectedSequence | ProtectedConv2d):
                m.register_forward_hook(lambda mod, a, out: seen.append(
                    (mod, a[0], out, client.last_request_device)))
        with torch.inference_mode():
            clean = model(x)
            client.inject("c1", "bitflip-c")
            faulty = model(x)
    assert len(seen) == 4
    assert all(on_device for *_, on_device in seen), "a request went through host memory"
    for module, inp, out, _ in seen:
        assert out.is_cuda
        ref: np.ndarray = module.reference(inp, cfg.channels[0].variant)  # type: ignore[operator]
        assert same_bits(out.cpu().numpy(), ref)
    assert same_bits(faulty.cpu().numpy(), clean.cpu().numpy())
