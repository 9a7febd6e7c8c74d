"""`safemon.dims`: the one matrix-size type and the one parser of its text forms."""

from __future__ import annotations

import pytest

from safemon.dims import Dims, as_dims, parse_dims, parse_dims_list, parse_key


def test_dims_parsing() -> None:
    assert parse_dims("80") == Dims(80, 80, 80)
    assert parse_dims("18x230400x64") == Dims(18, 230400, 64)
    assert parse_dims("L2") == Dims(8, 900, 8)
    assert parse_dims(" 4 X 5 × 6 ") == Dims(4, 5, 6)
    assert len(parse_dims_list("seed-dc")) == 6
    for bad in ("", "0", "3x4", "axbxc", "1x0x3"):
        with pytest.raises(ValueError):
            parse_dims(bad)


def test_the_canonical_form_is_exactly_what_key_writes() -> None:
    d = Dims(16, 8, 32)
    assert parse_key(d.key) == d
    for bad in ("16X8X32", "16x8x32 ", "016x8x32", "0x8x32", "80", "16x8", "-1x8x32", "L1"):
        with pytest.raises(ValueError, match="is not 'MxNxK' with positive integers"):
            parse_key(bad)


def test_dims_is_the_tuple_m_n_k_and_refuses_non_positive_sizes() -> None:
    d = Dims(2, 3, 4)
    assert d == (2, 3, 4) and d[2] == 4 and (d.m, d.n, d.k) == (2, 3, 4)
    m, n, k = d
    assert (m, n, k) == (2, 3, 4) and d.flops == 48 and d.input_bits == 32 * (8 + 12)
    assert sorted([Dims(3, 1, 1), d]) == [d, Dims(3, 1, 1)]
    with pytest.raises(ValueError, match="positive"):
        Dims(2, 0, 4)


def test_as_dims_takes_the_canonical_string_or_three_positive_ints() -> None:
    assert as_dims("2x3x4") == as_dims((2, 3, 4)) == as_dims([2, 3, 4]) == Dims(2, 3, 4)
    for bad in ((2, 3), (2, 3, 0), (2, True, 4), (2.0, 3, 4)):
        with pytest.raises(ValueError, match="three positive ints"):
            as_dims(bad)  # type: ignore[arg-type]
