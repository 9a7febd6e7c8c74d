"""Level T's 16-wide k-tiles (`catalog.t_level_variant`): which variants run them, and that they
never change C.

C depends on how K is cut into slices and on nothing else of the tiling, so the rule must
keep the K-slices of the automatic choice at every shape, or stay on the catalog tile. ES of
level T folds once per k-tile: the reference and the literal model (`slow_model`) must agree
on the 16-wide tiles too.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from safemon.kernels.catalog import (
    T_LEVEL_BUILDS,
    TILE_BUILDS,
    TILES,
    WIDE64_READS_AT,
    auto_tile_builds,
    make_variant,
    slice_bounds,
    t_level_tile,
    t_level_variant,
    variant_for_shape,
)
from safemon.kernels.reference import reference_matmul
from tests.kernels.slow_model import slow_matmul


def _bounds(v, k: int) -> list[tuple[int, int]]:
    return slice_bounds(k, v.tile.bk, v.slices(k))


@pytest.mark.parametrize(("dims", "tile", "a_transposed"), [
    ((4096, 4096, 4096), "large_k16", True),
    ((1024, 1024, 1024), "large_k16", True),
    ((128, 4096, 1000), "large_k16", True),
    ((64, 4096, 4096), "wide64_k16", True),     # wide64 reading Aᵀ
    ((256, 1024, 4096), "wide64_k16", True),
    ((48, 4096, 1024), "wide64_k16", False),    # wide64 reading A (M not a multiple of 64)
    ((64, 4096, 1032), "wide64", True),         # 16-wide k-tiles cannot cut K into 8 slices of 136
    ((80, 80, 80), "small", False),             # no 16-wide k-tile for the other tiles
    ((1, 4096, 4096), "skinny", False),
])
def test_level_t_runs_16_wide_k_tiles_where_they_keep_the_slices(
        dims: tuple[int, int, int], tile: str, a_transposed: bool) -> None:
    m, n, k = dims
    plain = variant_for_shape(m, n, k, None, None, "fma", None, None)
    for checksum in ("ones", "twos", "crc32c", "fletcher"):
        v = variant_for_shape(m, n, k, checksum, "T", "fma", None, None)
        assert v.tile.name == tile
        assert v.reads_a_transposed is a_transposed
        assert (v.tile.bm, v.tile.bn, v.tile.tm, v.tile.tn) == (
            plain.tile.bm, plain.tile.bn, plain.tile.tm, plain.tile.tn)
        assert v.kernel_schedule == plain.kernel_schedule
        assert _bounds(v, k) == _bounds(plain, k)


@pytest.mark.parametrize(("checksum", "level", "rmt", "tile"), [
    ("ones", "M", "none", "large"),
    ("ones", "E", "none", "large"),
    ("ones", "F", "none", "large"),
    ("ones", "I", "none", "large"),
    ("ones_fletcher", "I", "none", "large"),
    ("ones", "T", "warp", "half"),              # intra-warp RMT keeps its own tile
    ("ones", "T", "block", "large"),
    (None, None, "none", "large"),
])
def test_other_levels_and_rmt_keep_their_tile(checksum: str | None, level: str | None, rmt: str,
                                              tile: str) -> None:
    assert variant_for_shape(4096, 4096, 4096, checksum, level, "fma", None, None,
                             rmt).tile.name == tile


def test_a_named_tile_is_never_replaced() -> None:
    v = variant_for_shape(4096, 4096, 4096, "ones", "T", "fma", "large", None)
    assert v.tile == TILES["large"]
    assert t_level_variant(make_variant("ones", "M", "fma", "large"), 4096).tile == TILES["large"]


def test_the_reads_of_a_follow_the_base_in_either_order_of_calls() -> None:
    """`wide64` and `WIDE64_READS_AT` compare equal; the T-level tile of each must keep its
    own copies whichever shape was asked first (a cache keyed on equal tiles would not)."""
    for order in ([(64, 4096, 4096), (48, 4096, 4096)], [(48, 4096, 4096), (64, 4096, 4096)]):
        variant_for_shape.cache_clear()
        got = {dims: variant_for_shape(*dims, "ones", "T", "fma", None, None).reads_a_transposed
               for dims in order}
        assert got == {(64, 4096, 4096): True, (48, 4096, 4096): False}


def test_the_builds_of_level_t() -> None:
    assert [t.describe() for t in T_LEVEL_BUILDS] == [
        "large_k16:128x128x16/8x8", "wide64_k16:64x128x16/4x8", "wide64_k16:64x128x16/4x8"]
    assert [t.a_kmajor for t in T_LEVEL_BUILDS] == [True, False, True]
    assert t_level_tile(TILES["small"]) is TILES["small"]
    assert set(T_LEVEL_BUILDS) <= set(TILE_BUILDS)
    assert auto_tile_builds("T") == TILE_BUILDS
    others = auto_tile_builds("M")
    assert WIDE64_READS_AT in others and not any(t.bk == 16 and t.name.endswith("_k16")
                                                 for t in others)
    assert auto_tile_builds(None) == others


@settings(max_examples=300, deadline=None)
@given(m=st.integers(1, 600), n=st.integers(1, 6000), k=st.integers(1, 6000),
       checksum=st.sampled_from(["ones", "twos", "xor", "crc32c", "fletcher"]))
def test_level_t_keeps_the_k_slices_of_every_variant(m: int, n: int, k: int, checksum: str) -> None:
    """Whatever the shape, level T cuts K exactly as the unprotected call does (so C is the
    same), on the same block tile."""
    plain = variant_for_shape(m, n, k, None, None, "fma", None, None)
    v = variant_for_shape(m, n, k, checksum, "T", "fma", None, None)
    assert _bounds(v, k) == _bounds(plain, k)
    assert (v.tile.bm, v.tile.bn, v.tile.tm, v.tile.tn) == (
        plain.tile.bm, plain.tile.bn, plain.tile.tm, plain.tile.tn)
    assert v.tile.bk in (plain.tile.bk, 16)


@pytest.mark.parametrize("tile", T_LEVEL_BUILDS, ids=lambda t: f"{t.name}-at{int(t.a_kmajor)}")
@pytest.mark.parametrize("checksum", ["ones", "crc32c", "fletcher"])
def test_reference_on_16_wide_k_tiles_matches_the_literal_model(tile, checksum: str) -> None:
    """K = 61 in two slices pads the last 16-wide k-tile; the 8-wide tile cuts the same slices
    (32 + 29), so C is the same and only the level-T words differ."""
    rng = np.random.default_rng(7)
    a = rng.standard_normal((70, 61)).astype(np.float32)
    b = rng.standard_normal((61, 130)).astype(np.float32)
    v = make_variant(checksum, "T", "exact", tile, split=2)
    c, es = reference_matmul(a, b, v)
    c_slow, es_slow = slow_matmul(a, b, v)
    assert c.tobytes() == c_slow.tobytes()
    assert es.tobytes() == es_slow.tobytes()
    eight = make_variant(checksum, "T", "exact", replace(tile, bk=8), split=2)
    assert _bounds(eight, 61) == _bounds(v, 61) == [(0, 32), (32, 61)]
    c8, es8 = reference_matmul(a, b, eight)
    assert c8.tobytes() == c.tobytes()
    assert es8.shape == es.shape and es8.tobytes() != es.tobytes()


def test_names_of_level_t_variants_parse_back() -> None:
    """Evidence stores variants by name (`safemon bench` rows, `safemon select`): every name
    `tile=None` gives must parse back to the same variant; channels still name catalog tiles
    only."""
    from safemon.config import VariantConfig
    from safemon.kernels.catalog import NAMED_TILES, variant_from_name

    for dims in [(4096, 4096, 4096), (1024, 1024, 1024), (64, 4096, 4096), (48, 4096, 1024)]:
        v = variant_for_shape(*dims, "ones", "T", "fma", None, None)
        assert v.tile.name.endswith("_k16")
        assert variant_from_name(v.name) == v
    assert make_variant("twos", "T", "fma", "wide64_k16").tile == NAMED_TILES["wide64_k16"]
    assert set(NAMED_TILES) == set(TILES) | {"large_k16", "wide64_k16"}
    with pytest.raises(ValueError, match="unknown tile"):
        VariantConfig(tile="large_k16")


def test_campaigns_on_the_automatic_tile_run_what_the_library_runs() -> None:
    """`safemon dc --tile auto` campaigns level T on the 16-wide k-tiles where the library
    and `safemon bench` run it, so that select pairs their rows by name; a named tile stays."""
    from safemon.dims import as_dims
    from safemon.evidence.campaign import campaign_variants

    dims = as_dims("128x4096x1000")
    names = [v.name for v in campaign_variants("ones/T,ones/M,ones/T/rmt-block", "fma", "auto",
                                               dims)]
    assert names == ["ones/T/fma/large_k16", "ones/M/fma/large", "ones/T/fma/large/rmt-block"]
    assert [v.name for v in campaign_variants("ones/T", "fma", "large", dims)] == ["ones/T/fma/large"]
    assert [v.name for v in campaign_variants("ones/T", "exact", "auto", as_dims("80x80x80"))] == [
        "ones/T/exact/small"]
