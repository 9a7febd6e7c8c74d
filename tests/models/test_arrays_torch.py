"""`safemon.arrays.as_host` with PyTorch CPU tensors: what is refused (with the fix in the
message) and how a result comes back."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from safemon.arrays import ArrayKind, as_host  # noqa: E402
from safemon.errors import InvalidInputError  # noqa: E402


def test_non_contiguous_tensor_is_refused_with_the_fix() -> None:
    """A transposed (non-contiguous) tensor is refused, not silently copied: the message
    says tensor.contiguous()."""
    x = torch.arange(6, dtype=torch.float32).reshape(2, 3).t()
    assert not x.is_contiguous()
    with pytest.raises(InvalidInputError, match=r"x must be contiguous \(tensor\.contiguous\(\)\)"):
        as_host("x", x)


@pytest.mark.parametrize("dtype", [torch.float16, torch.float64, torch.bfloat16])
def test_non_fp32_tensor_is_refused_naming_float32(dtype: torch.dtype) -> None:
    """fp16/fp64/bf16 tensors are refused (never converted); the message names the dtype,
    float32 (what the kernels protect) and the call that converts."""
    x = torch.zeros(2, 3, dtype=dtype)
    name = str(dtype).removeprefix("torch.")
    with pytest.raises(InvalidInputError,
                       match=rf"x must be float32, got {name} \(safemon never converts: .*x\.float\(\)"):
        as_host("x", x)


def test_non_finite_tensor_is_refused() -> None:
    """A NaN in a float32 tensor is refused like in a NumPy array."""
    x = torch.zeros(2, 3)
    x[1, 2] = float("nan")
    with pytest.raises(InvalidInputError, match="NaN or infinity"):
        as_host("x", x)


def test_contiguous_fp32_cpu_tensor_round_trips_as_a_cpu_tensor() -> None:
    """A contiguous float32 CPU tensor is accepted as host float32 data with kind
    ArrayKind("torch", None); restore gives a new float32 CPU tensor with the same bits."""
    x = torch.randn(4, 5, generator=torch.Generator().manual_seed(0))
    host, kind = as_host("x", x)
    assert isinstance(host, np.ndarray) and host.dtype == np.float32
    assert host.flags.c_contiguous and np.array_equal(host.view(np.uint32),
                                                      x.numpy().view(np.uint32))
    assert kind == ArrayKind("torch", None)
    out = kind.restore(host)
    assert isinstance(out, torch.Tensor) and out.device.type == "cpu"
    assert out.dtype == torch.float32 and torch.equal(out, x)
    out[0, 0] = 42.0  # a new tensor: writing it changes neither the result nor the input
    assert host[0, 0] != 42.0 and x[0, 0] != 42.0


def test_tensor_that_requires_grad_is_accepted_detached() -> None:
    """A leaf tensor with requires_grad is read through detach(); the restored result does
    not require grad."""
    x = torch.ones(2, 2, requires_grad=True)
    host, kind = as_host("x", x)
    assert np.array_equal(host, np.ones((2, 2), np.float32))
    assert not kind.restore(host).requires_grad
