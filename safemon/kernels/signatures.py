"""Checksum algebra for execution signatures. Pure NumPy, no I/O.

Definitions (docs/SIGNATURES.md states them with examples). A *fold* feeds one uint32 word `w`
into a running state; every checksum starts from 0 unless stated:

- ``xor``:      s ^= w
- ``twos``:     s = (s + w) mod 2**32
- ``ones``:     s = s + w with end-around carry (the seed's PTX ``add.cc.u32`` then ``addc.u32``;
                the kernels sum in 64 bits and reduce once, fact 1 below)
- ``fletcher``: s1 = s1 ⊕ w, then s2 = s2 ⊕ s1, ⊕ the end-around-carry add; two words [s1, s2]
- ``crc32c``:   CRC-32C (reflected 0x82F63B78, init 0xFFFFFFFF, final xor 0xFFFFFFFF) over each
                word's little-endian bytes, in fold order

Two facts make the reference backend fast without changing a single bit of the result:

1. The end-around-carry add starting from 0 never returns to 0 once a non-zero word was
   folded, and stays congruent to the plain sum modulo 2**32 − 1. So its state is a pure
   function of the exact sum S of the words: 0 if S == 0, else 1 + (S − 1) mod (2**32 − 1).
   Fletcher's s2 is the same function of Σ_u (L − u + 1)·w_u over a stream of L words.
2. One CRC-32C word step is c ← G(c ⊕ w) with G linear over GF(2). Over a stream,
   c_L = G^L(c_0) ⊕ ⨁_u G^(L−u+1)(w_u).

`StreamAccumulator` uses these to fold a whole thread's word stream as per-element partial sums
that are combined per thread at the end; `checksum` is the plain public entry point.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache

import numpy as np
import numpy.typing as npt

__all__ = [
    "CHECKSUM_KINDS",
    "CRC32C_POLY",
    "GF2Map",
    "StreamAccumulator",
    "accumulator",
    "checksum",
    "crc32c_table",
    "ones_canonical",
]

CHECKSUM_KINDS: tuple[str, ...] = ("xor", "twos", "ones", "fletcher", "crc32c")
CRC32C_POLY = 0x82F63B78
_MASK32 = 0xFFFFFFFF
#: The modulus of end-around-carry (one's complement) arithmetic.
ONES_MOD = 0xFFFFFFFF

U32 = npt.NDArray[np.uint32]
U64 = npt.NDArray[np.uint64]


@cache
def crc32c_table() -> U32:
    """The 256-entry byte table of reflected CRC-32C (the table the CUDA kernels use).
    Read-only: one cached array serves every caller, so a write would change every CRC
    signature the reference computes afterwards."""
    table = np.zeros(256, dtype=np.uint32)
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ CRC32C_POLY if c & 1 else c >> 1
        table[i] = c
    table.flags.writeable = False
    return table


def ones_canonical(total: npt.ArrayLike) -> U64:
    """The end-around-carry state for an exact non-negative word sum `total` (uint64 array).

    0 when total == 0, else the representative of total mod (2**32 − 1) in [1, 2**32 − 1].
    """
    t = np.asarray(total, dtype=np.uint64)
    r = t % np.uint64(ONES_MOD)
    r = np.where(r == 0, np.uint64(ONES_MOD), r)
    return np.where(t == 0, np.uint64(0), r).astype(np.uint64)


def _mulmod(x: U64, y: int) -> U64:
    """(x · y) mod (2**32 − 1) for uint64 arrays x and a Python int y, without overflow."""
    m = np.uint64(ONES_MOD)
    return ((x % m) * np.uint64(y % ONES_MOD)) % m


class GF2Map:
    """A linear map on 32-bit words over GF(2), stored as four 256-entry byte tables."""

    __slots__ = ("tables",)

    def __init__(self, tables: U32) -> None:
        self.tables = tables  # shape (4, 256): tables[b][v] is the image of byte v at byte b

    @classmethod
    def from_columns(cls, cols: Sequence[int]) -> GF2Map:
        """Build from the images of the 32 unit vectors (cols[k] = f(1 << k))."""
        tables = np.zeros((4, 256), dtype=np.uint32)
        values = np.arange(256, dtype=np.uint32)
        col = np.asarray(cols, dtype=np.uint32)
        for b in range(4):
            for bit in range(8):
                has = ((values >> np.uint32(bit)) & np.uint32(1)).astype(bool)
                tables[b, has] ^= col[8 * b + bit]
        return cls(tables)

    @classmethod
    def identity(cls) -> GF2Map:
        return cls.from_columns([1 << k for k in range(32)])

    @classmethod
    @cache
    def crc_word_step(cls) -> GF2Map:
        """G: one CRC-32C word step without the input xor, c ↦ four byte steps of c."""
        table = crc32c_table()
        cols = []
        for k in range(32):
            c = 1 << k
            for _ in range(4):
                c = int(table[c & 0xFF]) ^ (c >> 8)
            cols.append(c)
        return cls.from_columns(cols)

    def columns(self) -> list[int]:
        return [int(v) for v in self.apply(np.left_shift(np.uint32(1), np.arange(32, dtype=np.uint32)))]

    def apply(self, x: npt.NDArray[np.unsignedinteger]) -> U32:
        """Apply the map elementwise to a uint32 (or uint64 holding uint32) array."""
        x = x.astype(np.uint32, copy=False)
        t = self.tables
        out: U32 = t[0][x & 0xFF] ^ t[1][(x >> 8) & 0xFF] ^ t[2][(x >> 16) & 0xFF] ^ t[3][x >> 24]
        return out

    def compose(self, inner: GF2Map) -> GF2Map:
        """self ∘ inner."""
        return GF2Map.from_columns(
            [int(v) for v in self.apply(np.array(inner.columns(), dtype=np.uint32))]
        )

    def xor(self, other: GF2Map) -> GF2Map:
        """The pointwise sum (self ⊕ other), itself linear."""
        return GF2Map(self.tables ^ other.tables)

    def power(self, n: int) -> GF2Map:
        if n < 0:
            raise ValueError("power must be non-negative")
        result, base = GF2Map.identity(), self
        while n:
            if n & 1:
                result = base.compose(result)
            n >>= 1
            if n:
                base = base.compose(base)
        return result


@cache
def _crc_power(n: int) -> GF2Map:
    return GF2Map.crc_word_step().power(n)


class StreamAccumulator:
    """Folds structured word streams of many threads at once, bit-identical to folding in order.

    A thread's stream is T *steps* of S words each. Within a step, the word at offset p comes from
    some *element* (an operand or accumulator value); one element may appear at several offsets
    (e.g. a[i] at every MAC of row i). The caller:

    1. keeps a partial state per element: `start(shape)`, then `step(state, words, s)` for
       s = 0..T−1 with the element's word at step s;
    2. turns each element's partial into a contribution with `contribution(state, offsets, S, T)`;
    3. combines contributions of the elements of each thread (`combine` is "xor" or "add" over the
       last-but-one axes) and calls `finalize(total, L)` with L = S·T, getting (threads, words).
    """

    def __init__(self, kind: str) -> None:
        if kind not in CHECKSUM_KINDS:
            raise ValueError(f"unknown checksum {kind!r}; known: {', '.join(CHECKSUM_KINDS)}")
        self.kind = kind
        self.words = 2 if kind == "fletcher" else 1
        self.combine = "xor" if kind in ("xor", "crc32c") else "add"
        self._nstate = 2 if kind == "fletcher" else 1

    def start(self, shape: tuple[int, ...]) -> U64:
        """Per-element partials, shape (nstate, *shape): each component contiguous."""
        return np.zeros((self._nstate, *shape), dtype=np.uint64)

    def step(self, state: U64, words: U32, s: int, stride: int) -> None:
        """Fold the words of step `s` (shape = state.shape[1:]) into the per-element partials.

        `stride` is S, the number of words one step puts into a thread's stream.
        """
        k = self.kind
        if k == "xor":
            np.bitwise_xor(state[0], words, out=state[0], casting="unsafe")
        elif k in ("twos", "ones"):
            np.add(state[0], words, out=state[0], casting="unsafe")
        elif k == "fletcher":
            np.add(state[0], words, out=state[0], casting="unsafe")
            if s:
                state[1] += words.astype(np.uint64) * np.uint64(s)
            if s % 1024 == 1023:  # keep Σ s·w far from 2**64
                state[1] %= np.uint64(ONES_MOD)
        else:  # crc32c, Horner: P ← G^S(P) ⊕ w
            g = _crc_power(stride)
            np.bitwise_xor(g.apply(state[0]), words, out=state[0], casting="unsafe")

    def contribution(self, state: U64, offsets: Sequence[int], stride: int, steps: int) -> U64:
        """The element's share of its thread's checksum; shape = state.shape[1:] + (ncomp,)."""
        m = len(offsets)
        k = self.kind
        p0: U64 = state[0]
        if k == "xor":
            kept: U64 = p0 if m % 2 else np.zeros_like(p0)
            return kept[..., None]
        if k in ("twos", "ones"):
            scaled: U64 = p0 * np.uint64(m)
            return scaled[..., None]
        if k == "fletcher":
            total_len = stride * steps
            weight = sum(total_len - p for p in offsets)
            s1 = _mulmod(p0, m)
            minus = _mulmod(state[1], m * stride)
            s2 = (_mulmod(p0, weight) + np.uint64(ONES_MOD) - minus) % np.uint64(ONES_MOD)
            return np.stack([s1, s2, p0 * np.uint64(m)], axis=-1)
        h = _crc_power(stride - offsets[0])
        for p in offsets[1:]:
            h = h.xor(_crc_power(stride - p))
        return h.apply(p0).astype(np.uint64)[..., None]

    def reduce(self, contrib: U64, axes: tuple[int, ...]) -> U64:
        """Combine contributions over `axes` with this checksum's operation."""
        if self.combine == "xor":
            reduced: U64 = np.bitwise_xor.reduce(contrib, axis=axes) if axes else contrib
            return reduced
        out: U64 = contrib.sum(axis=axes, dtype=np.uint64) if axes else contrib
        if self.kind == "fletcher":
            out = out.copy()
            out[..., :2] %= np.uint64(ONES_MOD)
        return out

    def neutral(self, shape: tuple[int, ...]) -> U64:
        ncomp = 3 if self.kind == "fletcher" else 1
        return np.zeros((*shape, ncomp), dtype=np.uint64)

    def merge(self, x: U64, y: U64) -> U64:
        """Combine two totals (same shape)."""
        if self.combine == "xor":
            return x ^ y
        out = x + y
        if self.kind == "fletcher":
            out[..., :2] %= np.uint64(ONES_MOD)
        return out

    def finalize(self, total: U64, length: int) -> U32:
        """The final ES words, shape total.shape[:-1] + (words,), for streams of `length` words."""
        k = self.kind
        t0 = total[..., 0]
        if k == "xor":
            out = t0[..., None]
        elif k == "twos":
            out = (t0 & np.uint64(_MASK32))[..., None]
        elif k == "ones":
            out = ones_canonical(t0)[..., None]
        elif k == "fletcher":
            nz = total[..., 2] != 0
            s1 = np.where(t0 == 0, np.uint64(ONES_MOD), t0)
            s2 = np.where(total[..., 1] == 0, np.uint64(ONES_MOD), total[..., 1])
            out = np.where(nz[..., None], np.stack([s1, s2], axis=-1), np.uint64(0))
        else:
            init = int(_crc_power(length).apply(np.array([_MASK32], dtype=np.uint32))[0])
            out = ((t0 ^ np.uint64(init)) ^ np.uint64(_MASK32))[..., None]
        return out.astype(np.uint32)


