"""The kernels of cuda/ops.cu and cuda/epilogue.cu, compiled for the host CPU
(tests/models/cuda_on_host.py), give the bits of their NumPy references: each kernel does
the reference's float32 operations in the reference's order. A CPU check of the kernels'
arithmetic, on the GPU tests' inputs (subnormals, the attention's exp clamp, cancellation);
it does not replace the GPU tests (see cuda_on_host's docstring for what it leaves out)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from safemon.models.activations import Activation, epilogue
from safemon.models.ops import (
    STORED_TOKENS,
    add_f32,
    attention_f32,
    attention_scale,
    layer_norm_f32,
)

from .cuda_on_host import HostKernels, build, host_compiler, host_float_rn
from .ops_cases import (
    add_case,
    assert_same_bits,
    attention_case,
    clamp_case,
    layer_norm_case,
    layer_norm_inputs,
    subnormals,
)

pytestmark = pytest.mark.skipif(host_compiler() is None, reason="needs a host C++ compiler")


@pytest.fixture(scope="module")
def build_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("host-kernels")


@pytest.fixture(scope="module")
def kernels(build_dir: Path) -> HostKernels:
    return HostKernels(build(build_dir))


@pytest.mark.parametrize("kind", ["normal", "subnormal"])
@pytest.mark.parametrize("eps", [1e-5, 1e-40])
@pytest.mark.parametrize("n", [1, 7, 64, 1000])
def test_layer_norm_kernel_on_the_host_is_bit_exact(kernels: HostKernels, n: int, eps: float,
                                                   kind: str) -> None:
    x, w, b = layer_norm_case(n, eps, kind)
    assert_same_bits(kernels.layer_norm(x, w, b, eps), layer_norm_f32(x, w, b, eps))


@pytest.mark.parametrize("spread", [1.0, 14.0])
@pytest.mark.parametrize("dh", [1, 16, 33])
@pytest.mark.parametrize("heads", [1, 4])
@pytest.mark.parametrize("tokens", [1, 3, 8, STORED_TOKENS, STORED_TOKENS + 1, 100])
@pytest.mark.parametrize("causal", [False, True])
def test_attention_kernel_on_the_host_is_bit_exact(kernels: HostKernels, tokens: int,
                                                  heads: int, dh: int, spread: float,
                                                  causal: bool) -> None:
    """Both of the kernel's paths: scores kept (up to STORED_TOKENS tokens) and recomputed
    (more; dh 33 leaves a partial chunk of accumulators); with and without the causal
    mask."""
    h = attention_case(tokens, heads, dh, spread)
    got = kernels.attention(h, heads, tokens, attention_scale(dh), causal)
    assert_same_bits(got, attention_f32(h, heads, tokens, causal))


def test_attention_kernel_on_the_host_at_the_widest_head(kernels: HostKernels) -> None:
    rng = np.random.default_rng(5)
    w = rng.standard_normal((2 * 5, 3 * 256)).astype(np.float32)
    assert_same_bits(kernels.attention(w, 1, 5, attention_scale(256)), attention_f32(w, 1, 5))


def test_attention_kernel_on_the_host_clamps_where_the_reference_does(
        kernels: HostKernels) -> None:
    """`clamp_case`: the output is the clamped weight itself."""
    h = clamp_case()
    want = attention_f32(h, 1, 2)
    assert 0 < want[0, 0] < 1e-34
    assert_same_bits(kernels.attention(h, 1, 2, attention_scale(1)), want)


@pytest.mark.parametrize("shape", [(1,), (7, 13), (513, 1031)])
def test_add_kernel_on_the_host_is_bit_exact(kernels: HostKernels,
                                            shape: tuple[int, ...]) -> None:
    a, b = add_case(shape)
    assert_same_bits(kernels.add(a, b), add_f32(a, b))


@pytest.mark.parametrize("act", list(Activation))
@pytest.mark.parametrize("with_bias", [False, True])
def test_epilogue_kernel_on_the_host_is_bit_exact(kernels: HostKernels, act: Activation,
                                                 with_bias: bool) -> None:
    """The epilogue has run bit-exact on H100s since stop 40-odd: it is the harness's
    control (gelu_erf, added in stop 71, has not run on a GPU yet). Inputs span gelu's
    clamp (|u| > 10), gelu_erf's switch to erfc = 0 (|x|/√2 = 9), both forms' small-|x|
    range and subnormals."""
    rng = np.random.default_rng(11 + act.code)
    c = (rng.standard_normal((33, 129)) * 4).astype(np.float32)
    c[0] = np.linspace(-30, 30, 129, dtype=np.float32)
    c[1] = subnormals(rng, (129,))
    c[2] = np.concatenate([np.linspace(-12.74, -12.71, 64), np.linspace(12.71, 12.74, 65)])
    bias = rng.standard_normal(129).astype(np.float32) if with_bias else None
    assert_same_bits(kernels.epilogue(c, bias, act.code), epilogue(c, bias, act))


def test_the_harness_sees_an_operation_order_the_reference_does_not_have(
        kernels: HostKernels) -> None:
    """The inputs tell operation orders apart: summing a layer norm's row in another order
    (pairwise, as a GPU reduction would) changes bits against the reference, and the
    kernel's bits are the reference's."""
    x = layer_norm_inputs(1000, 3000, "normal")
    w = np.ones(1000, np.float32)
    b = np.zeros(1000, np.float32)
    want = layer_norm_f32(x, w, b, 1e-5)
    mu = (x.sum(axis=1, dtype=np.float32) / np.float32(1000)).astype(np.float32)  # pairwise
    d = (x - mu[:, None]).astype(np.float32)
    v = ((d * d).sum(axis=1, dtype=np.float32) / np.float32(1000)).astype(np.float32)
    other = (d * (np.float32(1) / np.sqrt(v + np.float32(1e-5)))[:, None]).astype(np.float32)
    assert (other.view(np.uint32) != want.view(np.uint32)).any()
    assert_same_bits(kernels.layer_norm(x, w, b, 1e-5), want)


def test_host_float_rn_refuses_a_changed_header() -> None:
    with pytest.raises(ValueError, match="changed"):
        host_float_rn("// no exp here\n")


def test_the_host_build_is_the_kernels_own_text(kernels: HostKernels, build_dir: Path) -> None:
    """The compiled units are the .cu files byte for byte (nothing re-written but
    float_rn.cuh's PTX helpers)."""
    from safemon.kernels.gpu import CUDA_DIR

    for name in ("ops.cu", "epilogue.cu"):
        assert (build_dir / (name + ".cpp")).read_bytes() == (CUDA_DIR / name).read_bytes()
