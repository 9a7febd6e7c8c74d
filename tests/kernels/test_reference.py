"""The NumPy reference: bit-identical to the literal per-thread model and to a naive loop."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from safemon.kernels.catalog import (
    CHECKSUMS,
    LEVELS,
    STANDARD_COMBINATIONS,
    TILES,
    TileConfig,
    make_variant,
)
from safemon.kernels.reference import fma_float32, reference_matmul
from tests.kernels.slow_model import _round_to_f32, slow_matmul

TINY = TileConfig("tiny", bm=8, bn=8, bk=4, tm=4, tn=4)
ALL_SPECS = [(c, lv) for c in CHECKSUMS for lv in LEVELS] + [
    (c, "I") for c in (*STANDARD_COMBINATIONS, "crc32c_ones", "fletcher_crc32c")
] + [(None, None)]


def _rand(shape: tuple[int, int], seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _same_bits(x: np.ndarray, y: np.ndarray) -> bool:
    return x.shape == y.shape and np.array_equal(x.view(np.uint32), y.view(np.uint32))


@pytest.mark.parametrize("mode", ["exact", "fma"])
@pytest.mark.parametrize(("checksum", "level"), ALL_SPECS)
def test_reference_equals_literal_thread_model(checksum: str | None, level: str | None, mode: str) -> None:
    v = make_variant(checksum, level, mode, TINY)
    for m, k, n in [(1, 1, 1), (9, 6, 10)]:
        a, b = _rand((m, k), m), _rand((k, n), n)
        c1, e1 = reference_matmul(a, b, v)
        c2, e2 = slow_matmul(a, b, v)
        assert _same_bits(c1, c2)
        assert np.array_equal(e1, e2), v.name


@pytest.mark.parametrize("tile", list(TILES))
def test_reference_equals_literal_model_on_production_tiles(tile: str) -> None:
    a, b = _rand((3, 5), 1), _rand((5, 2), 2)
    for spec in [("ones", "I"), ("crc32c", "M"), ("fletcher", "E"), ("xor_fletcher", "I")]:
        v = make_variant(*spec, "exact", tile)
        c1, e1 = reference_matmul(a, b, v)
        c2, e2 = slow_matmul(a, b, v)
        assert _same_bits(c1, c2) and np.array_equal(e1, e2)


def naive_float32(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    m, k = a.shape
    n = b.shape[1]
    c = np.zeros((m, n), dtype=np.float32)
    for kk in range(k):  # sequential over k, one rounding for the product and one for the sum
        c = c + np.multiply.outer(a[:, kk], b[kk, :])
    return c


@settings(max_examples=40, deadline=None)
@given(
    m=st.integers(1, 70), n=st.integers(1, 70), k=st.integers(1, 40),
    tile=st.sampled_from(list(TILES)), seed=st.integers(0, 2**16),
)
def test_reference_c_equals_naive_sequential_loop(m: int, n: int, k: int, tile: str, seed: int) -> None:
    a, b = _rand((m, k), seed), _rand((k, n), seed + 1)
    c, es = reference_matmul(a, b, make_variant("ones", "I", "exact", tile))
    assert _same_bits(c, naive_float32(a, b))
    assert es.shape == (TILES[tile].total_threads(m, n), 1)


def test_es_arrays_are_deterministic_across_runs() -> None:
    a, b = _rand((37, 23), 3), _rand((23, 41), 4)
    for spec in [("crc32c", "I"), ("fletcher", "M"), ("twos_fletcher", "I")]:
        v = make_variant(*spec, "fma", "small")
        first = reference_matmul(a, b, v)
        second = reference_matmul(a.copy(), b.copy(), v)
        assert _same_bits(first[0], second[0]) and np.array_equal(first[1], second[1])


def test_es_changes_when_one_input_bit_flips() -> None:
    a, b = _rand((20, 20), 5), _rand((20, 20), 6)
    v = make_variant("ones", "I", "exact", "small")
    _, golden = reference_matmul(a, b, v)
    flipped = a.copy()
    flipped.view(np.uint32)[3, 7] ^= np.uint32(1 << 30)
    _, es = reference_matmul(flipped, b, v)
    changed = np.flatnonzero((es != golden).any(axis=1))
    assert changed.size > 0
    # Only threads whose rows include row 3 read a[3, 7]: one strip of the small tile's grid.
    t = v.tile
    ty_n, tx_n = t.bm // t.tm, t.bn // t.tn
    rows_of = lambda g: (g // (tx_n * ty_n * t.grid(20, 20)[0])) * t.bm + ((g % (tx_n * ty_n)) // tx_n) * t.tm  # noqa: E731
    assert all(rows_of(int(g)) <= 3 < rows_of(int(g)) + t.tm for g in changed)


def test_fma_emulation_is_single_rounding() -> None:
    rng = np.random.default_rng(7)
    n = 3000
    cases = [
        (rng.standard_normal(n), rng.standard_normal(n), rng.standard_normal(n)),
        (rng.standard_normal(n) * 2.0**-70, rng.standard_normal(n) * 2.0**-70, rng.standard_normal(n) * 2.0**-140),
    ]
    x = np.float32(1 + 2**-12)  # x·x = 1 + 2^-11 + 2^-24: exactly a float32 midpoint
    cases.append((np.full(4, x), np.full(4, x), np.array([2.0**-80, -(2.0**-80), 0.0, 2.0**-60])))
    for a, b, c in cases:
        a32, b32, c32 = a.astype(np.float32), b.astype(np.float32), c.astype(np.float32)
        got = fma_float32(a32, b32, c32)
        for i in range(0, len(a32), 3):
            exact = Fraction(float(a32[i])) * Fraction(float(b32[i])) + Fraction(float(c32[i]))
            want = _round_to_f32(exact)
            assert got[i].view(np.uint32) == np.float32(want).view(np.uint32) or (want == 0 and got[i] == 0)


def test_overflowing_products_give_canonical_nan() -> None:
    big = np.float32(3e38)
    a = np.array([[big, big]], dtype=np.float32)
    b = np.array([[big], [-big]], dtype=np.float32)  # inf + (−inf) = NaN
    c, _ = reference_matmul(a, b, make_variant("ones", "I", "exact", "small"))
    assert c.view(np.uint32)[0, 0] == 0x7FFFFFFF


def _one_thread_stream(a: np.ndarray, b: np.ndarray, level: str) -> list[int]:
    """The words one TINY thread folds, written out from docs/SIGNATURES.md by hand (4×4 tile)."""
    acc = np.zeros((4, 4), dtype=np.float32)
    words: list[int] = []
    for k in range(a.shape[1]):
        for j in range(4):
            for i in range(4):
                acc[i, j] = np.float32(acc[i, j] + np.float32(a[i, k] * b[k, j]))
            if level == "M":
                words.append(int(acc[3, j].view(np.uint32)))
        if level == "E":
            words.append(int(acc[3, 3].view(np.uint32)))
    return words


@pytest.mark.parametrize("level", ["M", "E"])
def test_paper_levels_fold_one_accumulator_per_loop_step(level: str) -> None:
    """M folds acc[TM-1][j] once per middle step, E acc[TM-1][TN-1] once per outer step."""
    one_thread = TileConfig("one", bm=4, bn=4, bk=4, tm=4, tn=4)
    a, b = _rand((4, 8), 3), _rand((8, 4), 4)
    _, es = reference_matmul(a, b, make_variant("twos", level, "exact", one_thread))
    want = sum(_one_thread_stream(a, b, level)) & 0xFFFFFFFF
    assert es.shape == (1, 1) and int(es[0, 0]) == want
    assert len(_one_thread_stream(a, b, level)) == (8 * 4 if level == "M" else 8)
