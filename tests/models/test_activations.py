"""The layer epilogue reference: gelu's accuracy, relu's signed zeros, bias then activation."""

from __future__ import annotations

import math

import numpy as np

from safemon.models.activations import Activation, epilogue, exp_f32, gelu_f32, relu_f32


def _gelu64(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


def test_gelu_is_within_2e6_of_the_exact_tanh_form() -> None:
    """Over [-12, 12] (both saturated tails included) the float32 gelu is accurate to 2e-6."""
    xs = np.linspace(-12, 12, 200_001).astype(np.float32)
    assert np.abs(gelu_f32(xs) - _gelu64(xs)).max() < 2e-6


def test_gelu_handles_huge_and_tiny_inputs_without_nan() -> None:
    """Inputs whose cube overflows saturate (x or -0.0), subnormals stay finite."""
    xs = np.array([3e38, -3e38, 1e-40, -1e-40, 0.0], dtype=np.float32)
    out = gelu_f32(xs)
    assert np.isfinite(out).all()
    assert out[0] == xs[0] and out[1] == 0.0


def test_exp_f32_is_accurate_on_the_range_gelu_uses() -> None:
    """exp_f32 on [-20, 20] has a relative error below 1e-6."""
    ys = np.linspace(-20, 20, 10_001).astype(np.float32)
    rel = np.abs(exp_f32(ys) / np.exp(ys.astype(np.float64)) - 1)
    assert rel.max() < 1e-6


def test_relu_maps_negative_zero_to_positive_zero() -> None:
    """relu is x > 0 ? x : +0.0, so -0.0 becomes +0.0 (bit pattern 0)."""
    out = relu_f32(np.array([-0.0, -1.0, 2.0], dtype=np.float32))
    assert out.view(np.uint32).tolist()[:2] == [0, 0] and out[2] == 2.0


def test_epilogue_adds_bias_before_the_activation() -> None:
    """relu(c + b), not relu(c) + b: a negative product lifted by the bias survives."""
    c = np.array([[-1.0, 1.0]], dtype=np.float32)
    b = np.array([2.0, -3.0], dtype=np.float32)
    assert epilogue(c, b, Activation.RELU).tolist() == [[1.0, 0.0]]
    assert epilogue(c, None, Activation.IDENTITY).tolist() == [[-1.0, 1.0]]
