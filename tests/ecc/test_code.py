"""The Hsiao codes and the host codec: algebra, exhaustive single/double errors, the tail rule."""

from __future__ import annotations

import numpy as np
import pytest

import safemon.ecc as ecc
from safemon.ecc.code import (
    NO_ERROR,
    UNCORRECTABLE,
    check_bits,
    check_masks,
    decode_host,
    encode_host,
    encode_words,
    generator_matrix,
    n_check_words,
    parity_check_matrix,
    syndrome_table,
)
from safemon.errors import InvalidInputError
from tests.ecc.helpers import all_pairs, flip_positions, n_positions, random_words

WB = [32, 64]


@pytest.mark.parametrize("word_bits", WB)
def test_parity_check_matrix_is_hsiao(word_bits: int) -> None:
    """H has distinct odd-weight columns, identity check part, and balanced rows."""
    h = parity_check_matrix(word_bits)
    r, k = check_bits(word_bits), word_bits
    assert h.shape == (r, k + r)
    cols = [int(sum(int(h[i, j]) << i for i in range(r))) for j in range(k + r)]
    assert len(set(cols)) == k + r
    assert all(c.bit_count() % 2 == 1 for c in cols)
    assert np.array_equal(h[:, k:], np.eye(r, dtype=np.uint8))
    weights = h.sum(axis=1)
    assert weights.max() - weights.min() <= 1


@pytest.mark.parametrize("word_bits", WB)
def test_generator_is_orthogonal_to_parity_check(word_bits: int) -> None:
    g, h = generator_matrix(word_bits).astype(int), parity_check_matrix(word_bits).astype(int)
    assert not ((g @ h.T) % 2).any()
    assert np.array_equal(g[:, :word_bits], np.eye(word_bits, dtype=int))


@pytest.mark.parametrize("word_bits", WB)
def test_mask_encoder_matches_generator_matrix(word_bits: int) -> None:
    """encode_words (row masks + parity) equals d @ G mod 2 on random words."""
    rng = np.random.default_rng(1)
    dt = np.uint32 if word_bits == 32 else np.uint64
    words = rng.integers(0, 2**63, size=500, dtype=np.uint64).astype(dt)
    bits = ((words[:, None] >> np.arange(word_bits, dtype=dt)) & dt(1)).astype(int)
    code = (bits @ generator_matrix(word_bits).astype(int)) % 2
    want = (code[:, word_bits:] << np.arange(check_bits(word_bits))).sum(axis=1)
    assert np.array_equal(encode_words(words, word_bits), want.astype(np.uint8))
    assert len(check_masks(word_bits)) == check_bits(word_bits)


@pytest.mark.parametrize("word_bits", WB)
def test_syndrome_table_classifies_every_syndrome(word_bits: int) -> None:
    h = parity_check_matrix(word_bits)
    r = check_bits(word_bits)
    t = syndrome_table(word_bits)
    assert t[0] == NO_ERROR
    for pos in range(n_positions(word_bits)):
        s = int(sum(int(h[i, pos]) << i for i in range(r)))
        assert t[s] == pos
    evens = [s for s in range(1, 1 << r) if s.bit_count() % 2 == 0]
    assert (t[evens] == UNCORRECTABLE).all()
    assert not t.flags.writeable


