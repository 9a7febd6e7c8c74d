"""Errors a PyTorch user understands: each names the layer and the fix (no client needed:
they are raised before anything is registered or sent)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402

from safemon.torch.checks import check_input  # noqa: E402
from safemon.torch.protect import plan  # noqa: E402

CPU = torch.device("cpu")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_non_fp32_input_is_a_type_error_naming_layer_and_fix(dtype: torch.dtype) -> None:
    """A half/bf16/double input raises TypeError saying fp32 is what the kernels protect."""
    x = torch.zeros(2, 4, dtype=dtype)
    with pytest.raises(TypeError, match=r"layer 'fc1'.*float32 products only.*x\.float\(\)"):
        check_input("fc1", x, device=CPU, in_features=4, training=False)


def test_input_on_another_device_is_a_value_error() -> None:
    """An input on another device than the weights raises ValueError naming both."""
    x = torch.zeros(2, 4, device="meta")
    with pytest.raises(ValueError, match=r"layer 'head'.*on cpu.*input on meta.*x\.to\('cpu'\)"):
        check_input("head", x, device=CPU, in_features=4, training=False)


def test_input_requiring_grad_is_a_value_error() -> None:
    """requires_grad (a training loop) raises ValueError pointing to eval/no_grad."""
    x = torch.zeros(2, 4, requires_grad=True)
    with pytest.raises(ValueError, match=r"layer 'fc1'.*requires grad.*no gradients.*no_grad"):
        check_input("fc1", x, device=CPU, in_features=4, training=False)


def test_training_mode_is_a_value_error_with_or_without_autograd() -> None:
    """A module in train() mode is refused, under no_grad too: a Dropout folded into a
    protected request is skipped, which is eval mode's result, not train mode's."""
    x = torch.zeros(2, 4)
    with pytest.raises(ValueError, match=r"training mode.*Dropout.*model\.eval\(\)"):
        check_input("fc1", x, device=CPU, in_features=4, training=True)
    with torch.no_grad(), pytest.raises(ValueError, match=r"training mode"):
        check_input("fc1", x, device=CPU, in_features=4, training=True)


def test_an_input_requiring_grad_is_accepted_without_autograd() -> None:
    """Under no_grad or inference_mode no graph is built, so an input that requires grad (a
    parameter fed to a layer, say) is computed."""
    x = torch.zeros(2, 4, requires_grad=True)
    with torch.no_grad():
        check_input("fc1", x, device=CPU, in_features=4, training=False)
    with torch.inference_mode():
        check_input("fc1", x, device=CPU, in_features=4, training=False)


def test_wrong_width_is_a_value_error() -> None:
    """An input whose last dimension is not in_features is refused with the expected shape."""
    with pytest.raises(ValueError, match=r"layer 'fc1' expects inputs of shape \(\.\.\., 4\)"):
        check_input("fc1", torch.zeros(2, 5), device=CPU, in_features=4, training=False)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_model_is_refused_at_protect_time(dtype: torch.dtype) -> None:
    """protect()/plan() of an fp16/bf16 model raises TypeError naming the first layer and
    model.float(), before anything is registered."""
    model = nn.Sequential(nn.Linear(4, 3), nn.ReLU()).to(dtype)
    with pytest.raises(TypeError, match=r"layer '0' has torch\.(b?float16) weights.*model\.float\(\)"):
        plan(model)


def test_model_without_linear_layer_is_a_value_error() -> None:
    """A model with nothing to protect raises ValueError that says what can be protected."""
    model = nn.Sequential(nn.LayerNorm(4), nn.ReLU(), nn.Softmax(dim=-1))
    with pytest.raises(ValueError, match=r"model Sequential has no nn\.Linear or nn\.Conv2d.*Fix"):
        plan(model)


def test_only_attention_layers_is_a_value_error() -> None:
    """nn.MultiheadAttention's own Linear is not protectable, so such a model is refused."""
    with pytest.raises(ValueError, match="MultiheadAttention"):
        plan(nn.Sequential(nn.MultiheadAttention(8, 2, batch_first=True)))
