"""The layer epilogue (bias add, then activation) as float32 NumPy: the reference that
`safemon/kernels/cuda/epilogue.cu` mirrors bit for bit.

Every step is one IEEE-754 float32 operation rounded to nearest even, in a fixed order,
with no fused multiply-add: NumPy rounds each float32 ufunc result, and the CUDA side writes
every operation and comparison in PTX (`safemon/kernels/cuda/float_rn.cuh`: `add.rn`,
`mul.rn`, `div.rn`, `cvt.rni`, `setp`, without `.ftz` and never contracted) and takes ldexp
as an exponent-field add (exact for the normal results here). So the two sides agree bit
for bit.

gelu is the tanh form, 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))), with tanh(u) computed as
(e − 1)/(e + 1), e = exp(2u), u clamped to [−10, 10] (float32 tanh is exactly ±1 beyond
about ±9.01), and exp from `exp_f32` below instead of a libm (libms differ in the last bit).
Its absolute error against the exact tanh form is below 2e-6 on [−10, 10] (tested).

gelu_erf is the exact form, PyTorch's default `nn.GELU()`: 0.5·x·(1 + erf(x/√2)). What it
needs is 1 + erf(z), z = x·float32(1/√2), which is 2 − erfc(z) for z ≥ 0 and erfc(−z) for
z < 0, so it never subtracts two nearly equal numbers. erfc(a), a = |z|, is the Chebyshev
fit of Press et al., *Numerical Recipes* (2nd ed., §6.2, `erfcc`, fractional error below
1.2e-7 in exact arithmetic): t = 1 / (1 + 0.5·a); erfc(a) = t·exp(P(t) − a·a), P of
degree 9 in t evaluated by Horner from its last coefficient, with the same `exp_f32`; for
a ≥ 9 (erfc below 4.2e-37) it is +0.0. Its relative error against the exact gelu is below
3e-6 for x > −5 and below 2e-5 wherever |gelu(x)| > 1e-30 (tested).

relu is `x > 0 ? x : +0.0` (so −0.0 and NaN map to +0.0 on both sides; `maximum` differs
between libraries on signed zeros).
"""

from __future__ import annotations

import enum

import numpy as np
import numpy.typing as npt

__all__ = ["Activation", "apply_activation", "epilogue", "exp_f32", "gelu_erf_f32", "gelu_f32",
           "relu_f32"]

F32 = npt.NDArray[np.float32]


class Activation(enum.StrEnum):
    """The activations a layer may apply after its bias (the device's fixed set)."""

    IDENTITY = "identity"
    RELU = "relu"
    #: the tanh form, `nn.GELU(approximate="tanh")`
    GELU = "gelu"
    #: the exact (erf) form, `nn.GELU()` and `F.gelu`
    GELU_ERF = "gelu_erf"

    @property
    def code(self) -> int:
        """The integer the epilogue kernel takes (0 identity, 1 relu, 2 gelu, 3 gelu_erf)."""
        return {"identity": 0, "relu": 1, "gelu": 2, "gelu_erf": 3}[self.value]


_f = np.float32
# Constants as exact float32 values written in hex, the same literals as epilogue.cu
# (a decimal literal parsed by two compilers could round differently).
LOG2E = _f(float.fromhex("0x1.715476p+0"))
#: ln 2 split in two: LN2_HI has 12 trailing zero bits, so k·LN2_HI is exact for |k| < 2^12.
LN2_HI = _f(float.fromhex("0x1.62e4p-1"))
LN2_LO = _f(float.fromhex("0x1.7f7d1cp-20"))
#: The Taylor coefficients 1/720, 1/120, 1/24, 1/6, 1/2 of exp (Horner order), float32.
EXP_COEFFS = tuple(_f(float.fromhex(h)) for h in (
    "0x1.6c16c2p-10", "0x1.111112p-7", "0x1.555556p-5", "0x1.555556p-3", "0x1p-1"))
