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


def test_finish_on_python_ints_equals_the_numpy_mix() -> None:
    """`finish` (Python ints) equals mix(S + mix(n)) computed with the NumPy `mix64` that
    `word_sum` uses, at the edges of the uint64 range and at random values."""
    rng = np.random.default_rng(3)
    cases = [(0, 0), ((1 << 64) - 1, 1), ((1 << 64) - 1, (1 << 32) - 1), (1 << 63, 12345)]
    cases += [(int(s), int(n)) for s, n in zip(rng.integers(0, 2**64, 50, dtype=np.uint64),
                                                rng.integers(0, 2**32, 50), strict=True)]
    for s, n in cases:
        nn = dg.mix64(np.array([n], dtype=np.uint64))
        want = int(dg.mix64(np.array([s], dtype=np.uint64) + nn)[0])
        assert dg.finish(s, n) == want, (s, n)
