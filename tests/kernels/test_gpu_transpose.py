"""transpose.cu (run on the device machine): Aᵀ for the tiles that read it, word for word."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

SHAPES = [(1, 1), (1, 4097), (4097, 3), (33, 65), (128, 128), (130, 1500), (1000, 31)]


def _words(rows: int, cols: int) -> np.ndarray:
    """Random float32 words with NaN payloads, infinities, signed zeros and subnormals."""
    rng = np.random.default_rng(rows * 7919 + cols)
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    special = np.array([0x7FC00001, 0xFF800000, 0x80000000, 0x00000001, 0x7F800000],
                       dtype=np.uint32).view(np.float32)
    flat = x.ravel()
    flat[: min(flat.size, special.size)] = special[: flat.size]
    return x


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_transpose_moves_every_word_unchanged(shape: tuple[int, int]) -> None:
    import cupy as cp

    from safemon.kernels.gpu import transpose

    x = _words(*shape)
    got = transpose(cp.asarray(x))
    assert got.shape == (shape[1], shape[0]) and got.flags.c_contiguous
    assert cp.asnumpy(got).view(np.uint32).tobytes() == np.ascontiguousarray(x.T).view(np.uint32).tobytes()
    out = cp.full((shape[1], shape[0]), -1.0, dtype=cp.float32)
    assert transpose(cp.asarray(x), out) is out
    assert cp.asnumpy(out).tobytes() == cp.asnumpy(got).tobytes()


def test_transpose_refuses_what_it_cannot_do() -> None:
    import cupy as cp

    from safemon.kernels.gpu import transpose

    x = cp.zeros((4, 6), dtype=cp.float32)
    with pytest.raises(ValueError, match="C-contiguous array of 4-byte words"):
        transpose(x[:, ::2])
    with pytest.raises(ValueError, match="C-contiguous array of 4-byte words"):
        transpose(cp.zeros((4, 6), dtype=cp.float64))
    with pytest.raises(ValueError, match=r"shape \(6, 4\)"):
        transpose(x, cp.zeros((4, 6), dtype=cp.float32))


def test_large_product_reads_a_transposed_and_equals_the_reference() -> None:
    """The automatic tile of a big square product is `large`, which reads Aᵀ: C and ES equal
    the reference (whose A is never transposed) through the public API, twice."""
    import cupy as cp

    import safemon
    from safemon.kernels.reference import reference_matmul

    rng = np.random.default_rng(5)
    a = rng.standard_normal((772, 300)).astype(np.float32)
    b = rng.standard_normal((300, 780)).astype(np.float32)
    for _ in range(2):
        r = safemon.protected_matmul(cp.asarray(a), cp.asarray(b), checksum="ones", level="T",
                                     mode="fma")
        assert r.variant.tile.name == "large" and r.variant.reads_a_transposed
        c_ref, es_ref = reference_matmul(a, b, r.variant)
        assert cp.asnumpy(r.c).tobytes() == c_ref.tobytes()
        assert np.array_equal(cp.asnumpy(r.es), es_ref)
