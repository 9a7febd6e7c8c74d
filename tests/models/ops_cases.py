"""Inputs of the model-step kernel tests, shared by the GPU tests (test_ops_gpu.py) and the
host-compiled ones (test_ops_on_host.py): float32 arrays that reach the kernels' corners
(subnormals, cancellation, constant rows, the attention's exp clamp), from fixed seeds."""

from __future__ import annotations

import numpy as np

from safemon.models.ops import ATTENTION_EXP_FLOOR, attention_scale

F32 = np.ndarray


def assert_same_bits(got: F32, want: F32) -> None:
    """`got` (a host array) is float32 with `want`'s shape and bits; the message names the
    first word that differs."""
    assert got.dtype == want.dtype == np.float32 and got.shape == want.shape
    diff = np.flatnonzero(got.view(np.uint32) != want.view(np.uint32))
    assert diff.size == 0, (f"{diff.size} of {want.size} words differ, first at flat "
                            f"{diff[0]}: got {got.flat[diff[0]]!r}, want {want.flat[diff[0]]!r}")


def subnormals(rng: np.random.Generator, shape: tuple[int, ...]) -> F32:
    """float32 values below the smallest normal (1.18e-38), both signs, zeros among them."""
    bits = rng.integers(0, 1 << 23, size=shape, dtype=np.uint32)
    bits |= rng.integers(0, 2, size=shape, dtype=np.uint32) << 31
    return bits.view(np.float32)


def layer_norm_inputs(n: int, seed: int, kind: str) -> F32:
    """37 rows of `n`: "normal" (with a large offset, a constant row and a -0 row) or
    "subnormal" (subnormal rows, every fifth scaled to normal with a tiny spread)."""
    rng = np.random.default_rng(seed)
    rows = 37
    if kind == "normal":
        x = rng.standard_normal((rows, n)).astype(np.float32) * np.float32(3)
        x[1] += np.float32(1e4)  # a large offset: cancellation in x - mu
        x[2] = np.float32(0.5)  # a constant row: v = 0
        x[3] = -0.0
        return x
    x = subnormals(rng, (rows, n))
    x[::5] = x[::5] * np.float32(1e6) * np.float32(1e6)  # some rows normal, tiny spread
    return x


def layer_norm_case(n: int, eps: float, kind: str) -> tuple[F32, F32, F32]:
    """(x, γ, β) of the layer-norm tests; with "subnormal", half of β is subnormal."""
    x = layer_norm_inputs(n, n * 3 + (kind == "subnormal"), kind)
    rng = np.random.default_rng(n + 100)
    w = rng.standard_normal(n).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32) * np.float32(0.1)
    if kind == "subnormal":
        b[::2] = subnormals(rng, b[::2].shape)
    return x, w, b


def clamp_hit(h: F32, heads: int, tokens: int) -> bool:
    """Whether some score is more than 81 below its row's largest (float64 estimate): the
    exp clamp at -80 is taken."""
    r, width = h.shape
    dh = width // (3 * heads)
    parts = h.astype(np.float64).reshape(r // tokens, tokens, 3, heads, dh)
    q, k = parts[:, :, 0], parts[:, :, 1]  # (G, T, H, dh)
    s = np.einsum("gihc,gjhc->ghij", q, k) * float(attention_scale(dh))
    return bool((s - s.max(axis=-1, keepdims=True) < float(ATTENTION_EXP_FLOOR) - 1).any())


def attention_case(tokens: int, heads: int, dh: int, spread: float) -> F32:
    """Three sequences of `tokens` rows, (3·tokens, 3·heads·dh); with `spread` 14 (and
    more than one token) some scores fall below the clamp."""
    rng = np.random.default_rng(tokens * 1000 + heads * 100 + dh + int(spread))
    h = rng.standard_normal((3 * tokens, 3 * heads * dh)).astype(np.float32)
    h *= np.float32(spread)
    if spread > 1 and tokens > 1:
        assert clamp_hit(h, heads, tokens)
    return h


def clamp_case() -> F32:
    """One query, two keys, heads = dh = 1: scores 0 and -100 (clamped to -80), v = (0, 1),
    so the output IS the clamped weight, exp(-80)/(1 + exp(-80)): the clamp's value shows
    in the bits (elsewhere a weight near 1e-35 is lost in the sum)."""
    h = np.zeros((2, 3), np.float32)  # columns q | k | v
    h[:, 0] = 1.0
    h[1, 1] = -100.0
    h[1, 2] = 1.0
    return h


def add_case(shape: tuple[int, ...]) -> tuple[F32, F32]:
    """(a, b): normal values with subnormal + normal, subnormal + subnormal, cancellation
    into subnormals, and signed zeros, infinities and overflow in the first eight."""
    rng = np.random.default_rng(sum(shape))
    a = rng.standard_normal(shape).astype(np.float32)
    b = rng.standard_normal(shape).astype(np.float32)
    flat_a, flat_b = a.reshape(-1), b.reshape(-1)
    sub = subnormals(rng, (flat_a.size,))
    flat_a[::3] = sub[::3]  # subnormal + normal
    flat_b[::6] = subnormals(rng, flat_b[::6].shape)  # subnormal + subnormal
    flat_b[1::4] = -flat_a[1::4] * np.float32(1 + 2**-20)  # cancellation into subnormals
    edge = np.array([0.0, -0.0, -0.0, np.inf, -np.inf, 3e38, 1e-45, -1e-45], np.float32)
    other = np.array([-0.0, 0.0, -0.0, 1.0, 5.0, 3e38, -1e-45, -1e-45], np.float32)
    k = min(edge.size, flat_a.size)
    flat_a[:k], flat_b[:k] = edge[:k], other[:k]
    return a, b
