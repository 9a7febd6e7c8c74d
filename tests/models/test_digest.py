"""safemon-digest64: the documented definition, order sensitivity, chunking."""

from __future__ import annotations

import numpy as np
import pytest

from safemon import digest as dg


def _mix_scalar(z: int) -> int:
    m = (1 << 64) - 1
    z = (z + 0x9E3779B97F4A7C15) & m
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & m
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & m
    return z ^ (z >> 31)


def test_digest_matches_the_definition_written_with_python_ints() -> None:
    """digest64 equals mix(S + mix(n)) with S the sum of mix((i << 32) | w_i), mod 2^64."""
    a = np.random.default_rng(1).standard_normal((7, 5)).astype(np.float32)
    words = a.reshape(-1).view(np.uint32).tolist()
    s = sum(_mix_scalar((i << 32) | w) for i, w in enumerate(words)) % (1 << 64)
    assert dg.digest64(a) == _mix_scalar((s + _mix_scalar(len(words))) % (1 << 64))


def test_digest_changes_with_one_flipped_bit_and_with_a_swap() -> None:
    """A one-bit change and swapping two different elements both change the digest."""
    a = np.arange(64, dtype=np.float32)
    b = a.copy()
    b.view(np.uint32)[10] ^= 1
    c = a.copy()
    c[[3, 4]] = c[[4, 3]]
    assert len({dg.digest64(a), dg.digest64(b), dg.digest64(c)}) == 3


def test_digest_of_float_and_uint_views_agree_and_chunks_do_not_matter(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The digest reads the words, so a float32 array and its uint32 view agree; the
    reference's chunking does not change the sum."""
    a = np.random.default_rng(2).standard_normal(1000).astype(np.float32)
    whole = dg.digest64(a)
    assert dg.digest64(a.view(np.uint32)) == whole
    monkeypatch.setattr(dg, "_CHUNK", 7)
    assert dg.digest64(a) == whole


def test_digest_refuses_eight_byte_elements() -> None:
    """float64 / uint64 arrays are refused with ValueError (the words are 32-bit)."""
    with pytest.raises(ValueError, match="4-byte"):
        dg.digest64(np.zeros(3, dtype=np.float64))
