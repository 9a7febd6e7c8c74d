"""ABFT (safemon.kernels.abft) on the CPU: the rounding bound against exact sums on adversarial
inputs, no false positive over 10⁵ products, detection and the failing tile."""

from __future__ import annotations

import math

import numpy as np
import pytest

from safemon.errors import KernelCheckError
from safemon.kernels.abft import U32_F, abft_check, abft_passes, gamma
from safemon.kernels.api import run_variant
from safemon.kernels.catalog import TILES, TileConfig, make_variant, slice_k_max
from safemon.kernels.reference import reference_matmul

SMALL = TILES["small"]


def _adversarial(kind: str, m: int, n: int, k: int, rng: np.random.Generator) -> tuple[
        np.ndarray, np.ndarray]:
    if kind == "cancel":  # products of alternating sign and huge size: C is the small rest
        a = rng.standard_normal((m, k))
        b = rng.standard_normal((k, n))
        a[:, 0::2] *= 1e6
        b[0::2, :] = (1.0 + 1e-7 * b[0::2, :])
        b[1::2, :] = -np.roll(b[0::2, :], 0, axis=0)[: b[1::2, :].shape[0]]
        a[:, 1::2] = a[:, 0::2][:, : a[:, 1::2].shape[1]]
    elif kind == "range":  # magnitudes from 2^-60 to 2^60 (products from subnormal to huge)
        a = rng.standard_normal((m, k)) * 2.0 ** rng.integers(-60, 60, (m, k))
        b = rng.standard_normal((k, n)) * 2.0 ** rng.integers(-60, 60, (k, n))
    elif kind == "rows":  # rows of very different size (the 1oo1D column check's blind spot)
        a = rng.standard_normal((m, k)) * 10.0 ** rng.integers(-4, 5, (m, 1))
        b = rng.standard_normal((k, n))
    elif kind == "tiny":  # products in the float32 subnormal range
        a = rng.standard_normal((m, k)) * 2.0**-70
        b = rng.standard_normal((k, n)) * 2.0**-70
    else:
        a, b = rng.standard_normal((m, k)), rng.standard_normal((k, n))
    return a.astype(np.float32), b.astype(np.float32)


KINDS = ("normal", "cancel", "range", "rows", "tiny")


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("mode,split", [("exact", 1), ("fma", 1), ("exact", 4), ("fma", 3)])
def test_element_bound_holds_against_exact_sums(kind: str, mode: str, split: int) -> None:
    """|Ĉ − exact| ≤ γ_{k_S+S}·Σ|a||b| + (K+S)·2⁻¹⁵⁰ for every element, k_S the most k of a
    slice: the premise of the tolerance (exact: math.fsum of float64 products, which are exact
    for float32 inputs)."""
    rng = np.random.default_rng(hash((kind, mode, split)) % 2**32)
    m, n, k = 9, 7, 300
    a, b = _adversarial(kind, m, n, k, rng)
    v = make_variant(None, None, mode, "small", split)
    c, _ = reference_matmul(a, b, v)
    s = v.slices(k)
    k_s = slice_k_max(k, v.tile.bk, s)
    assert k_s == (k if split == 1 else math.ceil(math.ceil(k / 8) / s) * 8)
    g = gamma(float(k_s + s), U32_F)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    worst = 0.0
    for i in range(m):
        for j in range(n):
            exact = math.fsum(a64[i] * b64[:, j])
            bound = g * float(np.abs(a64[i]) @ np.abs(b64[:, j])) + (k + s) * 2.0**-150
            err = abs(float(c[i, j]) - exact)
            assert err <= bound, (i, j, err, bound)
            worst = max(worst, err / bound if bound else 0.0)
    assert abft_check(a, b, c, SMALL, s).ok
    assert abft_check(a, b, c, SMALL, s, k_slice=k_s).ok
    assert worst < 1.0


