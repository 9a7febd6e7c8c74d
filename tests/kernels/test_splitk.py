"""Split-K: the decomposition rules and the NumPy reference against the literal model."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from safemon.kernels.catalog import (
    MAX_SPLIT,
    SPLIT_MIN_SLICE_K,
    SPLIT_TARGET_BLOCKS,
    SPLIT_TARGET_THREADS,
    TILES,
    TileConfig,
    auto_split,
    auto_tile,
    k_slices,
    make_variant,
    slice_bounds,
)
from safemon.kernels.reference import reduce_slices, reference_matmul
from tests.kernels.slow_model import slow_matmul

TINY = TileConfig("tiny", bm=8, bn=8, bk=4, tm=4, tn=4)
SPECS = [("ones", "I"), ("fletcher", "M"), ("crc32c", "E"), ("fletcher", "F"), ("crc32c", "T"),
         ("xor_fletcher", "I"),
         ("twos", "I"), (None, None)]


def _rand(shape: tuple[int, int], seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _same_bits(x: np.ndarray, y: np.ndarray) -> bool:
    return x.shape == y.shape and np.array_equal(x.view(np.uint32), y.view(np.uint32))


@given(k=st.integers(1, 5000), bk=st.sampled_from([4, 8, 16]), split=st.integers(1, MAX_SPLIT))
def test_slices_cover_k_in_order_and_none_is_empty(k: int, bk: int, split: int) -> None:
    slices = k_slices(k, bk, split)
    bounds = slice_bounds(k, bk, slices)
    assert 1 <= slices <= split
    assert bounds[0][0] == 0 and bounds[-1][1] == k
    for (_, hi), (nlo, _) in itertools.pairwise(bounds):
        assert hi == nlo
    assert all(lo < hi and lo % bk == 0 for lo, hi in bounds)


def test_auto_split_is_a_pure_function_of_shape_and_tile() -> None:
    """Small-M / large-K shapes are split to at most the tile's block target, rounded
    down (one more slice would exceed it or launch no more slices); big outputs, short K and
    the seed's sizes are not split."""
    for m, n, k in [(1, 4096, 4096), (64, 4096, 4096), (256, 1024, 4096)]:
        tile = auto_tile(m, n, k)
        s = auto_split(m, n, k, tile)
        gx, gy = tile.grid(m, n)
        want = SPLIT_TARGET_THREADS // tile.threads
        capped = s == -(-k // tile.bk) // -(-SPLIT_MIN_SLICE_K // tile.bk)  # slices that short
        assert s > 1 and gx * gy * s <= want
        # One more would exceed the target or launch no more slices (`k_slices`).
        assert capped or gx * gy * (s + 1) > want or k_slices(k, tile.bk, s + 1) == s
        assert s == auto_split(m, n, k, tile)
    for m, n, k in [(4096, 4096, 4096), (80, 80, 80), (18, 230400, 64), (160, 160, 160)]:
        assert auto_split(m, n, k, auto_tile(m, n, k)) == 1


def test_skinny_splits_fill_one_wave_of_four_blocks_per_multiprocessor() -> None:
    """`skinny` (128 threads) is split to at most 528 blocks, one wave of four per SM of a
    132-SM H100: the splits that measured fastest for the channels' default variant
    (evidence/h100-2026-11-24-split/). N/256 tiles of one row: 16 → 32 (capped by the
    minimum slice of 128 k), 43 → 12, 56 → 9, 32 → 16, 20 → 26, which launches 25 slices of
    13 k-tiles: the split returned is the number launched."""
    t = TILES["skinny"]
    assert SPLIT_TARGET_THREADS // t.threads == 528
    got = {(n, k): auto_split(1, n, k, t) for n, k in
           [(4096, 4096), (11008, 4096), (14336, 4096), (8192, 8192), (5120, 5120)]}
    assert got == {(4096, 4096): 32, (11008, 4096): 12, (14336, 4096): 9, (8192, 8192): 16,
                   (5120, 5120): 25}
    for (n, k), s in got.items():
        assert auto_tile(1, n, k) == t and k_slices(k, t.bk, s) == s
        assert t.grid(1, n)[0] * s <= 528


def test_auto_split_rounds_down_where_the_first_rule_ran_over_one_wave() -> None:
    """64×4096×4096 on `large`: 32 blocks; the first rule's ⌈264/32⌉ = 9 gave 288 blocks
    (1.09 waves of two blocks per SM), the rounded-down rule gives 8 (256 blocks)."""
    assert auto_split(64, 4096, 4096, TILES["large"]) == 8
    assert SPLIT_TARGET_BLOCKS * TILES["large"].threads == SPLIT_TARGET_THREADS


@given(m=st.integers(1, 600), n=st.integers(1, 5000), k=st.integers(1, 20000),
       tile=st.sampled_from(list(TILES)))
def test_auto_split_keeps_slices_long_and_the_grid_under_target(
    m: int, n: int, k: int, tile: str
) -> None:
    t = TILES[tile]
    s = auto_split(m, n, k, t)
    assert 1 <= s <= MAX_SPLIT
    if s > 1:
        gx, gy = t.grid(m, n)
        assert gx * gy * s <= SPLIT_TARGET_THREADS // t.threads
        per_slice_tiles = -(-t.k_padded(k) // t.bk // k_slices(k, t.bk, s))
        assert per_slice_tiles * t.bk >= SPLIT_MIN_SLICE_K


def test_bad_split_is_rejected() -> None:
    for bad in (0, -1, MAX_SPLIT + 1, 2.0, True):
        with pytest.raises(ValueError, match="split"):
            make_variant("ones", "I", "exact", "small", bad)  # type: ignore[arg-type]


def test_split_appears_in_name_and_dict_only_when_used() -> None:
    v1 = make_variant("ones", "I", "exact", "small")
    v4 = make_variant("ones", "I", "exact", "small", 4)
    assert "split" not in v1.name and "split" not in v1.as_dict()
    assert v4.name.endswith("/split4") and v4.as_dict()["split"] == 4 and v1 != v4


@pytest.mark.parametrize("mode", ["exact", "fma"])
@pytest.mark.parametrize(("checksum", "level"), SPECS)
def test_split_reference_equals_literal_model(checksum: str | None, level: str | None, mode: str) -> None:
    """M = 1, K ≫ N, and K not a multiple of the split or of BK, against the literal model."""
    for (m, k, n), split in [((1, 37, 3), 3), ((9, 50, 2), 4), ((5, 13, 10), 2), ((2, 8, 3), 5)]:
        v = make_variant(checksum, level, mode, TINY, split)
        a, b = _rand((m, k), m + k), _rand((k, n), n + k)
        c1, e1 = reference_matmul(a, b, v)
        c2, e2 = slow_matmul(a, b, v)
        assert _same_bits(c1, c2), v.name
        assert np.array_equal(e1, e2), v.name
        assert e1.shape == (v.es_threads(m, n, k), v.words)


@settings(max_examples=25, deadline=None)
@given(
    m=st.integers(1, 10), n=st.integers(1, 10), k=st.integers(1, 90), split=st.integers(1, 9),
    spec=st.sampled_from(SPECS), mode=st.sampled_from(["exact", "fma"]), seed=st.integers(0, 2**16),
)
def test_split_reference_equals_literal_model_on_random_shapes(
    m: int, n: int, k: int, split: int, spec: tuple[str | None, str | None], mode: str, seed: int
) -> None:
    v = make_variant(spec[0], spec[1], mode, TINY, split)
    a, b = _rand((m, k), seed), _rand((k, n), seed + 1)
    c1, e1 = reference_matmul(a, b, v)
    c2, e2 = slow_matmul(a, b, v)
    assert _same_bits(c1, c2) and np.array_equal(e1, e2)


def test_split_on_production_tiles_equals_the_literal_model() -> None:
    a, b = _rand((3, 70), 1), _rand((70, 2), 2)
    for tile in TILES:
        v = make_variant("ones", "M", "exact", tile, 3)
        c1, e1 = reference_matmul(a, b, v)
        c2, e2 = slow_matmul(a, b, v)
        assert _same_bits(c1, c2) and np.array_equal(e1, e2)


def test_split_one_is_the_whole_product() -> None:
    a, b = _rand((6, 40), 3), _rand((40, 5), 4)
    whole = reference_matmul(a, b, make_variant("ones", "I", "exact", TINY))
    one = reference_matmul(a, b, make_variant("ones", "I", "exact", TINY, 1))
    assert _same_bits(whole[0], one[0]) and np.array_equal(whole[1], one[1])


def test_reduction_adds_slices_in_order_and_canonicalises_nan() -> None:
    """((P0 + P1) + P2) in float32: a different order gives different bits here."""
    p = np.array([[[1.0]], [[2.0**-24]], [[2.0**-24]]], dtype=np.float32)
    assert reduce_slices(p)[0, 0] == np.float32(1.0)  # each tiny add rounds away
    assert reduce_slices(p[::-1].copy())[0, 0] == np.float32(1.0 + 2.0**-23)
    inf = np.array([[[np.inf]], [[-np.inf]]], dtype=np.float32)
    assert reduce_slices(inf).view(np.uint32)[0, 0] == 0x7FFFFFFF


def test_injection_build_refuses_a_split_variant() -> None:
    from safemon.kernels.gpu import build_for

    with pytest.raises(ValueError, match="split 1"):
        build_for(make_variant("ones", "I", "exact", "small", 2), inject=True)
    build_for(make_variant("ones", "I", "exact", "small"), inject=True)  # split 1 is fine


def test_protected_matmul_picks_and_records_the_automatic_split() -> None:
    """split=None gives auto_split of the shape; the result equals the explicit variant's."""
    import safemon

    a, b = _rand((2, 600), 5), _rand((600, 40), 6)
    r = safemon.protected_matmul(a, b, checksum="ones", level="M", backend="numpy")
    tile = auto_tile(2, 40, 600, "M")
    assert r.variant.split == auto_split(2, 40, 600, tile) > 1
    c, es = reference_matmul(a, b, make_variant("ones", "M", "exact", tile, r.variant.split))
    assert _same_bits(r.c, c) and np.array_equal(r.es, es)
    assert not r.pending and r.wait() is r  # NumPy results are settled at once
    one = safemon.protected_matmul(a, b, checksum="ones", level="M", backend="numpy", split=1)
    assert one.variant.split == 1 and one.es.shape[0] * r.variant.slices(600) == r.es.shape[0]
    with pytest.raises(ValueError, match="split"):
        safemon.matmul(a, b, backend="numpy", split=0)
