"""A deliberately literal model of the kernels: one Python loop per thread, per k step, per MAC.

It shares nothing with `safemon.kernels.reference` except the definitions in docs/SIGNATURES.md,
so the two agreeing is evidence that the fast reference folds the right words in the right order.
Only usable for small sizes.
"""

from __future__ import annotations

import numpy as np

from safemon.kernels.catalog import Variant

MASK = 0xFFFFFFFF


def _ones_add(s: int, w: int) -> int:
    r = s + w
    return (r & MASK) + (r >> 32)


class _Fold:
    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.s = [0xFFFFFFFF] if kind == "crc32c" else [0, 0]

    def fold(self, w: int) -> None:
        k, s = self.kind, self.s
        if k == "xor":
            s[0] ^= w
        elif k == "twos":
            s[0] = (s[0] + w) & MASK
        elif k == "ones":
            s[0] = _ones_add(s[0], w)
        elif k == "fletcher":
            s[0] = _ones_add(s[0], w)
            s[1] = _ones_add(s[1], s[0])
        else:
            c = s[0]
            for byte in w.to_bytes(4, "little"):
                c ^= byte
                for _ in range(8):
                    c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
            s[0] = c

    def words(self) -> list[int]:
        if self.kind == "fletcher":
            return self.s[:2]
        if self.kind == "crc32c":
            return [self.s[0] ^ MASK]
        return [self.s[0]]


def _bits(x: np.float32) -> int:
    return int(np.float32(x).view(np.uint32))


def _mac(acc: np.float32, a: np.float32, b: np.float32, fma: bool) -> np.float32:
    if not fma:
        return np.float32(acc + np.float32(a * b))
    from fractions import Fraction

    exact = Fraction(float(a)) * Fraction(float(b)) + Fraction(float(acc))
    return _round_to_f32(exact)


def _round_to_f32(x: Fraction) -> np.float32:  # noqa: F821 - imported lazily above
    from fractions import Fraction

    if x == 0:
        return np.float32(0.0)
    lo = np.float32(float(x))  # a float32 neighbour (float() may round twice; fix below)
    best = lo
    for cand in (np.nextafter(lo, np.float32(-np.inf)), lo, np.nextafter(lo, np.float32(np.inf))):
        if abs(Fraction(float(cand)) - x) < abs(Fraction(float(best)) - x) or (
            abs(Fraction(float(cand)) - x) == abs(Fraction(float(best)) - x)
            and cand != best
            and int(np.float32(cand).view(np.uint32)) % 2 == 0
        ):
            best = cand
    return np.float32(best)


def _slice_ranges(k: int, bk: int, split: int) -> list[tuple[int, int]]:
    """Padded k-step ranges of the K-slices, from docs/SIGNATURES.md ("Split-K") alone."""
    kt = -(-k // bk)
    s = max(1, min(split, kt))
    per = -(-kt // s)
    z_count = -(-kt // per)  # gridDim.z
    t_len = -(-kt // z_count)  # the kernel's k-tiles per slice
    return [(z * t_len * bk, min(kt, (z + 1) * t_len) * bk) for z in range(z_count)]


def slow_matmul(a: np.ndarray, b: np.ndarray, variant: Variant) -> tuple[np.ndarray, np.ndarray]:
    """C and ES of `variant`, split-K included: each slice's threads in z order, then the
    partial products summed one float32 add per slice in z order."""
    partials, es_rows = [], []
    for lo, hi in _slice_ranges(a.shape[1], variant.tile.bk, variant.split):
        c_z, es_z = _slow_slice(a, b, variant, lo, hi)
        partials.append(c_z)
        es_rows.append(es_z)
    c = partials[0]
    for p in partials[1:]:
        c = (c + p).astype(np.float32)
    return c, np.concatenate(es_rows, axis=0)


def _slow_slice(
    a: np.ndarray, b: np.ndarray, variant: Variant, k_lo: int, k_hi: int
) -> tuple[np.ndarray, np.ndarray]:
    t = variant.tile
    m, k = a.shape
    n = b.shape[1]
    gx, gy = t.grid(m, n)
    ty_n, tx_n = t.bm // t.tm, t.bn // t.tn
    fma = variant.mode == "fma"

    def av(r: int, kk: int) -> np.float32:
        return a[r, kk] if r < m and kk < k else np.float32(0)

    def bv(kk: int, c: int) -> np.float32:
        return b[kk, c] if kk < k and c < n else np.float32(0)

    c_out = np.zeros((m, n), dtype=np.float32)
    es_rows = []
    for by in range(gy):
        for bx in range(gx):
            for ty in range(ty_n):
                for tx in range(tx_n):
                    rows = [by * t.bm + ty * t.tm + i for i in range(t.tm)]
                    cols = [bx * t.bn + tx * t.tn + j for j in range(t.tn)]
                    acc = [[np.float32(0)] * t.tn for _ in range(t.tm)]
                    folds = {lvl: _Fold(kind) for kind, lvl in variant.parts}
                    for kk in range(k_lo, k_hi):
                        ar = [av(r, kk) for r in rows]
                        br = [bv(kk, c) for c in cols]
                        if "F" in folds:
                            for x in ar + br:
                                folds["F"].fold(_bits(x))
                        # Algorithm 1: middle loop over the B columns j, inner over the A rows i.
                        for j in range(t.tn):
                            for i in range(t.tm):
                                acc[i][j] = _mac(acc[i][j], ar[i], br[j], fma)
                                if "I" in folds:
                                    folds["I"].fold(_bits(ar[i]))
                                    folds["I"].fold(_bits(br[j]))
                                    folds["I"].fold(_bits(acc[i][j]))
                            if "M" in folds:
                                folds["M"].fold(_bits(acc[t.tm - 1][j]))
                        if "E" in folds:
                            folds["E"].fold(_bits(acc[t.tm - 1][t.tn - 1]))
                        if "T" in folds and (kk + 1) % t.bk == 0:
                            for i in range(t.tm):
                                for j in range(t.tn):
                                    folds["T"].fold(_bits(acc[i][j]))
                    for i, r in enumerate(rows):
                        for j, c in enumerate(cols):
                            if r < m and c < n:
                                c_out[r, c] = acc[i][j]
                    words: list[int] = []
                    for lvl in ("I", "M", "E", "F", "T"):
                        if lvl in folds:
                            words += folds[lvl].words()
                    es_rows.append(words)
    es = np.array(es_rows, dtype=np.uint32).reshape(len(es_rows), variant.words)
    return c_out, es