#: A 4×4 checking tile: every 4 rows of a stacked product form one independent product.
#: (Any tiling gives a valid check; the kernel's summation order does not depend on it.)
TILE4 = TileConfig("t4", bm=4, bn=4, bk=4, tm=4, tn=4)


def _clean_group(rng: np.random.Generator, products: int) -> tuple[
        np.ndarray, np.ndarray, np.ndarray, int, int]:
    """`products` independent 4×K·K×N products sharing B, stacked along M, computed by the
    reference in a random mode and split, on random inputs of a random kind; with the
    slices and the most k of a slice (k_S)."""
    k = int(rng.integers(1, 64))
    n = int(rng.integers(1, 24))
    kind = KINDS[int(rng.integers(0, len(KINDS)))]
    a, b = _adversarial(kind, products * TILE4.bm, n, k, rng)
    mode = ("exact", "fma")[int(rng.integers(0, 2))]
    v = make_variant(None, None, mode, "small", int(rng.integers(1, 5)))
    c, _ = reference_matmul(a, b, v)
    s = v.slices(k)
    return a, b, c, s, slice_k_max(k, v.tile.bk, s)


@pytest.mark.slow
def test_no_false_positive_over_100000_random_products() -> None:
    """10⁵ clean products (50 groups of 2000 4×K·K×N products, random K < 64, N < 24, mode,
    split and input kind) all pass the check of every one of their tiles, with the tolerance
    of their longest slice."""
    rng = np.random.default_rng(15)
    products = 0
    for _ in range(50):
        a, b, c, s, k_s = _clean_group(rng, 2000)
        r = abft_check(a, b, c, TILE4, s, k_slice=k_s)
        assert r.ok, r.failed_tiles[:5]
        products += 2000
    assert products == 100_000


def test_no_false_positive_on_a_sample_of_products() -> None:
    rng = np.random.default_rng(16)
    for _ in range(5):
        a, b, c, s, k_s = _clean_group(rng, 200)
        assert abft_check(a, b, c, TILE4, s).ok
        assert abft_check(a, b, c, SMALL, s).ok
        assert abft_check(a, b, c, TILE4, s, k_slice=k_s).ok


def _flip(c: np.ndarray, i: int, j: int, bit: int) -> np.ndarray:
    bad = c.copy()
    bad.view(np.uint32)[i, j] ^= np.uint32(1 << bit)
    return bad


