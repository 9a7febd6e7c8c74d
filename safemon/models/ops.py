"""The steps of a model besides its products: layer norm, multi-head attention, residual
connections and row reshapes, with the float32 NumPy references that
`safemon/kernels/cuda/ops.cu` mirrors bit for bit.

With these, a whole transformer encoder layer (pre- or post-norm) runs as one whole-model
request: every channel computes the norms, the attention scores, the softmax and the
residual sums too, and the vote covers their outputs. They carry no execution signature:
only the products are computed by the signature-carrying kernels (docs/PROTOCOL.md, "Steps
besides products"). Their outputs are still digested per step, so a disagreement names
the first step at which two channels diverged.

Shapes. A model works on a 2-D float32 activation h (rows, cols). Every step keeps the
rows except `Reshape`, which reinterprets the row-major buffer with another width (rows ×
cols elements, unchanged). A model's output must have as many rows as its input.

Arithmetic. Each step is a fixed sequence of IEEE-754 float32 operations, each rounded to
nearest even, no fused multiply-add, sums taken strictly in index order (never pairwise):
NumPy rounds every float32 ufunc result, the CUDA side writes every operation in PTX
(`add.rn`, `mul.rn`, `div.rn`, `sqrt.rn`). Per step:

- `LayerNorm` over each row of N values x_j, with γ, β (N,) and ε:
  s = x_0 + x_1 + … + x_{N-1}; μ = s / N; d_j = x_j − μ;
  v = d_0·d_0 + … + d_{N-1}·d_{N-1}; v = v / N; r = 1 / sqrt(v + ε);
  y_j = (d_j · r) · γ_j + β_j.
- `Attention` (`heads` H, `tokens` T) over (R, 3d) rows, d = H·dh, R a multiple of T: each
  run of T consecutive rows is one sequence; columns [q | k | v], each d wide, head h in
  columns h·dh … h·dh + dh − 1 of its part. For each sequence, head and query row i:
  a_j = q_i0·k_j0 + q_i1·k_j1 + … (in c order); s_j = a_j · scale, scale = float32(1/√dh);
  m = the largest s_j (scanned in j order, `s_j > m` replaces); e_j = exp(max(s_j − m, −80))
  with `safemon.models.activations.exp_f32` (the clamp keeps every e_j a normal float);
  z = e_0 + … + e_{T−1}; p_j = e_j / z; o_c = p_0·v_0c + p_1·v_1c + … (in j order). The
  output is (R, d), head h in columns h·dh …, as `torch.nn.MultiheadAttention` lays it
  out before its output projection. T is at most `MAX_TOKENS` and dh at most
  `MAX_HEAD_DIM`. A *causal* attention (`causal=True`, PyTorch's causal mask) lets query i
  see keys j ≤ i only: every scan, sum and maximum above runs over j = 0 … i, and the keys
  after i take no part (they are skipped, not weighted by zero).
- `SaveResidual` pushes h (unchanged) on the model's residual stack; `AddResidual` pops
  the newest saved activation and outputs h + saved, elementwise.
- `Reshape(width)` outputs the same buffer as (rows·cols / width, width).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from safemon.errors import InvalidInputError
from safemon.models.activations import exp_f32

__all__ = [
    "ATTENTION_CHUNK",
    "ATTENTION_EXP_FLOOR",
    "MAX_HEAD_DIM",
    "MAX_RESIDUALS",
    "MAX_TOKENS",
    "STORED_TOKENS",
    "AddResidual",
    "Attention",
    "LayerNorm",
    "Reshape",
    "SaveResidual",
    "add_f32",
    "attention_f32",
    "attention_scale",
    "layer_norm_f32",
]

F32 = npt.NDArray[np.float32]
_f = np.float32

#: The most tokens per sequence and the widest head an `Attention` step takes.
MAX_TOKENS = 2048
MAX_HEAD_DIM = 256
#: Sequences up to this many tokens keep their scores in the attention kernel's per-thread
#: array (ops.cu); longer ones recompute them, with the same bits (the kernel's comment),
#: walking the output columns this many accumulators at a time.
STORED_TOKENS = 64
ATTENTION_CHUNK = 16
#: The most float32 elements of one (sequences, heads, T, T) block the reference computes
#: at once (one (sequence, head) pair is at most that, T being at most 2048): a block's
#: working set is several such arrays (about 8: scores, exponentials, weights and
#: their temporaries), so at most about 128 MiB whatever T, the heads and the rows.
_ATTENTION_BLOCK_ELEMENTS = 1 << 22
#: The deepest residual stack a model may build.
MAX_RESIDUALS = 8
#: s_j − m is clamped from below to this before exp (exp(−80) ≈ 1.8e-35, a normal float).
ATTENTION_EXP_FLOOR = _f(-80.0)


def _param(name: str, a: object, n: int | None = None) -> F32:
    """A read-only float32 copy of parameter `a`, checked: 1-D, non-empty, finite, and of
    length `n` when given.

    Raises:
        InvalidInputError: anything else.
    """
    if not isinstance(a, np.ndarray) or a.dtype != np.float32 or a.ndim != 1 or a.size == 0:
        raise InvalidInputError(f"{name} must be a non-empty 1-D float32 numpy array, got "
                                f"{type(a).__name__} {getattr(a, 'dtype', '')} "
                                f"{getattr(a, 'shape', '')}")
    if n is not None and a.shape[0] != n:
        raise InvalidInputError(f"{name} has {a.shape[0]} elements, expected {n}")
    if not np.isfinite(a).all():
        raise InvalidInputError(f"{name} contains NaN or infinity")
    copy = np.array(a, dtype=np.float32, order="C", copy=True)
    copy.flags.writeable = False
    return copy


@dataclass(frozen=True)
class LayerNorm:
    """Layer norm over each row's N values with the affine `weight` γ and `bias` β ((N,)
    float32, finite; kept read-only) and `eps` ε (a positive finite float, rounded to
    float32, positive and finite as a float32). Equal when their ε are: the parameters are
    left out of the comparison (the model's content address covers them).

    Raises:
        InvalidInputError: parameters of another kind or length, or a bad ε.
    """

    weight: F32 = field(compare=False)
    bias: F32 = field(compare=False)
    eps: float = 1e-5

    def __post_init__(self) -> None:
        w = _param("layer norm weight", self.weight)
        b = _param("layer norm bias", self.bias, int(w.shape[0]))
        ok = (isinstance(self.eps, (int, float)) and not isinstance(self.eps, bool)
              and math.isfinite(self.eps))
        with np.errstate(over="ignore"):
            eps = _f(self.eps) if ok else _f(0.0)
        if not (np.isfinite(eps) and eps > 0):  # finite and positive as a float32
            raise InvalidInputError(f"layer norm eps must be a positive float32 number, got "
                                    f"{self.eps!r}")
        object.__setattr__(self, "weight", w)
        object.__setattr__(self, "bias", b)
        object.__setattr__(self, "eps", float(eps))

    @property
    def width(self) -> int:
        """N: the columns it normalises over (its input and output width)."""
        return int(self.weight.shape[0])


@dataclass(frozen=True)
class Attention:
    """Multi-head scaled-dot-product attention (see the module docstring): (R, 3d) → (R, d)
    with `heads` heads over sequences of `tokens` consecutive rows; with `causal`, each
    token attends to itself and the tokens before it only.

    Raises:
        InvalidInputError: heads or tokens not positive ints, tokens above MAX_TOKENS, or
            causal not a bool.
    """

    heads: int
    tokens: int
    causal: bool = False

    def __post_init__(self) -> None:
        for name in ("heads", "tokens"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise InvalidInputError(f"attention {name} must be a positive int, got {v!r}")
        if not isinstance(self.causal, bool):
            raise InvalidInputError(f"attention causal must be a bool, got {self.causal!r}")
        if self.tokens > MAX_TOKENS:
            raise InvalidInputError(f"attention over {self.tokens} tokens: at most "
                                    f"{MAX_TOKENS} per sequence")

    def head_dim(self, width: int) -> int:
        """dh for an input of `width` = 3·heads·dh columns.

        Raises:
            InvalidInputError: a width that is not 3·heads·dh, or dh above MAX_HEAD_DIM.
        """
        if width % (3 * self.heads):
            raise InvalidInputError(f"attention with {self.heads} heads takes 3·{self.heads}·dh "
                                    f"input columns ([q | k | v]), got {width}")
        dh = width // (3 * self.heads)
        if dh > MAX_HEAD_DIM:
            raise InvalidInputError(f"attention head width {dh} is above {MAX_HEAD_DIM}")
        return dh

    def score_products(self, dh: int) -> int:
        """The GPU kernel's work for heads `dh` wide, in products of the size of q·kᵀ (or
        p·v): 2 when it keeps the scores (at most STORED_TOKENS tokens); else it computes
        the scores twice, then once per chunk of ATTENTION_CHUNK output columns, and p·v
        once. What admission prices the step at (`ModelShape.cost_s`)."""
        if self.tokens <= STORED_TOKENS:
            return 2
        return 3 + -(-dh // ATTENTION_CHUNK)


@dataclass(frozen=True)
class Reshape:
    """The activation's row-major buffer read with `width` columns (rows change).

    Raises:
        InvalidInputError: a width that is not a positive int.
    """

    width: int

    def __post_init__(self) -> None:
        if not isinstance(self.width, int) or isinstance(self.width, bool) or self.width < 1:
            raise InvalidInputError(f"reshape width must be a positive int, got {self.width!r}")


@dataclass(frozen=True)
class SaveResidual:
    """Push the activation on the residual stack (the activation goes on unchanged)."""


@dataclass(frozen=True)
class AddResidual:
    """Pop the newest saved activation and add it to this one, elementwise."""


def layer_norm_f32(x: F32, weight: F32, bias: F32, eps: float) -> F32:
    """`LayerNorm` of the (R, N) float32 `x`, row by row (module docstring)."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    n = x.shape[1]
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        s = x[:, 0].copy()
        for j in range(1, n):
            s = s + x[:, j]
        mu = s / _f(n)
        d = x - mu[:, np.newaxis]
        v = d[:, 0] * d[:, 0]
        for j in range(1, n):
            v = v + d[:, j] * d[:, j]
        v = v / _f(n)
        r = _f(1.0) / np.sqrt(v + _f(eps))
        out: F32 = ((d * r[:, np.newaxis]) * weight[np.newaxis, :]
                    + bias[np.newaxis, :]).astype(np.float32, copy=False)
    return out