def _setup(word_bits: int, count: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    raw = random_words(rng, count, word_bits)
    check = encode_host(raw, word_bits)
    return raw, check, check.view(np.uint8)


@pytest.mark.parametrize("word_bits", WB)
def test_every_single_bit_error_is_corrected(word_bits: int) -> None:
    """Each of the n positions (data and check bits), on 8 random words each, is corrected."""
    n = n_positions(word_bits)
    reps = 8
    raw, check, cbytes = _setup(word_bits, n * reps, seed=2)
    raw0, check0 = raw.copy(), check.copy()
    words = np.arange(n * reps, dtype=np.int64)
    pos = np.tile(np.arange(n, dtype=np.int64), reps)
    flip_positions(raw, cbytes, word_bits, words, pos)
    rep = decode_host(raw, check, word_bits, correct=True)
    assert rep.n_uncorrectable == 0
    assert np.array_equal(rep.corrected_words, words)
    assert np.array_equal(rep.corrected_positions, pos)
    assert np.array_equal(raw, raw0)
    assert np.array_equal(check, check0)
    assert decode_host(raw, check, word_bits).clean


@pytest.mark.parametrize("word_bits", WB)
def test_every_double_bit_error_is_detected_not_miscorrected(word_bits: int) -> None:
    """All n(n-1)/2 position pairs, on 2 random words each: uncorrectable, nothing written."""
    pairs = np.tile(all_pairs(word_bits), (2, 1))
    m = len(pairs)
    raw, check, cbytes = _setup(word_bits, m, seed=3)
    words = np.arange(m, dtype=np.int64)
    flip_positions(raw, cbytes, word_bits, words, pairs[:, 0])
    flip_positions(raw, cbytes, word_bits, words, pairs[:, 1])
    raw1, check1 = raw.copy(), check.copy()
    rep = decode_host(raw, check, word_bits, correct=True)
    assert rep.n_corrected == 0
    assert np.array_equal(rep.uncorrectable_words, words)
    assert np.array_equal(raw, raw1) and np.array_equal(check, check1)


@pytest.mark.parametrize("word_bits", WB)
@pytest.mark.parametrize("count", [1, 3, 7, 13, 1001])
def test_random_buffers_mixed_errors(word_bits: int, count: int) -> None:
    """Random single and double errors in an odd number of words are reported exactly."""
    rng = np.random.default_rng(count)
    raw, check, cbytes = _setup(word_bits, count, seed=count + 10)
    raw0, check0 = raw.copy(), check.copy()
    n = n_positions(word_bits)
    hit = rng.choice(count, size=max(1, count // 3), replace=False)
    double = rng.random(hit.size) < 0.3
    p1 = rng.integers(0, n, size=hit.size)
    p2 = (p1 + rng.integers(1, n, size=hit.size)) % n
    flip_positions(raw, cbytes, word_bits, hit.astype(np.int64), p1)
    flip_positions(raw, cbytes, word_bits, hit[double].astype(np.int64), p2[double])
    rep = decode_host(raw, check, word_bits, correct=True)
    assert np.array_equal(rep.corrected_words, np.sort(hit[~double]))
    assert np.array_equal(rep.uncorrectable_words, np.sort(hit[double]))
    good = np.ones(count, dtype=bool)
    good[hit[double]] = False
    wb = word_bits // 8
    assert np.array_equal(raw.reshape(count, wb)[good], raw0.reshape(count, wb)[good])
    assert np.array_equal(cbytes[:count][good], check0.view(np.uint8)[:count][good])


@pytest.mark.parametrize("word_bits", WB)
@pytest.mark.parametrize("nbytes", [1, 2, 3, 5, 6, 7, 9, 15, 17, 31, 33, 101])
def test_tail_rule_pads_with_zeros_and_never_writes_outside(word_bits: int, nbytes: int) -> None:
    """A partial last word is coded as if zero-padded; its stored bits are still corrected."""
    rng = np.random.default_rng(nbytes)
    big = rng.integers(0, 256, size=nbytes + 16, dtype=np.uint8)
    view = big[:nbytes]
    wb = word_bits // 8
    padded = np.zeros(-(-nbytes // wb) * wb, dtype=np.uint8)
    padded[:nbytes] = view
    check = encode_host(view, word_bits)
    assert check.size == n_check_words(nbytes, word_bits)
    assert np.array_equal(check, encode_host(padded, word_bits))
    guard = big[nbytes:].copy()
    last = padded.size // wb - 1
    stored_bits = (nbytes - last * wb) * 8
    for pos in range(stored_bits):
        view[last * wb + pos // 8] ^= np.uint8(1 << (pos % 8))
        rep = decode_host(view, check, word_bits)
        assert rep.corrected_words.tolist() == [last]
        assert rep.corrected_positions.tolist() == [pos]
        assert np.array_equal(view, padded[:nbytes])
    assert np.array_equal(big[nbytes:], guard)


@pytest.mark.parametrize("word_bits", WB)
def test_syndrome_pointing_into_padding_is_uncorrectable(word_bits: int) -> None:
    """Check bits altered to name a padding bit: reported uncorrectable, nothing written."""
    data = np.arange(3, dtype=np.uint8)  # 3 bytes: bits 24.. of the only word are padding
    check = encode_host(data, word_bits)
    h = parity_check_matrix(word_bits)
    col = int(sum(int(h[i, 30]) << i for i in range(check_bits(word_bits))))
    check.view(np.uint8)[0] ^= np.uint8(col)
    before = check.copy()
    rep = decode_host(data, check, word_bits)
    assert rep.uncorrectable_words.tolist() == [0] and rep.n_corrected == 0
    assert np.array_equal(check, before) and data.tolist() == [0, 1, 2]


def test_spare_bit_of_39_32_check_byte_is_ignored() -> None:
    data = np.arange(8, dtype=np.uint32)
    check = encode_host(data, 32)
    assert not (check.view(np.uint8) & 0x80).any()
    check.view(np.uint8)[5] |= 0x80
    assert decode_host(data, check, 32).clean


@pytest.mark.parametrize("word_bits", WB)
def test_packing_layout_and_zero_padding_bytes(word_bits: int) -> None:
    """Word i's check byte is byte i%4 of check[i//4]; bytes of missing words are 0."""
    data = np.random.default_rng(5).integers(0, 2**31, size=word_bits // 32 * 5, dtype=np.uint32)
    check = encode_host(data, word_bits)
    words = data.view(np.uint32 if word_bits == 32 else np.uint64)
    cb = encode_words(words, word_bits)
    assert check.shape == (2,)
    for i in range(5):
        assert (int(check[i // 4]) >> (8 * (i % 4))) & 0xFF == cb[i]
    assert int(check[1]) >> 8 == 0


def test_dtype_and_shape_do_not_matter_only_bytes() -> None:
    a = np.random.default_rng(6).standard_normal((7, 3)).astype(np.float32)
    assert np.array_equal(ecc.encode(a), ecc.encode(a.reshape(-1).view(np.uint8)))
    assert np.array_equal(ecc.encode(a, word_bits=64), ecc.encode(a.view(np.int16), word_bits=64))


def test_empty_array() -> None:
    e = np.empty((0, 4), dtype=np.float32)
    check = ecc.encode(e)
    assert check.shape == (0,) and check.dtype == np.uint32
    rep = ecc.decode(e, check)
    assert rep.clean and rep.n_words == 0


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: ecc.encode(np.zeros((4, 4), np.float32)[:, ::2]), "C-contiguous"),
        (lambda: ecc.encode([1, 2, 3]), "NumPy or CuPy"),
        (lambda: ecc.encode(np.zeros(4, np.uint32), word_bits=16), "32 or 64"),
        (lambda: ecc.decode(np.zeros(8, np.uint32), np.zeros(3, np.uint32)), "2 elements"),
        (lambda: ecc.decode(np.zeros(8, np.uint32), np.zeros(2, np.int32)), "uint32"),
        (lambda: ecc.decode(np.zeros(8, np.uint32), [0, 0]), "check is list"),
    ],
)
def test_bad_input_is_rejected(call, match: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InvalidInputError, match=match):
        call()


def test_correct_on_read_only_data_is_rejected_but_check_only_works() -> None:
    data = np.arange(8, dtype=np.uint32)
    check = ecc.encode(data)
    data.flags.writeable = False
    with pytest.raises(InvalidInputError, match="writeable"):
        ecc.decode(data, check)
    assert ecc.decode(data, check, correct=False).clean


def test_correct_false_reports_but_does_not_write() -> None:
    data = np.arange(8, dtype=np.uint32)
    check = ecc.encode(data)
    data[3] ^= np.uint32(1 << 7)
    rep = ecc.decode(data, check, correct=False)
    assert rep.corrected_words.tolist() == [3] and not rep.applied
    assert data[3] == 3 ^ (1 << 7)
    ecc.decode(data, check)
    assert data[3] == 3
