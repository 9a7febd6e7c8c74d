"""The NumPy reference backend: C and ES arrays bit-identical to the CUDA kernels.

It mirrors the kernels' thread decomposition (docs/SIGNATURES.md): the output is padded to
whole BM×BN block tiles and K to whole BK-wide k-tiles with zeros; every thread runs every
padded k step, and its ES words fold exactly the words the CUDA thread folds, in the same
order. Instead of looping per thread it keeps one partial checksum per matrix element and
combines them per thread at the end (`signatures.StreamAccumulator`), so the cost is a few
vectorised passes over the M×N accumulator per k step.

Arithmetic: ``exact`` rounds the product and the sum separately in float32 (the kernels use
``__fmul_rn``/``__fadd_rn``); ``fma`` emulates one single-rounding fused multiply-add per MAC in
float64 (exact product, TwoSum, round-to-odd, then round to float32). NaN results are stored
as the GPU's canonical NaN, 0x7FFFFFFF.

Split-K (`Variant.slices(K) > 1`): each K-slice is an independent product of A's columns and
B's rows in that slice (`catalog.slice_bounds`), with its own threads and ES rows; the slices'
partial products are then summed in slice order by `reduce_slices`, as splitk.cu does.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import numpy.typing as npt

from safemon.kernels.catalog import Variant, slice_bounds
from safemon.kernels.signatures import StreamAccumulator, accumulator

__all__ = ["CANONICAL_NAN_BITS", "fma_float32", "reduce_slices", "reference_matmul"]

CANONICAL_NAN_BITS = np.uint32(0x7FFFFFFF)

F32 = npt.NDArray[np.float32]
U32 = npt.NDArray[np.uint32]
U64 = npt.NDArray[np.uint64]


def fma_float32(a: F32, b: F32, c: F32) -> F32:
    """fmaf(a, b, c) with one rounding, elementwise with broadcasting, bit-exact.

    The float64 product of two float32 values is exact, so s = a·b + c in float64 is the exact
    value rounded once to 53 bits. Rounding s again to float32 equals one rounding of the exact
    value unless s landed exactly on a float32 rounding midpoint (or in the float32 subnormal
    range, whose midpoints sit elsewhere). Only those elements are redone: TwoSum gives the
    exact error, rounding to odd keeps it, and the final round-to-nearest-even is then correct
    (53 ≥ 2·24 + 2).
    """
    with np.errstate(over="ignore", invalid="ignore"):
        p = np.multiply(a, b, dtype=np.float64)
        c64 = c.astype(np.float64)
        s = p + c64
        bits = s.view(np.uint64)
        low = bits & np.uint64(0x1FFFFFFF)
        # An exact 0 needs no fix: p + c rounds to 0 only when it is exactly 0.
        risky = (low == np.uint64(0x10000000)) | ((np.abs(s) < 2.0**-125) & (s != 0))
        if risky.any():
            p_r, c_r = np.broadcast_to(p, s.shape)[risky], np.broadcast_to(c64, s.shape)[risky]
            s_r = s[risky]
            bb = s_r - p_r
            err = (p_r - (s_r - bb)) + (c_r - bb)
            b_r = s_r.view(np.uint64)
            fix = (err != 0) & ((b_r & np.uint64(1)) == 0) & np.isfinite(s_r)
            away = (err > 0) == (s_r > 0)  # the exact value lies farther from zero than s
            b_r = np.where(fix, np.where(away, b_r + np.uint64(1), b_r - np.uint64(1)), b_r)
            s[risky] = b_r.view(np.float64)
        return s.astype(np.float32)


class _Part:
    """One (checksum, level) part of a variant: its accumulator, stream shape and partials.

    Word positions within one step of a thread's stream follow docs/SIGNATURES.md ("Fold
    order"): a step is one padded k step, except for level T, whose step is one k-tile.
    """

    def __init__(self, kind: str, level: str, variant: Variant, mp: int, np_: int, kp: int) -> None:
        t = variant.tile
        self.acc: StreamAccumulator = accumulator(kind)
        self.level = level
        tm, tn = t.tm, t.tn
        last = tm - 1
        # a_offsets[i] / b_offsets[j]: where a[i] / b[j] sit in a step; c_offsets[(i, j)]: acc[i][j].
        self.a_offsets: list[list[int]] = []
        self.b_offsets: list[list[int]] = []
        self.c_offsets: dict[tuple[int, int], list[int]] = {}
        self.steps = kp
        if level == "I":  # Algorithm 1 order: middle loop over j, inner over i; a, b, acc per MAC
            self.stride = 3 * tm * tn
            self.a_offsets = [[(j * tm + i) * 3 for j in range(tn)] for i in range(tm)]
            self.b_offsets = [[(j * tm + i) * 3 + 1 for i in range(tm)] for j in range(tn)]
            self.c_offsets = {(i, j): [(j * tm + i) * 3 + 2] for i in range(tm) for j in range(tn)}
        elif level == "M":  # end of each middle step j: the accumulator its inner loop wrote last
            self.stride = tn
            self.c_offsets = {(last, j): [j] for j in range(tn)}
        elif level == "E":  # end of each outer step k: the accumulator of the step's last MAC
            self.stride = 1
            self.c_offsets = {(last, tn - 1): [0]}
        elif level == "F":  # every k step, before the MACs: the operand fragments a, then b
            self.stride = tm + tn
            self.a_offsets = [[i] for i in range(tm)]
            self.b_offsets = [[tm + j] for j in range(tn)]
        else:  # T: end of each k-tile, every accumulator of the thread tile, row-major
            self.stride, self.steps = tm * tn, kp // t.bk
            self.c_offsets = {(i, j): [i * tn + j] for i in range(tm) for j in range(tn)}
        self.state_a = self.acc.start((mp,)) if self.a_offsets else None
        self.state_b = self.acc.start((np_,)) if self.b_offsets else None
        self.state_c = self.acc.start((mp, np_)) if self.c_offsets else None

    def thread_words(self, variant: Variant, gx: int, gy: int) -> U32:
        """Combine the partials per thread and finalise: (threads, words) uint32."""
        t = variant.tile
        ty_n, tx_n = t.bm // t.tm, t.bn // t.tn
        acc = self.acc
        total = acc.neutral((gy, gx, ty_n, tx_n))
        if self.state_a is not None:
            sa = self.state_a.reshape(-1, gy, ty_n, t.tm)
            for i, offs in enumerate(self.a_offsets):
                contrib = acc.contribution(sa[..., i], offs, self.stride, self.steps)
                total = acc.merge(total, contrib[:, None, :, None])
        if self.state_b is not None:
            sb = self.state_b.reshape(-1, gx, tx_n, t.tn)
            for j, offs in enumerate(self.b_offsets):
                contrib = acc.contribution(sb[..., j], offs, self.stride, self.steps)
                total = acc.merge(total, contrib[None, :, None, :])
        if self.state_c is not None:
            sc = self.state_c.reshape(-1, gy, ty_n, t.tm, gx, tx_n, t.tn)
            for (i, j), offs in self.c_offsets.items():
                sub = sc[:, :, :, i, :, :, j].transpose(0, 1, 3, 2, 4)
                contrib = acc.contribution(sub, offs, self.stride, self.steps)
                total = acc.merge(total, contrib)
        threads = gx * gy * ty_n * tx_n
        return acc.finalize(total.reshape(threads, -1), self.stride * self.steps)


def reference_matmul(a: F32, b: F32, variant: Variant) -> tuple[F32, U32]:
    """C = A·B and the ES array of `variant`, exactly as the CUDA kernel computes them.

    Args:
        a: (M, K) float32, finite, C-contiguous (validated by the caller).
        b: (K, N) float32, finite, C-contiguous.
        variant: the kernel variant (checksum, level, mode, tile).

    Returns:
        (c, es): c is (M, N) float32; es is (threads, variant.words) uint32 with
        threads = variant.es_threads(M, N, K) (slice z's threads after slice z−1's).
    """
    slices = variant.slices(a.shape[1])
    if slices == 1:
        return _whole(a, b, variant)
    whole_k = dataclasses.replace(variant, split=1)
    parts = [_whole(a[:, lo:hi], b[lo:hi, :], whole_k)
             for lo, hi in slice_bounds(a.shape[1], variant.tile.bk, slices)]
    c = reduce_slices(np.stack([p[0] for p in parts]))
    return c, np.ascontiguousarray(np.concatenate([p[1] for p in parts], axis=0))


def reduce_slices(partials: F32) -> F32:
    """Sum (S, M, N) float32 partial products in slice order, as splitk.cu does.

    `((P[0] + P[1]) + P[2]) + …`: one float32 round-to-nearest-even add per slice; a NaN
    result is stored as the canonical 0x7FFFFFFF.
    """
    c: F32 = partials[0].copy()
    with np.errstate(over="ignore", invalid="ignore"):
        for z in range(1, partials.shape[0]):
            np.add(c, partials[z], out=c)
    c.view(np.uint32)[np.isnan(c)] = CANONICAL_NAN_BITS
    return c


def _whole(a: F32, b: F32, variant: Variant) -> tuple[F32, U32]:
    """One product over the whole of the given K (no split)."""
    c, es = _run(a, b, variant, canonical_nan=False)
    if np.isnan(c).any():
        # NaN only arises from inf − inf and then propagates, so a NaN-free result never saw one;
        # otherwise run again storing the canonical NaN after every MAC, as the GPU does.
        c, es = _run(a, b, variant, canonical_nan=True)
    return c, es


def _run(a: F32, b: F32, variant: Variant, *, canonical_nan: bool) -> tuple[F32, U32]:
    t = variant.tile
    m, k = a.shape
    n = b.shape[1]
    gx, gy = t.grid(m, n)
    mp, np_, kp = gy * t.bm, gx * t.bn, t.k_padded(k)
    a_t = np.zeros((kp, mp), dtype=np.float32)  # A padded and transposed: row k is column k of A
    a_t[:k, :m] = a.T
    bp = np.zeros((kp, np_), dtype=np.float32)
    bp[:k, :n] = b
    acc = np.zeros((mp, np_), dtype=np.float32)
    prod = np.empty_like(acc)
    parts = [_Part(kind, level, variant, mp, np_, kp) for kind, level in variant.parts]
    fma = variant.mode == "fma"
    acc_bits = acc.view(np.uint32)
    with np.errstate(over="ignore", invalid="ignore"):
        for kk in range(kp):
            a_k, b_k = a_t[kk], bp[kk]
            if fma:
                acc[...] = fma_float32(a_k[:, None], b_k[None, :], acc)
            else:
                np.multiply(a_k[:, None], b_k[None, :], out=prod)
                np.add(acc, prod, out=acc)
            if canonical_nan:
                acc_bits[np.isnan(acc)] = CANONICAL_NAN_BITS
            end_of_tile = (kk + 1) % t.bk == 0
            for part in parts:
                if part.level == "T":
                    if end_of_tile and part.state_c is not None:
                        part.acc.step(part.state_c, acc_bits, kk // t.bk, part.stride)
                    continue
                if part.state_a is not None:
                    part.acc.step(part.state_a, a_k.view(np.uint32), kk, part.stride)
                if part.state_b is not None:
                    part.acc.step(part.state_b, b_k.view(np.uint32), kk, part.stride)
                if part.state_c is not None:
                    part.acc.step(part.state_c, acc_bits, kk, part.stride)
    threads = t.total_threads(m, n)
    if parts:
        es = np.concatenate([p.thread_words(variant, gx, gy) for p in parts], axis=1)
    else:
        es = np.zeros((threads, 0), dtype=np.uint32)
    return np.ascontiguousarray(acc[:m, :n]), np.ascontiguousarray(es)
