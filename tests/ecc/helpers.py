"""Error-pattern builders shared by the CPU and GPU ECC tests (pure NumPy)."""

from __future__ import annotations

import itertools

import numpy as np
import numpy.typing as npt

from safemon.ecc.code import check_bits


def n_positions(word_bits: int) -> int:
    """Code-word length n = k + r."""
    return word_bits + check_bits(word_bits)


def random_words(rng: np.random.Generator, count: int, word_bits: int) -> npt.NDArray[np.uint8]:
    """`count` random words as a flat uint8 buffer of count * word_bits // 8 bytes."""
    return rng.integers(0, 256, size=count * (word_bits // 8), dtype=np.uint8)


def flip_positions(
    raw: npt.NDArray[np.uint8],
    cbytes: npt.NDArray[np.uint8],
    word_bits: int,
    words: npt.NDArray[np.int64],
    positions: npt.NDArray[np.int64],
) -> None:
    """Flip code-word position `positions[i]` of word `words[i]`, in place (data or check)."""
    k = word_bits
    wb = k // 8
    d = positions < k
    np.bitwise_xor.at(raw, words[d] * wb + positions[d] // 8, (1 << (positions[d] % 8)).astype(np.uint8))
    c = ~d
    np.bitwise_xor.at(cbytes, words[c], (1 << (positions[c] - k)).astype(np.uint8))


def all_pairs(word_bits: int) -> npt.NDArray[np.int64]:
    """Every unordered pair of distinct code-word positions, shape (n*(n-1)/2, 2)."""
    return np.array(list(itertools.combinations(range(n_positions(word_bits)), 2)), dtype=np.int64)
