"""Golden patterns: deterministic generation and bit-exact checks (the store: tests/golden_store)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from safemon.kernels.api import run_variant
from safemon.kernels.catalog import make_variant
from safemon.patterns import golden
from safemon.patterns.golden import (
    FAMILIES,
    generate_inputs,
    make_pattern,
)

V_SMALL = make_variant("ones", "I", "exact", "small")


def _bits(x: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    return np.ascontiguousarray(x).view(np.uint32)


def _flip(x: np.ndarray[Any, Any], flat_index: int, bit: int) -> np.ndarray[Any, Any]:
    out = np.array(x, copy=True)
    out.reshape(-1).view(np.uint32)[flat_index] ^= np.uint32(1 << bit)
    return out


# ---------------------------------------------------------------------------- generator


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("dims", [(16, 16, 16), (5, 3, 7), (1, 1, 1), (33, 40, 64)])
def test_generation_is_deterministic_finite_float32(
    family: str, dims: tuple[int, int, int]
) -> None:
    """Same family and dims give bit-identical, finite, C-contiguous float32 inputs."""
    a1, b1 = generate_inputs(family, dims)
    a2, b2 = generate_inputs(family, "x".join(map(str, dims)))
    m, n, k = dims
    assert a1.shape == (m, k) and b1.shape == (k, n)
    assert a1.dtype == np.float32 and b1.dtype == np.float32
    assert a1.flags.c_contiguous and b1.flags.c_contiguous
    assert np.isfinite(a1).all() and np.isfinite(b1).all()
    assert np.array_equal(_bits(a1), _bits(a2)) and np.array_equal(_bits(b1), _bits(b2))


def test_families_differ() -> None:
    """Each family yields different inputs for the same shape."""
    seen = {
        family: _bits(generate_inputs(family, (16, 16, 16))[0]).tobytes() for family in FAMILIES
    }
    assert len(set(seen.values())) == len(FAMILIES)


def test_walking_ones_cover_every_mantissa_and_exponent_bit() -> None:
    """Every bit 0..30 is set in some A element and clear in another (both operands)."""
    for x in generate_inputs("walking", (16, 16, 16)):
        bits = _bits(x).reshape(-1)
        for bit in range(31):
            set_ = (bits >> np.uint32(bit)) & np.uint32(1)
            assert set_.any() and not set_.all(), bit
        # one-hot exponent fields: each exponent bit alone, mantissa zero
        exps = {int(w >> 23) & 0xFF for w in bits if (int(w) & 0x7FFFFF) == 0}
        assert {1 << e for e in range(8)} <= exps


def test_checkerboard_neighbours_are_complements() -> None:
    """Horizontally adjacent elements are bitwise complements, so every lane toggles."""
    a, b = generate_inputs("checkerboard", (8, 8, 8))
    for x in (a, b):
        w = _bits(x)
        assert np.array_equal(w[:, 1:], ~w[:, :-1])
        assert {int(v) for v in w.reshape(-1)} <= {0x55555555, 0xAAAAAAAA, 0x33333333, 0xCCCCCCCC}


def test_extremes_contain_subnormals_zeros_and_large_exponents() -> None:
    """Inputs hold ±0, subnormals, FLT_MAX-scale values; C has subnormal results, no inf."""
    a, b = generate_inputs("extremes", (16, 16, 16))
    both = np.concatenate([a.reshape(-1), b.reshape(-1)])
    w = _bits(both)
    assert (w == 0).any() and (w == 0x80000000).any()
    assert ((np.abs(both) < np.finfo(np.float32).tiny) & (both != 0)).any()
    assert (np.abs(both) >= 2.0**100).any()
    assert (w == 0x7F7FFFFF).any()
    c = make_pattern("extremes", (16, 16, 16), V_SMALL).expected_c
    assert np.isfinite(c).all()
    assert ((np.abs(c) < np.finfo(np.float32).tiny) & (c != 0)).any()
    assert (np.abs(c) > 1e30).any()


def test_overflowing_inputs_are_refused() -> None:
    """The overflow guard is live: inputs whose product could overflow raise."""
    big = np.full((2, 2), 3e38, dtype=np.float32)
    with pytest.raises(AssertionError, match="overflow"):
        golden._check_no_overflow(big, big, "test")


def test_unknown_family_and_bad_dims_raise() -> None:
    """Unknown families and malformed dims are refused, not guessed."""
    with pytest.raises(ValueError, match="unknown golden pattern family"):
        generate_inputs("zeros", (2, 2, 2))
    with pytest.raises(ValueError, match="MxNxK"):
        generate_inputs("random", "2x2")
    with pytest.raises(ValueError, match="positive"):
        generate_inputs("random", (2, 0, 2))


# ---------------------------------------------------------------------------- check


@pytest.mark.parametrize("family", FAMILIES)
def test_check_accepts_reference_result_and_rejects_one_bit_flips(family: str) -> None:
    """check() passes the reference's own C/ES and fails on any single flipped bit of C or ES."""
    variant = make_variant("fletcher", "M", "fma", "small")
    p = make_pattern(family, (16, 16, 16), variant)
    res = run_variant(p.a, p.b, variant, backend="numpy")
    assert p.check(res.c, res.es)
    rng = np.random.default_rng(7)
    for bit in (0, 22, 23, 30, 31):
        i = int(rng.integers(p.expected_c.size))
        assert not p.check(_flip(res.c, i, bit), res.es), (family, "c", bit)
    for bit in (0, 15, 31):
        i = int(rng.integers(p.expected_es.size))
        assert not p.check(res.c, _flip(res.es, i, bit)), (family, "es", bit)


