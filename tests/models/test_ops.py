"""The NumPy references of the model steps besides products (`safemon.models.ops`): each
equals a literal, scalar float32 transcription of the module docstring's arithmetic bit for
bit, and is close to the exact (float64) math; the attention clamp and the argument checks."""

from __future__ import annotations

import math

import numpy as np
import pytest

from safemon.errors import InvalidInputError
from safemon.models.activations import exp_f32
from safemon.models.ops import (
    MAX_TOKENS,
    AddResidual,
    Attention,
    LayerNorm,
    Reshape,
    SaveResidual,
    add_f32,
    attention_f32,
    attention_scale,
    layer_norm_f32,
    op_reference,
)

f = np.float32


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and bool(np.array_equal(a.view(np.uint32), b.view(np.uint32)))


def _scalar_layer_norm(x: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    """The docstring's sequence, one float32 scalar operation at a time."""
    out = np.empty_like(x)
    n = f(x.shape[1])
    with np.errstate(all="ignore"):
        for r in range(x.shape[0]):
            s = x[r, 0]
            for j in range(1, x.shape[1]):
                s = f(s + x[r, j])
            mu = f(s / n)
            d = [f(x[r, j] - mu) for j in range(x.shape[1])]
            v = f(d[0] * d[0])
            for j in range(1, x.shape[1]):
                v = f(v + f(d[j] * d[j]))
            v = f(v / n)
            rr = f(f(1.0) / f(np.sqrt(f(v + f(eps)))))
            for j in range(x.shape[1]):
                out[r, j] = f(f(f(d[j] * rr) * w[j]) + b[j])
    return out


def _scalar_attention(h: np.ndarray, heads: int, tokens: int,
                      causal: bool = False) -> np.ndarray:
    r, width = h.shape
    dh = width // (3 * heads)
    d = heads * dh
    scale = attention_scale(dh)
    out = np.empty((r, d), np.float32)
    with np.errstate(all="ignore"):
        for g in range(r // tokens):
            rows = h[g * tokens:(g + 1) * tokens]
            for hd in range(heads):
                q = rows[:, hd * dh:(hd + 1) * dh]
                k = rows[:, d + hd * dh:d + (hd + 1) * dh]
                v = rows[:, 2 * d + hd * dh:2 * d + (hd + 1) * dh]
                for i in range(tokens):
                    seen = i + 1 if causal else tokens  # keys 0 .. seen - 1
                    s = []
                    for j in range(seen):
                        a = f(q[i, 0] * k[j, 0])
                        for c in range(1, dh):
                            a = f(a + f(q[i, c] * k[j, c]))
                        s.append(f(a * scale))
                    m = s[0]
                    for j in range(1, seen):
                        m = s[j] if s[j] > m else m
                    e = []
                    for j in range(seen):
                        t = f(s[j] - m)
                        t = f(-80.0) if f(-80.0) > t else t
                        e.append(exp_f32(np.array([t], np.float32))[0])
                    z = e[0]
                    for j in range(1, seen):
                        z = f(z + e[j])
                    p = [f(ej / z) for ej in e]
                    for c in range(dh):
                        o = f(p[0] * v[0, c])
                        for j in range(1, seen):
                            o = f(o + f(p[j] * v[j, c]))
                        out[g * tokens + i, hd * dh + c] = o
    return out


@pytest.mark.parametrize("n", [1, 3, 7, 64])
def test_layer_norm_equals_the_scalar_transcription(n: int) -> None:
    """layer_norm_f32 is the docstring's operations in its order (sequential sums), bit for
    bit, including cancelling sums and subnormal inputs."""
    rng = np.random.default_rng(n)
    x = (rng.standard_normal((5, n)) * 10).astype(np.float32)
    x[0, : min(n, 3)] = np.array([1e8, 1.0, -1e8][: min(n, 3)], np.float32)
    x[1] = np.float32(1e-40)  # subnormal
    w = rng.standard_normal(n).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    assert _same_bits(layer_norm_f32(x, w, b, 1e-5), _scalar_layer_norm(x, w, b, 1e-5))


def test_layer_norm_is_close_to_the_exact_math() -> None:
    rng = np.random.default_rng(1)
    x = rng.standard_normal((16, 64)).astype(np.float32)
    w = rng.standard_normal(64).astype(np.float32)
    b = rng.standard_normal(64).astype(np.float32)
    x64 = x.astype(np.float64)
    mu = x64.mean(axis=1, keepdims=True)
    want = (x64 - mu) / np.sqrt(x64.var(axis=1, keepdims=True) + 1e-5) * w + b
    np.testing.assert_allclose(layer_norm_f32(x, w, b, 1e-5), want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(("heads", "tokens", "dh"), [(1, 1, 1), (2, 3, 4), (4, 8, 16), (1, 5, 33)])
def test_attention_equals_the_scalar_transcription(heads: int, tokens: int, dh: int,
                                                   causal: bool) -> None:
    """attention_f32 is the docstring's operations in its order, bit for bit, also where
    scores lie far apart (the −80 clamp) or tie; causal: over the keys up to the query."""
    rng = np.random.default_rng(heads * 100 + tokens * 10 + dh)
    h = rng.standard_normal((2 * tokens, 3 * heads * dh)).astype(np.float32)
    h[:tokens, : heads * dh] *= np.float32(40.0)  # large scores in the first sequence
    h[tokens:, heads * dh: 2 * heads * dh] = 0.0  # every score 0 in the second: ties
    assert _same_bits(attention_f32(h, heads, tokens, causal),
                      _scalar_attention(h, heads, tokens, causal))


def test_causal_attention_never_reads_a_later_token() -> None:
    """A later key or value, however wild (infinity, NaN), changes no earlier output: the
    causal attention skips it instead of weighting it by zero."""
    rng = np.random.default_rng(8)
    heads, tokens, dh = 2, 6, 3
    h = rng.standard_normal((tokens, 3 * heads * dh)).astype(np.float32)
    want = attention_f32(h, heads, tokens, causal=True)
    h[4:, heads * dh:] = np.inf  # the keys and values of tokens 4 and 5
    h[5, heads * dh] = np.nan
    got = attention_f32(h, heads, tokens, causal=True)
    assert _same_bits(got[:4], want[:4])
    assert not np.isfinite(got[4:]).all()


@pytest.mark.parametrize("causal", [False, True])
def test_attention_is_close_to_the_exact_math(causal: bool) -> None:
    rng = np.random.default_rng(2)
    heads, tokens, dh = 4, 8, 16
    h = rng.standard_normal((3 * tokens, 3 * heads * dh)).astype(np.float32)
    p = h.astype(np.float64).reshape(3, tokens, 3, heads, dh).transpose(2, 0, 3, 1, 4)
    s = p[0] @ p[1].swapaxes(-1, -2) / math.sqrt(dh)
    if causal:  # PyTorch's float causal mask: -inf above the diagonal
        s = s + np.triu(np.full((tokens, tokens), -np.inf), 1)
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    o = (e / e.sum(axis=-1, keepdims=True)) @ p[2]
    want = o.transpose(0, 2, 1, 3).reshape(3 * tokens, heads * dh)
    np.testing.assert_allclose(attention_f32(h, heads, tokens, causal), want, rtol=1e-5,
                               atol=1e-6)


def test_one_token_attends_to_itself() -> None:
    """With one token per sequence the softmax is exactly 1: the output is v."""
    rng = np.random.default_rng(3)
    h = rng.standard_normal((4, 3 * 2 * 5)).astype(np.float32)
    assert _same_bits(attention_f32(h, 2, 1), np.ascontiguousarray(h[:, 20:]))


def test_the_clamp_keeps_far_scores_positive() -> None:
    """A score 1000 below the largest weighs exp(−80), not 0: every e_j stays a normal
    float, which the GPU's exponent-field ldexp needs."""
    h = np.zeros((2, 3), np.float32)  # one head of width 1: q, k, v
    h[:, 0] = 1.0
    h[0, 1], h[1, 1] = 1000.0, 0.0  # scores 1000 and 0 for every query
    h[:, 2] = [0.0, 1.0]
    out = attention_f32(h, 1, 2)
    assert out[0, 0] > 0.0 and out[0, 0] == exp_f32(np.array([-80.0], np.float32))[0]


def test_residuals_and_reshape() -> None:
    stack: list[np.ndarray] = []
    h = np.arange(12, dtype=np.float32).reshape(3, 4)
    assert op_reference(SaveResidual(), h, stack) is h and len(stack) == 1
    assert op_reference(Reshape(6), h, stack).shape == (2, 6)
    assert _same_bits(op_reference(AddResidual(), h, stack), add_f32(h, h)) and not stack


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(InvalidInputError, match="eps"):
        LayerNorm(np.ones(4, np.float32), np.zeros(4, np.float32), eps=0.0)
    with pytest.raises(InvalidInputError, match="expected 4"):
        LayerNorm(np.ones(4, np.float32), np.zeros(3, np.float32))
    with pytest.raises(InvalidInputError, match="NaN"):
        LayerNorm(np.array([np.nan], np.float32), np.zeros(1, np.float32))
    with pytest.raises(InvalidInputError, match="float32"):
        LayerNorm(np.ones(4), np.zeros(4))  # float64
    with pytest.raises(InvalidInputError, match="tokens"):
        Attention(2, MAX_TOKENS + 1)
    with pytest.raises(InvalidInputError, match="heads"):
        Attention(0, 4)
    with pytest.raises(InvalidInputError, match="3·4·dh"):
        Attention(4, 4).head_dim(20)
    with pytest.raises(InvalidInputError, match="width"):
        Reshape(0)


def test_layer_norm_keeps_a_read_only_copy() -> None:
    w = np.ones(3, np.float32)
    ln = LayerNorm(w, np.zeros(3, np.float32))
    w[0] = 5.0
    assert ln.weight[0] == 1.0 and not ln.weight.flags.writeable and ln.width == 3


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("pairs", [1, 2, 5, 7])
def test_attention_in_blocks_of_sequences_and_heads_is_one_pass_over_all(
        pairs: int, causal: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """attention_f32 goes through (sequence, head) pairs in blocks (its working set): a
    block of `pairs` pairs (heads split, or several sequences of all heads) gives the bits
    of one block over everything."""
    from safemon.models import ops

    rng = np.random.default_rng(3)
    tokens, heads, dh = 70, 3, 5
    h = rng.standard_normal((9 * tokens, 3 * heads * dh)).astype(np.float32)
    whole = attention_f32(h, heads, tokens, causal)  # 9·3 pairs of 70²: one block
    monkeypatch.setattr(ops, "_ATTENTION_BLOCK_ELEMENTS", pairs * tokens * tokens)
    blocks = attention_f32(h, heads, tokens, causal)
    assert np.array_equal(blocks.view(np.uint32), whole.view(np.uint32))


def test_attention_is_priced_at_the_kernels_score_products() -> None:
    """Kept scores: q·kᵀ and p·v. Recomputed (past STORED_TOKENS): scores twice, once per
    chunk of ATTENTION_CHUNK output columns, and p·v; a model's cost grows with them."""
    from safemon.models.ops import ATTENTION_CHUNK, STORED_TOKENS

    assert Attention(2, STORED_TOKENS).score_products(64) == 2
    assert Attention(2, STORED_TOKENS + 1).score_products(64) == 3 + 64 // ATTENTION_CHUNK
    assert Attention(2, STORED_TOKENS + 1).score_products(ATTENTION_CHUNK + 1) == 5
    assert Attention(2, STORED_TOKENS + 1).score_products(1) == 4
