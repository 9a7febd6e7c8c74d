"""The layer epilogue reference: gelu's accuracy, relu's signed zeros, bias then activation."""

from __future__ import annotations

import math

import numpy as np

from safemon.models.activations import (
    Activation,
    epilogue,
    exp_f32,
    gelu_erf_f32,
    gelu_f32,
    relu_f32,
)


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


def _gelu_erf64(x: np.ndarray) -> np.ndarray:
    return np.array([0.5 * float(v) * math.erfc(-float(v) / math.sqrt(2)) for v in x])


def test_gelu_erf_is_within_3e6_relative_of_the_exact_gelu() -> None:
    """Over [-14, 14] the float32 exact-form gelu has a relative error below 3e-6 for
    x > -5, below 2e-5 wherever |gelu(x)| > 1e-30, and an absolute error below 5e-7."""
    xs = np.linspace(-14, 14, 400_001).astype(np.float32)
    got = gelu_erf_f32(xs).astype(np.float64)
    want = _gelu_erf64(xs)
    err = np.abs(got - want)
    seen = np.abs(want) > 1e-30
    rel = err[seen] / np.abs(want[seen])
    assert rel[xs[seen] > -5].max() < 3e-6
    assert rel.max() < 2e-5
    assert err.max() < 5e-7


def test_gelu_erf_is_not_the_tanh_form() -> None:
    """The two forms differ by up to about 5e-4 near x = ±2: far above either's error, so a
    model computed with the wrong one would not pass for the other."""
    xs = np.linspace(-4, 4, 8001).astype(np.float32)
    assert np.abs(gelu_erf_f32(xs) - gelu_f32(xs)).max() > 1e-4


def test_gelu_erf_handles_huge_tiny_and_tail_inputs() -> None:
    """Huge inputs give x and -0.0, subnormals stay finite, and past |x|/√2 = 9 the
    negative side is -0.0 (erfc taken as 0) where the exact value is below 4e-36."""
    xs = np.array([3e38, -3e38, 1e-40, -1e-40, 0.0, -0.0, -12.8, -40.0], dtype=np.float32)
    out = gelu_erf_f32(xs)
    assert np.isfinite(out).all()
    assert out[0] == xs[0]
    assert out[[1, 6, 7]].view(np.uint32).tolist() == [0x80000000] * 3
    assert out[4].view(np.uint32) == 0 and out[5].view(np.uint32) == 0x80000000
    assert 0 < out[2] < 1e-40


def test_activation_codes_are_the_kernels() -> None:
    """The integers epilogue.cu switches on: a new activation takes a new code."""
    assert {a.value: a.code for a in Activation} == {
        "identity": 0, "relu": 1, "gelu": 2, "gelu_erf": 3}
