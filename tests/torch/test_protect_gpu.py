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
