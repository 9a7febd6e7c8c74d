"""The checksum algebra against an independent bit-by-bit model and known vectors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import safemon.signatures
from safemon.kernels.signatures import CHECKSUM_KINDS, GF2Map, checksum, crc32c_table
from tests.kernels.slow_model import _Fold

CUDA_DIR = Path(safemon.__file__).parent / "kernels" / "cuda"


def slow(words: list[int], kind: str) -> list[int]:
    f = _Fold(kind)
    for w in words:
        f.fold(w)
    return f.words()


def test_crc32c_check_value_of_12345678_folded_as_two_le_words() -> None:
    words = np.frombuffer(b"12345678", dtype=np.uint32)
    expected = 0xFFFFFFFF
    for byte in b"12345678":  # CRC-32C straight from the definition, byte by byte
        expected ^= byte
        for _ in range(8):
            expected = (expected >> 1) ^ 0x82F63B78 if expected & 1 else expected >> 1
    expected ^= 0xFFFFFFFF
    assert safemon.signatures.checksum(words, "crc32c").tolist() == [expected]
    assert expected == 0x6087809A


def test_the_cached_crc32c_table_cannot_be_written() -> None:
    table = crc32c_table()
    with pytest.raises(ValueError, match="read-only"):
        table[0] = 1
    assert crc32c_table()[0] == 0


def test_crc32c_standard_check_value_123456789() -> None:
    # The published check value is over 9 bytes; fold the first 8 as words, then verify the table
    # reproduces the standard value byte-wise.
    table = crc32c_table()
    c = 0xFFFFFFFF
    for byte in b"123456789":
        c = int(table[(c ^ byte) & 0xFF]) ^ (c >> 8)
    assert c ^ 0xFFFFFFFF == 0xE3069283


@pytest.mark.parametrize(
    ("words", "expected"),
    [
        ([0xFFFFFFFF, 1], 1),  # carry out of bit 31 wraps around
        ([0x80000000, 0x80000000], 1),
        ([0xFFFFFFFF], 0xFFFFFFFF),  # "negative zero" stays until something is added
        ([0xFFFFFFFF, 0xFFFFFFFF], 0xFFFFFFFF),
        ([0, 0, 0], 0),
        ([0x12345678, 0xEDCBA987], 0xFFFFFFFF),  # x + ~x
    ],
)
def test_ones_complement_end_around_carry_vectors(words: list[int], expected: int) -> None:
    assert checksum(np.array(words, dtype=np.uint32), "ones").tolist() == [expected]


def test_fletcher_small_vector_by_hand() -> None:
    # s1: 1, 3, 6; s2: 1, 4, 10
    assert checksum(np.array([1, 2, 3], dtype=np.uint32), "fletcher").tolist() == [6, 10]


words_strategy = st.lists(
    st.one_of(st.integers(0, 2**32 - 1), st.sampled_from([0, 1, 0xFFFFFFFF, 0x80000000])),
    max_size=300,
)


@settings(max_examples=150, deadline=None)
@given(words=words_strategy, kind=st.sampled_from(CHECKSUM_KINDS))
def test_checksum_equals_sequential_fold(words: list[int], kind: str) -> None:
    assert checksum(np.array(words, dtype=np.uint32), kind).tolist() == slow(words, kind)


def _kernel_wide_ones(words: list[int], tile: int) -> int:
    """signature.cuh's `ones` policy, word for word: an exact sum in uint64 (Python ints
    wrapped to 64 bits), `tile_end` after every `tile` words, the store's formula."""
    s = 0
    for i, w in enumerate(words, 1):
        s = (s + w) % 2**64
        if i % tile == 0:
            s = (s & 0xFFFFFFFF) + (s >> 32)
    return 0 if s == 0 else (s - 1) % 0xFFFFFFFF + 1


@settings(max_examples=200, deadline=None)
@given(words=words_strategy, tile=st.integers(1, 64))
def test_kernel_wide_ones_sum_equals_the_word_by_word_fold(words: list[int], tile: int) -> None:
    """The kernels' 64-bit form of the ones' complement fold (docs/SIGNATURES.md) gives the
    seed's end-around-carry fold bit for bit, wherever the per-k-tile reduction falls."""
    assert [_kernel_wide_ones(words, tile)] == slow(words, "ones")


def _kernel_wide_fletcher(words: list[int], tile: int) -> list[int]:
    """signature.cuh's `fletcher` policy: s1 += w; s2 += s1 in uint64, both reduced by
    `tile_end` after every `tile` words, both mapped through the store's formula."""
    s1 = s2 = 0
    for i, w in enumerate(words, 1):
        s1 = (s1 + w) % 2**64
        s2 = (s2 + s1) % 2**64
        if i % tile == 0:
            s1 = (s1 & 0xFFFFFFFF) + (s1 >> 32)
            s2 = (s2 & 0xFFFFFFFF) + (s2 >> 32)
    return [0 if s == 0 else (s - 1) % 0xFFFFFFFF + 1 for s in (s1, s2)]


@settings(max_examples=200, deadline=None)
@given(words=words_strategy, tile=st.integers(1, 64))
def test_kernel_wide_fletcher_equals_the_word_by_word_fold(words: list[int], tile: int) -> None:
    assert _kernel_wide_fletcher(words, tile) == slow(words, "fletcher")


def test_kernel_wide_ones_sum_stays_exact_past_two_to_the_64() -> None:
    """Without the per-k-tile reduction 2**33 words of 0xFFFFFFFF would wrap a uint64; with
    it the state stays below 2**33 and the word equals the fold (here: 0xFFFFFFFF)."""
    s = 0
    for _ in range(2**13):  # 2**13 k-tiles of 2**20 all-ones words each: 2**33 words in all
        s += 2**20 * 0xFFFFFFFF
        assert s < 2**64
        s = (s & 0xFFFFFFFF) + (s >> 32)
    assert (0 if s == 0 else (s - 1) % 0xFFFFFFFF + 1) == 0xFFFFFFFF


def test_checksum_rejects_bad_input() -> None:
    with pytest.raises(TypeError, match="uint32"):
        checksum(np.array([1, 2], dtype=np.int64), "xor")
    with pytest.raises(ValueError, match="1-D"):
        checksum(np.zeros((2, 2), dtype=np.uint32), "xor")
    with pytest.raises(ValueError, match="unknown checksum"):
        checksum(np.zeros(2, dtype=np.uint32), "md5")


def test_gf2_power_matches_repeated_steps() -> None:
    g = GF2Map.crc_word_step()
    x = np.random.default_rng(0).integers(0, 2**32, 64, dtype=np.uint64).astype(np.uint32)
    y = x.copy()
    for _ in range(13):
        y = g.apply(y)
    assert np.array_equal(g.power(13).apply(x), y)


def test_cuda_crc_table_header_matches_python_table() -> None:
    text = (CUDA_DIR / "crc32c_table.cuh").read_text()
    body = text[text.index("{") + 1 : text.index("}")]
    values = [int(tok.strip().rstrip("u"), 16) for tok in body.split(",") if tok.strip()]
    assert values == crc32c_table().tolist()
