"""Determinism metrics of seed 003: differing-element count and Kendall tau of orderings.

Pure NumPy, no GPU: the determinism audit applies them to device results, and the tests to
hand-made arrays and orderings.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

__all__ = ["differing_elements", "kendall_tau", "ranks_from_order", "tau_summary"]


def differing_elements(a: ArrayLike, b: ArrayLike) -> int:
    """How many elements of `a` and `b` differ bit for bit (seed 003's count variability).

    Float arrays are compared as their bit patterns, so -0.0 != +0.0 and a NaN equals only
    the same NaN payload.

    Raises:
        ValueError: the shapes or dtypes differ.
    """
    x, y = np.asarray(a), np.asarray(b)
    if x.shape != y.shape:
        raise ValueError(f"shapes differ: {x.shape} vs {y.shape}")
    if x.dtype != y.dtype:
        raise ValueError(f"dtypes differ: {x.dtype} vs {y.dtype}")
    if x.dtype.kind == "f" or x.dtype.kind == "c":
        width = x.dtype.itemsize
        view = {2: np.uint16, 4: np.uint32, 8: np.uint64, 16: np.uint64}[width]
        x = np.ascontiguousarray(x).view(view)
        y = np.ascontiguousarray(y).view(view)
    return int(np.count_nonzero(x != y))


def _check_permutation(r: NDArray[np.int64], name: str) -> None:
    if r.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {r.shape}")
    if not np.array_equal(np.sort(r), np.arange(r.size)):
        raise ValueError(f"{name} is not a permutation of 0..{r.size - 1}")


def _inversions(seq: list[int]) -> int:
    """Inversions of `seq` by merge sort, O(n log n), iterative."""
    n = len(seq)
    a = list(seq)
    count = 0
    width = 1
    while width < n:
        out: list[int] = []
        for lo in range(0, n, 2 * width):
            left, right = a[lo:lo + width], a[lo + width:lo + 2 * width]
            i = j = 0
            while i < len(left) and j < len(right):
                if right[j] < left[i]:
                    count += len(left) - i
                    out.append(right[j])
                    j += 1
                else:
                    out.append(left[i])
                    i += 1
            out += left[i:] + right[j:]
        a = out
        width *= 2
    return count


def kendall_tau(rank_a: ArrayLike, rank_b: ArrayLike) -> float:
    """Kendall's tau between two orderings of the same n items (no ties).

    `rank_a[i]` is the position of item i in the first ordering (e.g. the rank at which block
    i started), `rank_b[i]` in the second. Returns (concordant - discordant) / (n(n-1)/2):
    1.0 for the same order, -1.0 for the reverse.

    Raises:
        ValueError: the inputs are not permutations of 0..n-1 of one length, or n < 2.
    """
    a = np.asarray(rank_a, dtype=np.int64)
    b = np.asarray(rank_b, dtype=np.int64)
    _check_permutation(a, "rank_a")
    _check_permutation(b, "rank_b")
    if a.size != b.size:
        raise ValueError(f"orderings have different lengths: {a.size} vs {b.size}")
    n = a.size
    if n < 2:
        raise ValueError("Kendall tau needs at least two items")
    # Items sorted by their rank in a; discordant pairs are the inversions of their b ranks.
    seq = b[np.argsort(a)].tolist()
    pairs = n * (n - 1) // 2
    return 1.0 - 2.0 * _inversions(seq) / pairs


def ranks_from_order(order: ArrayLike) -> NDArray[np.int64]:
    """Ranks from an arrival sequence: `order[k]` is the item that arrived k-th.

    Raises:
        ValueError: `order` is not a permutation.
    """
    o = np.asarray(order, dtype=np.int64)
    _check_permutation(o, "order")
    ranks = np.empty_like(o)
    ranks[o] = np.arange(o.size)
    return ranks


def tau_summary(runs: ArrayLike) -> dict[str, float]:
    """Kendall tau of each run's ranks against the first run and against launch order.

    `runs` is (R, n): one rank vector per run. Returns min/median/max of tau versus run 0
    (over runs 1..R-1) and versus the block index order (over all runs).

    Raises:
        ValueError: fewer than two runs, or a row that is not a permutation.
    """
    r = np.asarray(runs, dtype=np.int64)
    if r.ndim != 2 or r.shape[0] < 2:
        raise ValueError(f"need at least two runs as an (R, n) array, got shape {r.shape}")
    ident = np.arange(r.shape[1])
    vs_first = [kendall_tau(r[0], r[i]) for i in range(1, r.shape[0])]
    vs_index = [kendall_tau(ident, r[i]) for i in range(r.shape[0])]
    return {
        "tau_vs_first_min": float(np.min(vs_first)),
        "tau_vs_first_median": float(np.median(vs_first)),
        "tau_vs_first_max": float(np.max(vs_first)),
        "tau_vs_index_min": float(np.min(vs_index)),
        "tau_vs_index_median": float(np.median(vs_index)),
        "tau_vs_index_max": float(np.max(vs_index)),
        "identical_orderings": int(sum(np.array_equal(r[0], r[i]) for i in range(1, r.shape[0]))),
    }
