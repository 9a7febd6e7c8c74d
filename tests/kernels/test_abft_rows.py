"""The row-only ABFT check ("rows", safemon.kernels.abft) on the CPU: its rule, what it gives
up against the full check, its variants and config, and the weight's kept vectors
(`ProtectedArray.derived`)."""

from __future__ import annotations

import numpy as np
import pytest

from safemon.config import VariantConfig
from safemon.ecc import ProtectedArray
from safemon.errors import UncorrectableError
from safemon.kernels.abft import _abft_layout, abft_campaign_reference, abft_check, abft_passes
from safemon.kernels.api import protected_matmul
from safemon.kernels.catalog import TILES, abft_kind_of, make_variant, variant_from_name
from safemon.kernels.reference import reference_matmul

SMALL = TILES["small"]


def _product(seed: int, m: int = 80, n: int = 80, k: int = 80) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    c, _ = reference_matmul(a, b, make_variant(None, None, "fma", "small"))
    return a, b, c


def test_rows_checks_the_row_rule_and_never_fails_a_column() -> None:
    """"rows" reports no column residual (0, tolerance +inf) and the same row residuals and
    tolerances as "full"."""
    a, b, c = _product(1)
    full, rows = abft_check(a, b, c, SMALL), abft_check(a, b, c, SMALL, kind="rows")
    assert full.ok and rows.ok
    assert (rows.col_residual == 0).all() and np.isinf(rows.col_tol).all()
    assert np.array_equal(rows.row_residual, full.row_residual)
    assert np.array_equal(rows.row_tol, full.row_tol)


