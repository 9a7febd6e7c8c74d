"""protected_matmul / matmul: the public contract, input validation and backend choice."""

from __future__ import annotations

import tomllib
from fnmatch import fnmatch
from pathlib import Path

import numpy as np
import pytest

import safemon
from safemon.errors import BackendUnavailableError, InvalidInputError
from safemon.kernels.catalog import (
    COMBINATIONS,
    TILES,
    Variant,
    auto_tile,
    make_variant,
    standard_variants,
)
from safemon.kernels.compiler import cuda_available

ROOT = Path(__file__).resolve().parents[2]


def _ab(m: int = 6, k: int = 5, n: int = 4) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)


def test_protected_matmul_records_variant_and_shapes() -> None:
    a, b = _ab()
    r = safemon.protected_matmul(a, b, checksum="fletcher", level="M", backend="numpy")
    assert r.backend == "numpy"
    assert r.variant == make_variant("fletcher", "M", "exact", "small")
    assert r.c.shape == (6, 4) and r.c.dtype == np.float32
    assert r.es.shape == (TILES["small"].total_threads(6, 4), 2) and r.es.dtype == np.uint32
    hash(r.variant)  # frozen and hashable


def test_combination_takes_level_i_and_records_i_plus_m() -> None:
    a, b = _ab()
    r = safemon.protected_matmul(a, b, checksum="ones_fletcher", backend="numpy")
    assert r.variant.level == "I+M" and r.es.shape[1] == 3
    with pytest.raises(ValueError, match="level must be"):
        safemon.protected_matmul(a, b, checksum="ones_fletcher", level="E", backend="numpy")


def test_unprotected_matmul_equals_protected_c() -> None:
    a, b = _ab(33, 17, 40)
    c = safemon.matmul(a, b, backend="numpy")
    r = safemon.protected_matmul(a, b, checksum="crc32c", backend="numpy")
    assert np.array_equal(c.view(np.uint32), r.c.view(np.uint32))


@pytest.mark.parametrize(
    ("a", "b", "exc", "match"),
    [
        (np.ones((2, 3), np.float64), np.ones((3, 2), np.float32), TypeError, "float32"),
        (np.ones((2, 3, 1), np.float32), np.ones((3, 2), np.float32), InvalidInputError, "2-D"),
        (np.ones((2, 3), np.float32), np.ones((4, 2), np.float32), InvalidInputError, "inner dimensions"),
        (np.ones((3, 2), np.float32).T, np.ones((3, 2), np.float32), InvalidInputError, "C-contiguous"),
        (np.array([[1.0, np.nan]], np.float32), np.ones((2, 1), np.float32), InvalidInputError, "NaN"),
        (np.array([[1.0, np.inf]], np.float32), np.ones((2, 1), np.float32), InvalidInputError, "infinity"),
        (np.ones((0, 3), np.float32), np.ones((3, 2), np.float32), InvalidInputError, "empty"),
        ([[1.0]], np.ones((1, 1), np.float32), TypeError, "NumPy or CuPy"),
    ],
)
def test_bad_input_is_rejected_with_a_clear_error(a: object, b: object, exc: type, match: str) -> None:
    with pytest.raises(exc, match=match):
        safemon.protected_matmul(a, b, backend="numpy")


def test_invalid_input_error_is_a_value_error() -> None:
    assert issubclass(InvalidInputError, ValueError)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"checksum": "md5"}, "unknown checksum"),
        ({"level": "X"}, "unknown level"),
        ({"mode": "fast"}, "unknown mode"),
        ({"tile": "huge"}, "unknown tile"),
        ({"backend": "opencl"}, "unknown backend"),
    ],
)
def test_bad_options_are_rejected(kwargs: dict[str, str], match: str) -> None:
    a, b = _ab()
    with pytest.raises(ValueError, match=match):
        safemon.protected_matmul(a, b, **kwargs)


@pytest.mark.skipif(cuda_available(), reason="checks the no-GPU path")
def test_cupy_backend_without_a_device_raises_clearly() -> None:
    a, b = _ab()
    with pytest.raises(BackendUnavailableError, match=r"cupy|CUDA"):
        safemon.protected_matmul(a, b, backend="cupy")
    assert safemon.protected_matmul(a, b, backend="auto").backend == "numpy"


def test_auto_tile_is_a_function_of_the_shape_and_the_level() -> None:
    assert auto_tile(80, 80, 80).name == "small"
    assert auto_tile(18, 230400, 64).name == "wide"
    assert auto_tile(4096, 4096, 4096).name == "large"  # a large grid that fills the GPU
    assert auto_tile(1024, 1024, 1024).name == "large"  # 64 large blocks, then split
    assert auto_tile(128, 4096, 4096).name == "large"  # 32 large blocks: the fewest
    assert auto_tile(127, 4096, 4096).name == "wide64"  # too few rows for large
    assert auto_tile(64, 4096, 4096).name == auto_tile(256, 1024, 4096).name == "wide64"
    assert auto_tile(96, 4096, 4096).name == "wide"  # three 32-row tiles: wide64 would pad
    assert auto_tile(33, 4096, 4096).name == "wide64"  # two of wide's tiles, one of wide64's
    assert auto_tile(64, 4096, 1023).name == "small"  # K too short for wide
    assert auto_tile(512, 512, 512).name == "small"  # 16 large blocks, short K
    assert auto_tile(1, 4096, 4096).name == auto_tile(8, 300, 5).name == "skinny"
    assert auto_tile(9, 40000, 3).name == "wide" and auto_tile(1, 200, 7).name == "small"
    # A fold at every MAC keeps wide on register staging, where small is as fast: small.
    for level in ("I", "I+M"):
        assert auto_tile(64, 4096, 4096, level).name == "small"
        assert auto_tile(4096, 4096, 4096, level).name == "large"
        assert auto_tile(18, 230400, 64, level).name == "wide"
    for level in ("M", "E", "F", "T"):
        assert auto_tile(64, 4096, 4096, level).name == "wide64"


def test_catalog_has_the_seed_set() -> None:
    names = {v.checksum for v in standard_variants()}
    assert {"xor", "twos", "ones", "fletcher", "crc32c"} <= names
    assert {"xor_fletcher", "ones_fletcher", "twos_fletcher"} <= names
    assert len(standard_variants()) == 28 and len(COMBINATIONS) == 20
    assert all(isinstance(v, Variant) for v in standard_variants())


def test_kernel_sources_ship_as_package_data() -> None:
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())
    globs = cfg["tool"]["setuptools"]["package-data"]["*"]
    sources = list((ROOT / "safemon").rglob("*.cu")) + list((ROOT / "safemon").rglob("*.cuh"))
    assert sources
    for path in sources:
        assert any(fnmatch(path.name, g) for g in globs), f"{path} is not package data"
    assert (ROOT / "safemon" / "py.typed").exists()