def test_check_distinguishes_signed_zeros() -> None:
    """+0 and -0 differ in one bit, so check() treats them as different results."""
    p = make_pattern("extremes", (3, 3, 2), V_SMALL)
    c = np.array(p.expected_c)
    zero = np.flatnonzero(c.reshape(-1) == 0)
    assert zero.size, "the small extremes pattern has zero outputs"
    assert not p.check(_flip(c, int(zero[0]), 31), p.expected_es)


def test_check_rejects_wrong_shape_dtype_and_non_arrays() -> None:
    """A wrong shape or dtype is a failed check; a non-array is a TypeError."""
    p = make_pattern("random", (16, 16, 16), V_SMALL)
    assert not p.check(p.expected_c.astype(np.float64), p.expected_es)
    assert not p.check(p.expected_c[:, :8], p.expected_es)
    assert not p.check(p.expected_c, p.expected_es.astype(np.int64))
    with pytest.raises(TypeError, match="NumPy or CuPy"):
        p.check(p.expected_c.tolist(), p.expected_es)


def test_pattern_arrays_are_read_only() -> None:
    """A consumer cannot overwrite the reference it is checked against."""
    p = make_pattern("random", (4, 4, 4), V_SMALL)
    for name in ("a", "b", "expected_c", "expected_es"):
        with pytest.raises(ValueError, match="read-only"):
            getattr(p, name)[0, 0] = 1
    assert p.dims == (4, 4, 4)
    assert p.id == "random-4x4x4"


# ---------------------------------------------------------------------------- GPU


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["exact", "fma"])
def test_gpu_result_passes_the_golden_check(mode: str) -> None:
    """The CuPy kernels reproduce every golden pattern bit for bit (CuPy arrays accepted)."""
    import cupy

    for variant in (
        make_variant("ones", "I", mode, "small"),
        make_variant("xor_fletcher", "I", mode, "small"),
    ):
        for fam in FAMILIES:
            p = make_pattern(fam, (40, 24, 20), variant)
            res = run_variant(cupy.asarray(p.a), cupy.asarray(p.b), variant, backend="cupy")
            assert p.check(res.c, res.es), (fam, variant.name)