@pytest.mark.parametrize("bit", [30, 29, 27, 24])
def test_rows_catches_an_exponent_flip_in_its_tile(bit: int) -> None:
    """One element's exponent flipped (the size of error ABFT exists for): the row rule alone
    names its tile, as the full check does."""
    a, b, c = _product(2)
    bad = c.copy()
    bad.view(np.uint32)[37, 50] ^= np.uint32(1 << bit)
    tile = (37 // SMALL.bm) * SMALL.grid(80, 80)[0] + 50 // SMALL.bn
    assert abft_check(a, b, bad, SMALL, kind="rows").failed_tiles == (tile,)
    assert abft_check(a, b, bad, SMALL).failed_tiles == (tile,)


@pytest.mark.parametrize("value", [np.inf, -np.inf, np.nan])
def test_rows_fails_a_non_finite_c(value: float) -> None:
    a, b, c = _product(3)
    bad = c.copy()
    bad[5, 6] = value
    assert not abft_check(a, b, bad, SMALL, kind="rows").ok


def test_errors_cancelling_in_a_tile_row_pass_rows_and_fail_full() -> None:
    """What "rows" gives up (docs/RMT.md): +δ and −δ in two columns of one tile row leave the
    row sum unchanged, so the row rule passes them; each column sum sees its δ."""
    a, b, c = _product(4)
    bad = c.copy()
    bad[3, 1] += np.float32(100.0)
    bad[3, 2] -= np.float32(100.0)
    assert abft_check(a, b, bad, SMALL, kind="rows").ok
    assert abft_check(a, b, bad, SMALL).failed_tiles == (0,)


def test_rows_passes_clean_products_and_the_host_check_stays_full() -> None:
    """On clean products "rows" passes (its rule is the full check's row rule); the daemon's
    host check (abft_passes) applies the full rule whatever the variant's kind."""
    rng = np.random.default_rng(5)
    for _ in range(20):
        m, n, k = (int(x) for x in rng.integers(1, 90, 3))
        a, b, c = _product(int(rng.integers(1 << 30)), m, n, k)
        assert abft_check(a, b, c, SMALL, kind="rows").ok
        assert abft_passes(a, b, c, make_variant(None, None, "fma", "small", abft="rows"))
    a, b, c = _product(6)
    bad = c.copy()
    bad[3, 1] += np.float32(100.0)
    bad[3, 2] -= np.float32(100.0)
    assert not abft_passes(a, b, bad, make_variant(None, None, "fma", "small", abft="rows"))
    assert not abft_passes(a, b, bad, make_variant(None, None, "fma", "small", abft=True))
    assert not abft_passes(a, b, bad, make_variant(None, None, "fma", "small"))  # none: full


def test_campaign_reference_of_rows_never_fails_a_column() -> None:
    """The injection build's model (mmm.cu `abft_verdict`) reads +inf column tolerances."""
    a, b, c = _product(7)
    gx, gy = SMALL.grid(80, 80)
    ref = abft_campaign_reference(a, b, c, SMALL, "rows")
    full = abft_campaign_reference(a, b, c, SMALL)
    cols = gy * 80
    assert np.isinf(ref[cols:2 * cols]).all() and (ref[:cols] == 0).all()
    assert np.array_equal(ref[2 * cols:], full[2 * cols:])
    assert ref.size == 2 * cols + 2 * 80 * gx


def test_abft_check_refuses_an_unknown_kind() -> None:
    a, b, c = _product(8)
    with pytest.raises(ValueError, match="kind"):
        abft_check(a, b, c, SMALL, kind="cols")


def test_rows_layout_has_no_a_vectors_no_column_products_and_no_b_room_when_given() -> None:
    """The work buffer of "rows": B's vectors and the row products only; with a weight's
    vectors given, the row products alone."""
    m, n, k = 64, 4096, 4096
    full = _abft_layout(m, n, k, make_variant(None, None, "fma", "wide64", 8, abft=True))
    v = make_variant(None, None, "fma", "wide64", 8, abft="rows")
    rows, given = _abft_layout(m, n, k, v), _abft_layout(m, n, k, v, True)
    gx = TILES["wide64"].grid(m, n)[0]
    assert rows[4] == 0 and rows[10][:2] == (0, 0) and rows[10][4] == 0
    assert rows[10][2:4] == (gx * k, gx * k)
    assert given[10][:5] == (0, 0, 0, 0, 0) and given[10][5] == rows[10][5] == full[10][5]


def test_variants_name_parse_and_serialise_the_kind() -> None:
    v = make_variant("ones", "M", "fma", "wide64", 8, abft="rows")
    assert (v.abft, v.abft_kind) == (True, "rows")
    assert v.name == "ones/M/fma/wide64/split8/abft-rows"
    assert variant_from_name(v.name) == v
    assert v.as_dict()["abft"] == "rows"
    assert make_variant("ones", "M", "fma", "small", abft=True).as_dict()["abft"] is True
    assert "abft" not in make_variant("ones", "M", "fma", "small").as_dict()
    assert [abft_kind_of(x) for x in (False, True, "none", "full", "rows")] == [
        "none", "full", "none", "full", "rows"]
    for bad in ("cols", 1, None):
        with pytest.raises(ValueError, match="abft"):
            abft_kind_of(bad)  # type: ignore[arg-type]


def test_channel_config_takes_rows_and_refuses_other_strings() -> None:
    assert VariantConfig(abft="rows").to_variant(64, 4096, 4096).abft_kind == "rows"
    assert VariantConfig(abft=True).to_variant(64, 4096, 4096).abft_kind == "full"
    with pytest.raises(ValueError):
        VariantConfig(abft="cols")  # type: ignore[arg-type]


def test_numpy_backend_runs_the_row_check_and_returns_the_plain_product(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A clean call returns the plain product; a reference C with an exponent flip (the
    reference patched) is refused by the row check, naming the tile."""
    from safemon.errors import KernelCheckError
    from safemon.kernels import reference

    a, b, _ = _product(9, 40, 70, 30)
    r = protected_matmul(a, b, checksum="ones", level="M", abft="rows", backend="numpy")
    plain = protected_matmul(a, b, checksum="ones", level="M", backend="numpy")
    assert r.variant.abft_kind == "rows"
    assert r.c.tobytes() == plain.c.tobytes() and r.es.tobytes() == plain.es.tobytes()
    real = reference.reference_matmul

    def flipped(*args: object, **kw: object) -> tuple[np.ndarray, np.ndarray]:
        c, es = real(*args, **kw)  # type: ignore[arg-type]
        c = c.copy()
        c.view(np.uint32)[33, 40] ^= np.uint32(1 << 29)
        return c, es

    monkeypatch.setattr(reference, "reference_matmul", flipped)
    with pytest.raises(KernelCheckError, match="abft") as err:
        protected_matmul(a, b, checksum="ones", level="M", abft="rows", backend="numpy")
    t = r.variant.tile
    assert f"tile {(33 // t.bm) * t.grid(40, 70)[0] + 40 // t.bn};" in str(err.value)


def test_protected_array_keeps_a_derived_value_until_update() -> None:
    """`derived` makes a value once from the checked data, corrects a flipped bit first, and
    `update` drops it."""
    data = np.arange(12, dtype=np.float32).reshape(3, 4)
    pa = ProtectedArray.from_host(data, name="w", backend="numpy")
    pa._data.view(np.uint32)[1, 2] ^= np.uint32(1 << 7)  # a single flip: corrected first
    calls: list[float] = []

    def make(stored: np.ndarray) -> float:
        calls.append(float(stored.sum()))
        return float(stored.sum())

    assert pa.derived("sum", make) == float(data.sum())
    assert pa.derived("sum", make) == float(data.sum())
    assert calls == [float(data.sum())] and pa.corrected_total == 1
    pa.update(data * 2)
    assert pa.derived("sum", make) == float(2 * data.sum()) and len(calls) == 2


def test_protected_array_keeps_nothing_from_an_uncorrectable_buffer() -> None:
    data = np.ones((4, 4), dtype=np.float32)
    pa = ProtectedArray.from_host(data, name="w", backend="numpy")
    pa._data.view(np.uint32)[0, 0] ^= np.uint32(0b11)  # two flips in one word
    with pytest.raises(UncorrectableError):
        pa.derived("sum", lambda stored: float(stored.sum()))
    pa.update(data)
    assert pa.derived("sum", lambda stored: float(stored.sum())) == 16.0