ONE = _f(1.0)
HALF = _f(0.5)
SQRT_2_OVER_PI = _f(float.fromhex("0x1.988454p-1"))
GELU_CUBIC = _f(float.fromhex("0x1.6e4e26p-5"))
U_CLAMP = _f(10.0)
INV_SQRT_2 = _f(float.fromhex("0x1.6a09e6p-1"))
TWO = _f(2.0)
#: erfc's Chebyshev coefficients (Numerical Recipes `erfcc`) as float32, Horner order: the
#: coefficient of t⁹ first, the constant term (−1.26551223) last.
ERFC_COEFFS = tuple(_f(float.fromhex(h)) for h in (
    "0x1.5df28ap-3", "-0x1.a4f124p-1", "0x1.7d0f6p+0", "-0x1.229cbap+0", "0x1.1d8f98p-2",
    "-0x1.7d8498p-3", "0x1.8c6d92p-4", "0x1.7f11f6p-2", "0x1.00018ep+0", "-0x1.43f89cp+0"))
#: erfc(a) is taken as +0.0 from here on (erfc(9) ≈ 4.1e-37; exp_f32 stays normal below).
ERFC_ZERO_FROM = _f(9.0)


def exp_f32(y: F32) -> F32:
    """exp(y) for float32 y in [−83, 20] (its callers' ranges: gelu's |y| ≤ 20, gelu_erf's
    y ≥ −83, attention's −80 floor), in float32 operations only; the result is then normal,
    so the ldexp below is exact.

    k = rint(y·log2 e); r = (y − k·LN2_HI) − k·LN2_LO; p = 1 + r·(1 + r·(1/2 + … r/720))
    (Horner, degree 6); result = ldexp(p, k). Relative error about 2e-7.
    """
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        k = np.rint(y * LOG2E)
        r = (y - k * LN2_HI) - k * LN2_LO
        p = np.full_like(r, EXP_COEFFS[0])
        for c in EXP_COEFFS[1:]:
            p = p * r + c
        p = p * r + ONE
        p = p * r + ONE
        out: F32 = np.ldexp(p, k.astype(np.int32)).astype(np.float32, copy=False)
    return out


def gelu_f32(x: F32) -> F32:
    """The tanh-form gelu of float32 `x`, elementwise (see the module docstring)."""
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        x3 = (x * x) * x
        inner = x + GELU_CUBIC * x3
        u0 = SQRT_2_OVER_PI * inner
        u: F32 = np.where(u0 > U_CLAMP, U_CLAMP,
                          np.where(u0 < -U_CLAMP, -U_CLAMP, u0)).astype(np.float32)
        e = exp_f32(u + u)
        t = (e - ONE) / (e + ONE)
        out: F32 = ((HALF * x) * (ONE + t)).astype(np.float32, copy=False)
    return out


def gelu_erf_f32(x: F32) -> F32:
    """The exact (erf) gelu of float32 `x`, elementwise (see the module docstring)."""
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        z = x * INV_SQRT_2
        a = np.abs(z)
        t = ONE / (ONE + HALF * a)
        p = np.full_like(t, ERFC_COEFFS[0])
        for c in ERFC_COEFFS[1:]:
            p = p * t + c
        tail = a < ERFC_ZERO_FROM  # False for NaN: the kernel's `a < 9` is false there too
        e = exp_f32(np.where(tail, p - a * a, _f(0.0)).astype(np.float32))
        erfc_a = np.where(tail, t * e, _f(0.0)).astype(np.float32)
        one_plus_erf = np.where(z < 0, erfc_a, TWO - erfc_a).astype(np.float32)
        out: F32 = ((HALF * x) * one_plus_erf).astype(np.float32, copy=False)
    return out


def relu_f32(x: F32) -> F32:
    """`x > 0 ? x : +0.0`, elementwise."""
    out: F32 = np.where(x > 0, x, _f(0.0)).astype(np.float32, copy=False)
    return out


def apply_activation(x: F32, activation: Activation) -> F32:
    """`activation` of float32 `x` (a new array)."""
    if activation is Activation.RELU:
        return relu_f32(x)
    if activation is Activation.GELU:
        return gelu_f32(x)
    if activation is Activation.GELU_ERF:
        return gelu_erf_f32(x)
    return np.array(x, dtype=np.float32, copy=True)


def epilogue(c: F32, bias: F32 | None, activation: Activation) -> F32:
    """One layer's epilogue on its (M, N) product `c`: `c + bias` (bias (N,), broadcast over
    rows, one float32 add) when a bias is given, then the activation."""
    with np.errstate(over="ignore", invalid="ignore"):
        h = c if bias is None else (c + bias[np.newaxis, :]).astype(np.float32, copy=False)
    return apply_activation(np.ascontiguousarray(h, dtype=np.float32), activation)