@cache
def accumulator(kind: str) -> StreamAccumulator:
    """The (stateless, shareable) accumulator for one checksum kind."""
    return StreamAccumulator(kind)


def checksum(words: npt.ArrayLike, kind: str) -> U32:
    """Fold a 1-D uint32 sequence in order and return the checksum's final words.

    Returns a uint32 array of 1 word (2 for ``fletcher``: [s1, s2]).

    Raises:
        TypeError: `words` is not a uint32 array.
        ValueError: `words` is not 1-D or `kind` is unknown.
    """
    w = np.asarray(words)
    if w.dtype != np.uint32:
        raise TypeError(f"words must be uint32, not {w.dtype}")
    if w.ndim != 1:
        raise ValueError(f"words must be 1-D, not {w.ndim}-D")
    acc = accumulator(kind)
    # One thread, one step holding the whole sequence: each word is its own element.
    n = w.size
    if n == 0:
        return acc.finalize(acc.neutral(()), 0)
    if kind == "crc32c":
        # Per-position maps would need n table builds; the table-driven loop is cheaper here.
        table = crc32c_table()
        c = _MASK32
        for word in w.tolist():
            c ^= word
            for _ in range(4):
                c = int(table[c & 0xFF]) ^ (c >> 8)
        return np.array([c ^ _MASK32], dtype=np.uint32)
    state = acc.start((n,))
    acc.step(state, w, 0, n)
    total = acc.neutral(())
    if kind == "fletcher":
        positions = np.arange(n, dtype=np.uint64)
        p0 = state[0]
        s1 = p0.sum(dtype=np.uint64) % np.uint64(ONES_MOD)
        weights = (np.uint64(n) - positions) % np.uint64(ONES_MOD)
        s2 = int(((p0 % np.uint64(ONES_MOD)) * weights % np.uint64(ONES_MOD)).sum(dtype=np.uint64))
        total = np.array([s1, s2 % ONES_MOD, p0.sum(dtype=np.uint64)], dtype=np.uint64)
        return acc.finalize(total, n)
    contrib = acc.contribution(state, [0], n, 1)
    return acc.finalize(acc.reduce(contrib, (0,)), n)