def attention_scale(head_dim: int) -> np.float32:
    """float32(1/√dh), the score scale (computed in double, rounded once; the GPU kernel
    takes this value as an argument, so both sides use the same bits)."""
    return _f(1.0 / math.sqrt(head_dim))


def attention_f32(h: F32, heads: int, tokens: int, causal: bool = False) -> F32:
    """`Attention` of the (R, 3·heads·dh) float32 `h`; returns (R, heads·dh) (module
    docstring). R must be a multiple of `tokens`. Computed a block of (sequence, head)
    pairs at a time (`_ATTENTION_BLOCK_ELEMENTS`); every pair is independent of the others,
    so the bits are those of one pass over all of them."""
    h = np.ascontiguousarray(h, dtype=np.float32)
    r, width = h.shape
    dh = width // (3 * heads)
    g = r // tokens
    parts = h.reshape(g, tokens, 3, heads, dh).transpose(2, 0, 3, 1, 4)  # (3, G, H, T, dh)
    out = np.empty((g, tokens, heads, dh), dtype=np.float32)
    pairs = max(1, _ATTENTION_BLOCK_ELEMENTS // (tokens * tokens))  # (sequence, head) pairs
    hb = min(heads, pairs)
    gb = max(1, pairs // hb)
    for g0 in range(0, g, gb):
        for h0 in range(0, heads, hb):
            q, k, v = parts[:, g0:g0 + gb, h0:h0 + hb]
            out[g0:g0 + gb, :, h0:h0 + hb] = _attention_block(q, k, v, dh,
                                                              causal).transpose(0, 2, 1, 3)
    result: F32 = out.reshape(r, heads * dh)
    return result


def _attention_block(q: F32, k: F32, v: F32, dh: int, causal: bool) -> F32:
    """The attention of a block of (sequence, head) pairs: q, k, v (G, H, T, dh) → the
    output (G, H, T, dh). Causal: step j of each scan changes the queries i ≥ j only
    (`sees[:, j]`, over the query axis); the keys a query does not see are never added."""
    tokens = q.shape[2]
    sees = np.arange(tokens)[:, np.newaxis] >= np.arange(tokens)[np.newaxis, :]  # [i, j]
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        a = q[..., :, np.newaxis, 0] * k[..., np.newaxis, :, 0]  # (G, H, T, T)
        for c in range(1, dh):
            a = a + q[..., :, np.newaxis, c] * k[..., np.newaxis, :, c]
        s = a * attention_scale(dh)
        m = s[..., 0].copy()
        for j in range(1, tokens):
            later = s[..., j] > m
            m = np.where(later & sees[:, j] if causal else later, s[..., j], m)
        t = s - m[..., np.newaxis]
        t = np.where(t < ATTENTION_EXP_FLOOR, ATTENTION_EXP_FLOOR, t).astype(np.float32)
        e = exp_f32(t)  # where a query does not see a key, unused (it may be inf)
        z = e[..., 0].copy()
        for j in range(1, tokens):
            z = np.where(sees[:, j], z + e[..., j], z) if causal else z + e[..., j]
        p = e / z[..., np.newaxis]
        o = p[..., :, 0, np.newaxis] * v[..., 0:1, :]  # (G, H, T, dh)
        for j in range(1, tokens):
            term = o + p[..., :, j, np.newaxis] * v[..., j:j + 1, :]
            o = np.where(sees[:, j, np.newaxis], term, o) if causal else term
    block: F32 = o
    return block


def add_f32(a: F32, b: F32) -> F32:
    """a + b elementwise (float32, same shape)."""
    with np.errstate(over="ignore", invalid="ignore"):
        out: F32 = (np.asarray(a, dtype=np.float32) + np.asarray(b, dtype=np.float32)
                    ).astype(np.float32, copy=False)
    return out


def op_reference(step: Any, h: F32, stack: list[F32]) -> F32:
    """Apply the non-product `step` to the (R, cols) float32 `h` with the residual `stack`
    (pushed and popped in place); returns the step's output. Shapes must have been checked
    (`safemon.models.layers.ModelShape.check_rows`)."""
    if isinstance(step, LayerNorm):
        return layer_norm_f32(h, step.weight, step.bias, step.eps)
    if isinstance(step, Attention):
        return attention_f32(h, step.heads, step.tokens, step.causal)
    if isinstance(step, Reshape):
        return np.ascontiguousarray(h).reshape(-1, step.width)
    if isinstance(step, SaveResidual):
        stack.append(h)
        return h
    if isinstance(step, AddResidual):
        return add_f32(h, stack.pop())
    raise TypeError(f"not a model step: {type(step).__name__}")
