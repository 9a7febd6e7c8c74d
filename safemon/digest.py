"""Result digests: the 64-bit hash each channel computes of its C and ES on its own device,
so that only digests cross ZeroMQ for a vote (docs/PROTOCOL.md, "Digest voting").

Definition (`safemon-digest64`, version 1). Let w_0 … w_{n−1} be the array's bytes read as
little-endian uint32 words in C order (float32 and uint32 arrays: one word per element),
n < 2^32, and let mix be the SplitMix64 finaliser

    mix(z): z += 0x9E3779B97F4A7C15; z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9;
            z = (z ^ (z >> 27)) * 0x94D049BB133111EB; return z ^ (z >> 31)

(all arithmetic modulo 2^64). Then

    S = Σ_i mix((i << 32) | w_i)   (mod 2^64),   digest = mix(S + mix(n)).

Each word is hashed with its index, so a moved or swapped value changes the digest; the
words are combined by integer addition, which is associative and commutative, so a GPU
reduction in any order gives exactly the reference's value (`safemon/kernels/cuda/digest.cu`
computes S with a grid-stride sum and warp shuffles, and the final two mixes on the host
from the 8-byte S). The shape is not hashed: digests are only compared between results of
one request, whose shapes the voter's caller already knows to be equal.

What it does not cover: it is not a cryptographic hash. A random corruption goes unseen
with probability about 2^-64 per comparison, but a deliberate one could be constructed.
Channel faults are random; a malicious channel is out of the safety case (as with the CRC).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["DIGEST_NAME", "digest64", "finish", "mix64", "word_sum"]

DIGEST_NAME = "safemon-digest64-v1"

_U = np.uint64
_GOLDEN = _U(0x9E3779B97F4A7C15)
_M1 = _U(0xBF58476D1CE4E5B9)
_M2 = _U(0x94D049BB133111EB)
#: Words hashed per pass of the reference (bounds its temporary memory).
_CHUNK = 1 << 22


def mix64(z: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    """The SplitMix64 finaliser, elementwise on a uint64 array (wraps modulo 2^64)."""
    z = z + _GOLDEN
    z = (z ^ (z >> _U(30))) * _M1
    z = (z ^ (z >> _U(27))) * _M2
    out: npt.NDArray[np.uint64] = z ^ (z >> _U(31))
    return out


def _words(a: npt.NDArray[Any]) -> npt.NDArray[np.uint32]:
    if a.dtype.itemsize != 4:
        raise ValueError(f"digest64 hashes 4-byte elements (float32, uint32), got {a.dtype}")
    flat = np.ascontiguousarray(a).reshape(-1)
    if flat.size >= 2**32:
        raise ValueError("digest64 hashes fewer than 2^32 words")
    return flat.view(np.uint32)


def word_sum(a: npt.NDArray[Any]) -> int:
    """S of the definition: the modular sum of the mixed, index-tagged words of `a`."""
    w = _words(a)
    total = np.zeros(1, dtype=np.uint64)
    for lo in range(0, w.size, _CHUNK):
        part = w[lo:lo + _CHUNK].astype(np.uint64)
        idx = np.arange(lo, lo + part.size, dtype=np.uint64)
        total = total + np.sum(mix64((idx << _U(32)) | part), dtype=np.uint64)
    return int(total[0])


_MASK = (1 << 64) - 1
#: The constants as Python ints, converted once (`int()` of a NumPy scalar on every call
#: was a third of `_mix_int`'s time).
_GOLDEN_INT, _M1_INT, _M2_INT = int(_GOLDEN), int(_M1), int(_M2)


def _mix_int(z: int) -> int:
    """`mix64` of one value, on Python ints (a few hundred ns, where the NumPy form of one
    value costs microseconds: the host finishes every device digest with it)."""
    z = (z + _GOLDEN_INT) & _MASK
    z = ((z ^ (z >> 30)) * _M1_INT) & _MASK
    z = ((z ^ (z >> 27)) * _M2_INT) & _MASK
    return z ^ (z >> 31)


def finish(s: int, n: int) -> int:
    """digest = mix(S + mix(n)) from the word sum `s` (0 <= s < 2^64) of `n` words."""
    return _mix_int((s + _mix_int(n)) & _MASK)


def digest64(a: npt.NDArray[Any]) -> int:
    """The safemon-digest64 of host array `a` (4-byte elements), as a Python int < 2^64.

    Raises:
        ValueError: elements that are not 4 bytes wide, or 2^32 words or more.
    """
    return finish(word_sum(a), int(np.asarray(a).size))