def test_exponent_flip_is_caught_when_rows_differ_in_magnitude() -> None:
    """The issue's case: rows scaled by 10⁴ except row 0, an exponent bit of C[0,0] flipped.
    The column sum alone cannot see it; the row check of row 0 does."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((80, 80)).astype(np.float32)
    a[1:] *= np.float32(1e4)
    b = rng.standard_normal((80, 80)).astype(np.float32)
    v = make_variant(None, None, "exact", "small")
    c, _ = reference_matmul(a, b, v)
    for bit in (30, 29, 27, 24):
        bad = _flip(c, 0, 0, bit)
        r = abft_check(a, b, bad, SMALL)
        assert r.failed_tiles == (0,), bit
        if abs(bad[0, 0]) < abs(c[0, 0]):  # the case: the value shrinks
            assert (np.abs(r.col_residual) <= r.col_tol).all()  # columns alone miss it


def test_failed_tile_is_the_tile_of_the_corrupted_element() -> None:
    rng = np.random.default_rng(4)
    a = rng.standard_normal((100, 40)).astype(np.float32)
    b = rng.standard_normal((40, 70)).astype(np.float32)
    c, _ = reference_matmul(a, b, make_variant(None, None, "fma", "small"))
    gx, _ = SMALL.grid(100, 70)
    for i, j in [(0, 0), (99, 69), (33, 64), (64, 31)]:
        r = abft_check(a, b, _flip(c, i, j, 28), SMALL)
        assert r.failed_tiles == ((i // 32) * gx + j // 32,)


def test_low_mantissa_flip_is_below_tolerance() -> None:
    """An error far below the rounding bound passes: ABFT does not claim to see it."""
    rng = np.random.default_rng(5)
    a = rng.standard_normal((32, 512)).astype(np.float32)
    b = rng.standard_normal((512, 32)).astype(np.float32)
    c, _ = reference_matmul(a, b, make_variant(None, None, "exact", "small"))
    assert abft_check(a, b, _flip(c, 3, 3, 0), SMALL).ok


@pytest.mark.parametrize("value", [np.inf, -np.inf, np.nan])
def test_non_finite_c_fails(value: float) -> None:
    a = np.ones((4, 3), np.float32)
    b = np.ones((3, 5), np.float32)
    c = a @ b
    c[2, 1] = value
    assert not abft_check(a, b, c, SMALL).ok


def test_abft_passes_refuses_a_wrong_shape_and_checks_with_the_variant() -> None:
    a = np.ones((4, 3), np.float32)
    b = np.ones((3, 5), np.float32)
    v = make_variant(None, None, "exact", SMALL)
    assert abft_passes(a, b, a @ b, v)
    assert not abft_passes(a, b, np.ones((5, 4), np.float32), v)
    with pytest.raises(ValueError, match="shapes"):
        abft_check(a, b, np.ones((5, 4), np.float32), SMALL)


def test_numpy_backend_runs_the_check_for_an_abft_variant() -> None:
    rng = np.random.default_rng(6)
    a = rng.standard_normal((50, 30)).astype(np.float32)
    b = rng.standard_normal((30, 20)).astype(np.float32)
    v = make_variant("ones", "M", "exact", "small", abft=True)
    r = run_variant(a, b, v, "numpy")
    plain, _ = reference_matmul(a, b, make_variant("ones", "M", "exact", "small"))
    assert r.c.tobytes() == plain.tobytes()
    assert v.name == "ones/M/exact/small/abft"
    with pytest.raises(ValueError, match="abft"):
        make_variant("ones", "M", "exact", "small", abft=1)  # type: ignore[arg-type]
    assert isinstance(KernelCheckError("abft", 3), RuntimeError)


@pytest.mark.parametrize("weight", [1, 2, 4, 8, 16])
@pytest.mark.parametrize("blocks", [1, 7, 64, 128, 264, 5000])
@pytest.mark.parametrize("k", [1, 31, 64, 70, 128, 200, 1000, 4096, 65536])
def test_abft_k_slices_cover_k_within_the_rounding_budget(
        blocks: int, k: int, weight: int) -> None:
    """abft.cu's K-split of the checksum products: the slices cover K with none empty, and a
    product term sees at most K + 7 float64 roundings (the F64_EXTRA slack of the tolerance):
    k-per-slice in its slice, then the verify kernel's sum of the S slices. Columns: eight
    parts of every 8th slice (⌈S/8⌉ − 1 each), added in order (at most S − 1 of those
    additions round: a part without slices is an exact zero). Rows: P ≤ 8 parts of every P-th
    slice, added in order, at most S − 1 for any P."""
    from safemon.kernels.abft import ABFT_KC, F64_EXTRA, abft_k_slices

    slices, per = abft_k_slices(blocks, k, weight)
    assert slices >= 1 and per % ABFT_KC == 0
    assert (slices - 1) * per < k <= slices * per
    in_slice = min(per, k)
    columns = -(-slices // 8) - 1 + min(7, slices - 1)
    rows = max(-(-slices // p) - 1 + min(p - 1, slices - 1) for p in (1, 2, 4, 8))
    assert rows <= slices - 1
    assert in_slice + max(columns, rows) <= k + F64_EXTRA


def test_every_catalog_tile_has_a_verify_kernel_that_covers_it() -> None:
    """The verify kernel a tile gets holds all its rows (8 warps × RW) and columns (CG × 32),
    and it is one abft.cu instantiates; a tile beyond 128×256 is refused by name."""
    import re

    from safemon.kernels.abft import ABFT_SOURCE, ABFT_VERIFY_INSTANCES, verify_instance

    built = {(int(rw), int(cg)) for rw, cg in
             re.findall(r"^SAFEMON_ABFT_VERIFY\((\d+), (\d+)\)", ABFT_SOURCE.read_text(), re.M)}
    assert built == set(ABFT_VERIFY_INSTANCES)
    for tile in TILES.values():
        rw, cg = verify_instance(tile)
        assert 8 * rw >= tile.bm and 32 * cg >= tile.bn
    assert verify_instance(TileConfig("t", bm=64, bn=64, bk=8, tm=4, tn=4)) == (16, 4)
    with pytest.raises(ValueError, match="256×128"):
        verify_instance(TileConfig("t", bm=256, bn=128, bk=8, tm=8, tn=8))


def test_column_kernel_needs_tile_widths_of_whole_32_column_parts() -> None:
    """abft.cu's column kernel adds B's rows per tile in parts of 32 columns: every catalog
    tile qualifies, a 16-wide one is refused with the reason (not run wrong)."""
    from safemon.kernels.abft import _abft_layout

    for tile in TILES.values():
        _abft_layout(100, 300, 70, make_variant(None, None, "fma", tile, abft=True))
    narrow = make_variant(None, None, "fma", TileConfig("n", bm=32, bn=16, bk=8, tm=4, tn=4),
                          abft=True)
    with pytest.raises(ValueError, match="multiple of 32"):
        _abft_layout(100, 300, 70, narrow)


@pytest.mark.parametrize(("dims", "nt", "grid"), [((64, 4096, 4096), 1, (1, 4)),
                                                   ((4096, 4096, 4096), 4, (64, 1)),
                                                   ((256, 1024, 4096), 1, (4, 1)),
                                                   ((200, 2048, 512), 2, (4, 1))])
def test_row_products_of_one_row_block_spread_over_its_tile_columns(
    dims: tuple[int, int, int], nt: int, grid: tuple[int, int]
) -> None:
    """The row kernel's instance (n-tiles of 8 tile columns per warp) and grid: a product of
    at most 64 rows takes one n-tile, so its gx tile columns make gx / 8 blocks per K-slice."""
    from safemon.kernels.abft import _abft_layout
    from safemon.kernels.catalog import variant_for_shape

    m, n, k = dims
    v = variant_for_shape(m, n, k, None, None, "fma", None, None, "none", True)
    layout = _abft_layout(m, n, k, v)
    assert (layout[6], layout[7]) == (nt, grid)


def test_a_split_product_gets_the_tolerance_of_its_longest_slice() -> None:
    """k_S + S roundings, not K + S: split 8 at K = 4096 on `wide64` gives 520, and the
    tolerance shrinks by that ratio in its float32 part; the float64 parts are unchanged."""
    from safemon.kernels.abft import abft_tolerances

    v = make_variant(None, None, "fma", "wide64", 8)
    assert (v.slices(4096), slice_k_max(4096, 8, 8)) == (8, 512)
    assert slice_k_max(100, 8, 3) == 40 and slice_k_max(100, 8, 1) == 100  # 5, 5, 3 k-tiles
    rng = np.random.default_rng(9)
    a = rng.standard_normal((8, 4096)).astype(np.float32)
    b = rng.standard_normal((4096, 256)).astype(np.float32)
    zero_c = (np.zeros((1, 256)), np.zeros((8, 2)))
    loose = abft_tolerances(a, b, *zero_c, v.tile, 8)
    tight = abft_tolerances(a, b, *zero_c, v.tile, 8, 512)
    for lo, ti in zip(loose, tight, strict=True):
        assert (ti < lo).all()
        assert np.allclose(ti / lo, gamma(520.0, U32_F) / gamma(4104.0, U32_F), rtol=0.01)


def test_abft_check_refuses_a_k_slice_outside_k() -> None:
    a = np.ones((4, 3), np.float32)
    b = np.ones((3, 5), np.float32)
    with pytest.raises(ValueError, match="k_slice"):
        abft_check(a, b, a @ b, SMALL, 1, k_slice=4)
