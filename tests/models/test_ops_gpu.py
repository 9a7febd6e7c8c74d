"""GPU against reference: the model steps besides products (`cuda/ops.cu` through
`safemon.kernels.model_gpu`: layer norm, attention, residual add) give the bits of their
float32 NumPy references (`safemon.models.ops`) over seeded random inputs of several shapes,
subnormals and the attention's exp clamp included, queued by hand and launched from a
captured CUDA graph; the launchers refuse bad arrays."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from safemon.models.ops import (
    MAX_TOKENS,
    STORED_TOKENS,
    add_f32,
    attention_f32,
    layer_norm_f32,
)

from .ops_cases import add_case, assert_same_bits, attention_case, clamp_case, layer_norm_case

pytestmark = pytest.mark.gpu


def _cp() -> Any:
    import cupy

    return cupy


def _same_bits(got: Any, want: np.ndarray) -> None:
    """`got` (a CuPy array) is float32 with `want`'s shape and bits."""
    assert_same_bits(got.get(), want)


@pytest.mark.parametrize("kind", ["normal", "subnormal"])
@pytest.mark.parametrize("eps", [1e-5, 1e-40])
@pytest.mark.parametrize("n", [1, 7, 64, 1000])
def test_layer_norm_kernel_is_bit_exact_with_the_reference(n: int, eps: float, kind: str) -> None:
    from safemon.kernels.model_gpu import launch_layer_norm

    cp = _cp()
    x, w, b = layer_norm_case(n, eps, kind)
    want = layer_norm_f32(x, w, b, eps)
    got = launch_layer_norm(cp.asarray(x), cp.asarray(w), cp.asarray(b), eps)
    assert got.flags.c_contiguous and got.shape == x.shape
    _same_bits(got, want)


@pytest.mark.parametrize("spread", [1.0, 14.0])
@pytest.mark.parametrize("dh", [1, 16, 33])
@pytest.mark.parametrize("heads", [1, 4])
@pytest.mark.parametrize("tokens", [1, 3, 8, STORED_TOKENS, STORED_TOKENS + 1, 200])
@pytest.mark.parametrize("causal", [False, True])
def test_attention_kernel_is_bit_exact_with_the_reference(tokens: int, heads: int, dh: int,
                                                          spread: float, causal: bool) -> None:
    """Three sequences; with `spread` 14 the scores reach well below -80 (the clamp). Up to
    STORED_TOKENS tokens the kernel keeps its scores, above it recomputes them; with and
    without the causal mask."""
    from safemon.kernels.model_gpu import launch_attention

    cp = _cp()
    h = attention_case(tokens, heads, dh, spread)
    want = attention_f32(h, heads, tokens, causal)
    got = launch_attention(cp.asarray(h), heads, tokens, causal)
    assert got.flags.c_contiguous and got.shape == (3 * tokens, heads * dh)
    _same_bits(got, want)


def test_attention_kernel_at_the_longest_sequence() -> None:
    """MAX_TOKENS tokens, the recomputing path at its longest: bit-exact."""
    from safemon.kernels.model_gpu import launch_attention

    cp = _cp()
    h = attention_case(MAX_TOKENS, 1, 16, 1.0)
    _same_bits(launch_attention(cp.asarray(h), 1, MAX_TOKENS), attention_f32(h, 1, MAX_TOKENS))


def test_attention_kernel_over_many_sequences_and_the_widest_head() -> None:
    """Enough (sequence, head, row) threads for a grid-stride loop, and dh = 256."""
    from safemon.kernels.model_gpu import launch_attention

    cp = _cp()
    rng = np.random.default_rng(5)
    h = rng.standard_normal((4096 * 8, 3 * 16 * 8)).astype(np.float32)
    _same_bits(launch_attention(cp.asarray(h), 16, 8), attention_f32(h, 16, 8))
    w = rng.standard_normal((2 * 5, 3 * 256)).astype(np.float32)
    _same_bits(launch_attention(cp.asarray(w), 1, 5), attention_f32(w, 1, 5))


