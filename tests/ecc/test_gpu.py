"""The CuPy kernels against the NumPy reference: bit-identical check bytes and reports."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import safemon.ecc as ecc
from safemon.ecc.code import decode_host, encode_host
from safemon.ecc.gpu import SOURCE, nvcc_builds
from safemon.errors import UncorrectableError
from safemon.kernels.compiler import load_module
from tests.ecc.helpers import all_pairs, flip_positions, n_positions, random_words

WB = [32, 64]


def test_kernel_source_ships_and_builds_are_listed() -> None:
    """CPU-side: the .cu is package data next to its loader and every build names it."""
    assert SOURCE.is_file()
    builds = nvcc_builds()
    assert builds and all(b.source == SOURCE for b in builds)
    flags = builds[0].flags()
    assert any(f.startswith("-DECC32_M6=") for f in flags)
    assert any(f.startswith("-DECC64_M7=") for f in flags)


@pytest.fixture
def cp() -> Any:
    import cupy

    return cupy


@pytest.mark.gpu
def test_every_build_compiles(cp: Any) -> None:
    for b in nvcc_builds():
        mod = load_module(b)
        for wb in WB:
            for op in ("encode", "check", "locate"):
                mod.get_function(f"ecc{wb}_{op}")


@pytest.mark.gpu
@pytest.mark.parametrize("word_bits", WB)
@pytest.mark.parametrize(
    "nbytes", [1, 3, 4, 7, 8, 15, 16, 17, 31, 32, 33, 63, 64, 65, 1000, 4096, 4099, 1 << 20, (1 << 20) + 5]
)
@pytest.mark.parametrize("offset", [0, 1, 4, 8])
def test_device_check_bytes_match_numpy(cp: Any, word_bits: int, nbytes: int, offset: int) -> None:
    """Aligned and misaligned views, whole and partial groups/words: identical packed checks."""
    host = np.random.default_rng(nbytes + offset).integers(0, 256, size=nbytes + offset + 8, dtype=np.uint8)
    dev = cp.asarray(host)[offset : offset + nbytes]
    got = ecc.encode(dev, word_bits=word_bits)
    assert isinstance(got, cp.ndarray)
    want = encode_host(host[offset : offset + nbytes], word_bits)
    assert np.array_equal(got.get(), want)
    assert ecc.decode(dev, got, word_bits=word_bits).clean


@pytest.mark.gpu
@pytest.mark.parametrize("word_bits", WB)
def test_device_exhaustive_single_errors_corrected_in_place(cp: Any, word_bits: int) -> None:
    n = n_positions(word_bits)
    reps = 8
    raw = random_words(np.random.default_rng(20), n * reps, word_bits)
    check = encode_host(raw, word_bits)
    raw0, check0 = raw.copy(), check.copy()
    words = np.arange(n * reps, dtype=np.int64)
    pos = np.tile(np.arange(n, dtype=np.int64), reps)
    flip_positions(raw, check.view(np.uint8), word_bits, words, pos)
    d_raw, d_check = cp.asarray(raw), cp.asarray(check)
    rep = ecc.decode(d_raw, d_check, word_bits=word_bits)
    ref = decode_host(raw, check, word_bits)
    assert np.array_equal(rep.corrected_words, ref.corrected_words)
    assert np.array_equal(rep.corrected_positions, ref.corrected_positions)
    assert np.array_equal(rep.corrected_positions, pos) and rep.n_uncorrectable == 0
    assert np.array_equal(d_raw.get(), raw0) and np.array_equal(d_check.get(), check0)


@pytest.mark.gpu
@pytest.mark.parametrize("word_bits", WB)
def test_device_exhaustive_double_errors_detected(cp: Any, word_bits: int) -> None:
    pairs = np.tile(all_pairs(word_bits), (2, 1))
    m = len(pairs)
    raw = random_words(np.random.default_rng(21), m, word_bits)
    check = encode_host(raw, word_bits)
    words = np.arange(m, dtype=np.int64)
    flip_positions(raw, check.view(np.uint8), word_bits, words, pairs[:, 0])
    flip_positions(raw, check.view(np.uint8), word_bits, words, pairs[:, 1])
    d_raw, d_check = cp.asarray(raw), cp.asarray(check)
    rep = ecc.decode(d_raw, d_check, word_bits=word_bits)
    assert rep.n_corrected == 0 and np.array_equal(rep.uncorrectable_words, words)
    assert np.array_equal(d_raw.get(), raw) and np.array_equal(d_check.get(), check)


@pytest.mark.gpu
@pytest.mark.parametrize("word_bits", WB)
@pytest.mark.parametrize("nbytes", [5, 37, 1001, 100_003])
def test_device_reports_equal_host_reports_on_random_damage(cp: Any, word_bits: int, nbytes: int) -> None:
    rng = np.random.default_rng(nbytes)
    raw = rng.integers(0, 256, size=nbytes, dtype=np.uint8)
    check = encode_host(raw, word_bits)
    flips = rng.choice(nbytes * 8, size=max(2, nbytes // 50), replace=False)
    np.bitwise_xor.at(raw, flips // 8, (1 << (flips % 8)).astype(np.uint8))
    cflips = rng.choice(check.size * 32, size=3, replace=False)
    cb = check.view(np.uint8)
    np.bitwise_xor.at(cb, cflips // 8, (1 << (cflips % 8)).astype(np.uint8))
    d_raw, d_check = cp.asarray(raw), cp.asarray(check)
    for correct in (False, True):
        rep = ecc.decode(d_raw, d_check, word_bits=word_bits, correct=correct)
        h_raw, h_check = raw.copy(), check.copy()
        ref = decode_host(h_raw, h_check, word_bits, correct=correct)
        for f in ("corrected_words", "corrected_positions", "uncorrectable_words"):
            assert np.array_equal(getattr(rep, f), getattr(ref, f)), f
        assert np.array_equal(d_raw.get(), h_raw) and np.array_equal(d_check.get(), h_check)


@pytest.mark.gpu
def test_protected_array_on_device_transfer_protection(cp: Any) -> None:
    w = np.random.default_rng(3).standard_normal((257, 3)).astype(np.float32)

    def single(d: Any, c: Any) -> None:
        d.reshape(-1).view(cp.uint8)[77] ^= 4

    pa = ecc.ProtectedArray.from_host(w, name="w", backend="cupy", after_upload=single)
    assert pa.on_device and pa.corrected_total == 1
    assert isinstance(pa.verified(), cp.ndarray)
    assert np.array_equal(pa.verified().get(), w) and np.array_equal(pa.to_host(), w)

    def double(d: Any, c: Any) -> None:
        c[3] ^= cp.uint32(0b11)  # word 12: two check bits

    with pytest.raises(UncorrectableError) as ei:
        ecc.ProtectedArray.from_host(w, name="w2", backend="cupy", after_upload=double)
    assert ei.value.buffer == "w2" and ei.value.words == (12,)


@pytest.mark.gpu
@pytest.mark.parametrize("word_bits", WB)
def test_protected_array_on_device_scrub_and_verified(cp: Any, word_bits: int) -> None:
    w = cp.asarray(np.random.default_rng(4).standard_normal(1003).astype(np.float32))
    pa = ecc.ProtectedArray(w, name="dev", word_bits=word_bits)
    assert np.array_equal(pa._check.get(), encode_host(w.get(), word_bits))
    store = pa.verified()
    store.view(cp.uint8)[5] ^= 1
    store.view(cp.uint8)[4000] ^= 0x80
    res = pa.scrub()
    assert res.corrected == 2 and res.ok and cp.array_equal(pa.verified(), w)
    store.view(cp.uint8)[0] ^= 3
    with pytest.raises(UncorrectableError) as ei:
        pa.verified()
    assert ei.value.words == (0,)