def test_attention_kernel_clamps_where_the_reference_does() -> None:
    """`clamp_case`: the output is the clamped weight itself."""
    from safemon.kernels.model_gpu import launch_attention

    h = clamp_case()
    want = attention_f32(h, 1, 2)
    assert 0 < want[0, 0] < 1e-34
    _same_bits(launch_attention(_cp().asarray(h), 1, 2), want)


@pytest.mark.parametrize("shape", [(1,), (7, 13), (513, 1031)])
def test_add_kernel_is_bit_exact_with_the_reference(shape: tuple[int, ...]) -> None:
    from safemon.kernels.model_gpu import launch_add

    cp = _cp()
    a, b = add_case(shape)
    _same_bits(launch_add(cp.asarray(a), cp.asarray(b)), add_f32(a, b))


def test_the_launchers_refuse_bad_arrays() -> None:
    from safemon.kernels.model_gpu import launch_add, launch_attention, launch_layer_norm

    cp = _cp()
    x = cp.zeros((6, 12), dtype=cp.float32)
    w = cp.ones(12, dtype=cp.float32)
    with pytest.raises(ValueError, match="float32"):
        launch_layer_norm(x.astype(cp.float64), w, w, 1e-5)
    with pytest.raises(ValueError, match="C-contiguous"):
        launch_layer_norm(cp.zeros((12, 6), dtype=cp.float32).T, w, w, 1e-5)
    with pytest.raises(ValueError, match=r"\(12,\)"):
        launch_layer_norm(x, w[:5], w, 1e-5)
    with pytest.raises(ValueError, match="3·"):
        launch_attention(x, 5, 3)
    with pytest.raises(ValueError, match="multiple"):
        launch_attention(x, 2, 4)
    with pytest.raises(ValueError, match="tokens"):
        launch_attention(x, 2, MAX_TOKENS + 1)
    with pytest.raises(ValueError, match="equal"):
        launch_add(x, w)
    with pytest.raises(ValueError, match="float32"):
        launch_add(x, x.astype(cp.float16))


def test_the_three_launches_captured_in_a_graph_give_the_reference_bits() -> None:
    """Layer norm → attention → residual add, captured once on a stream of its own
    (`StepGraphs.capture`), then launched on new inputs: the reference's bits each time,
    and the same bits as the launches queued by hand."""
    from safemon.channels.step_graphs import StepGraphs
    from safemon.kernels.model_gpu import launch_add, launch_attention, launch_layer_norm

    cp = _cp()
    heads, tokens, dh, groups = 4, 8, 16, 5
    d = heads * dh
    rows = groups * tokens
    eps = 1e-5
    rng = np.random.default_rng(77)
    w = rng.standard_normal(3 * d).astype(np.float32)
    b = rng.standard_normal(3 * d).astype(np.float32)
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        xin = cp.empty((rows, 3 * d), dtype=cp.float32)
        res = cp.empty((rows, d), dtype=cp.float32)
        wd, bd = cp.asarray(w), cp.asarray(b)

        def queue() -> Any:
            y = launch_layer_norm(xin, wd, bd, eps)
            a = launch_attention(y, heads, tokens)
            return launch_add(a, res)

        xin.set(np.zeros((rows, 3 * d), np.float32), stream=stream)
        res.set(np.zeros((rows, d), np.float32), stream=stream)
        queue()  # compile and load the kernels before the capture
        stream.synchronize()
        step = StepGraphs(capacity=1).capture("ops", stream, queue, keep=(wd, bd))
        for i in range(4):
            x = rng.standard_normal((rows, 3 * d)).astype(np.float32) * np.float32(4 * i + 1)
            r = rng.standard_normal((rows, d)).astype(np.float32)
            xin.set(x, stream=stream)
            res.set(r, stream=stream)
            junk = [cp.full((1 << (10 + j),), 7.0, dtype=cp.float32) for j in range(3)]
            out = step.launch(stream)
            stream.synchronize()
            del junk
            want = add_f32(attention_f32(layer_norm_f32(x, w, b, eps), heads, tokens), r)
            _same_bits(out, want)
            hand = queue()
            stream.synchronize()
            _same_bits(hand, want)
