"""`protected_matmul` and `matmul`: validate inputs, pick a backend, run the variant.

Both backends (NumPy reference, CuPy kernels) return bit-identical C and ES for the same
variant; the variant is recorded with every result so results can be compared safely.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from safemon.errors import BackendUnavailableError, InvalidInputError
from safemon.kernels.catalog import TileConfig, Variant, auto_tile, make_variant
from safemon.kernels.compiler import cuda_available

__all__ = ["BACKENDS", "MatmulResult", "matmul", "protected_matmul", "resolve_backend", "run_variant"]

BACKENDS = ("auto", "numpy", "cupy")


@dataclass(frozen=True)
class MatmulResult:
    """The outcome of one protected MMM.

    Attributes:
        c: (M, N) float32 product, on the backend's device (NumPy array or CuPy array).
        es: (threads, variant.words) uint32 execution-signature array, same device as `c`.
        variant: the exact kernel variant that produced them.
        backend: "numpy" or "cupy".
    """

    c: Any
    es: Any
    variant: Variant
    backend: str


def resolve_backend(backend: str) -> str:
    """"auto" → "cupy" when a CUDA device is usable, else "numpy".

    Raises:
        ValueError: unknown backend name.
        BackendUnavailableError: "cupy" asked for without CuPy or a device.
    """
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; known: {', '.join(BACKENDS)}")
    if backend == "auto":
        return "cupy" if cuda_available() else "numpy"
    if backend == "cupy" and not cuda_available():
        from safemon.kernels.compiler import import_cupy

        import_cupy()  # raises BackendUnavailableError with the reason
        raise BackendUnavailableError("the cupy backend is not usable here")
    return backend


def _module_of(x: Any) -> str:
    mod = type(x).__module__.split(".")[0]
    return "cupy" if mod == "cupy" else "numpy"


def _validate(name: str, x: Any, backend: str) -> None:
    kind = _module_of(x)
    if not isinstance(x, np.ndarray) and kind != "cupy":
        raise TypeError(f"{name} must be a NumPy or CuPy array, not {type(x).__name__}")
    if kind == "cupy" and backend == "numpy":
        raise TypeError(f"{name} is a CuPy array but the backend is numpy; pass a NumPy array")
    if x.dtype != np.float32:
        raise TypeError(f"{name} must be float32, not {x.dtype} (safemon never converts silently)")
    if x.ndim != 2:
        raise InvalidInputError(f"{name} must be 2-D, not {x.ndim}-D with shape {tuple(x.shape)}")
    if x.shape[0] == 0 or x.shape[1] == 0:
        raise InvalidInputError(f"{name} must not be empty, got shape {tuple(x.shape)}")
    if not x.flags.c_contiguous:
        raise InvalidInputError(f"{name} must be C-contiguous (row-major); use ascontiguousarray")
    finite = bool(x.size == 0 or (np.isfinite(x).all() if kind == "numpy" else _cupy_all_finite(x)))
    if not finite:
        raise InvalidInputError(
            f"{name} contains NaN or infinity; non-finite inputs are rejected because NaN "
            "payloads differ between CPU and GPU"
        )


def _cupy_all_finite(x: Any) -> bool:
    from safemon.kernels.gpu import all_finite

    return all_finite(x)


def _unwrap_protected(b: Any) -> Any:
    """ECC-protected weights are checked (and corrected) right before use."""
    try:
        from safemon.ecc import ProtectedArray
    except ImportError:  # pragma: no cover - the ecc package ships with safemon
        return b
    if isinstance(b, ProtectedArray):
        return b.verified()
    return b


def run_variant(a: Any, b: Any, variant: Variant, backend: str = "auto") -> MatmulResult:
    """Validate and run an explicit `variant` (the entry point for channels and campaigns)."""
    backend = resolve_backend(backend)
    b = _unwrap_protected(b)
    _validate("a", a, backend)
    _validate("b", b, backend)
    if a.shape[1] != b.shape[0]:
        raise InvalidInputError(
            f"inner dimensions differ: a is {tuple(a.shape)}, b is {tuple(b.shape)} (need a K×N b for an M×K a)"
        )
    if backend == "cupy":
        from safemon.kernels.gpu import gpu_matmul

        c, es = gpu_matmul(a, b, variant)
    else:
        from safemon.kernels.reference import reference_matmul

        c, es = reference_matmul(a, b, variant)
    return MatmulResult(c=c, es=es, variant=variant, backend=backend)


def _tile_for(a: Any, b: Any, tile: TileConfig | str | None) -> TileConfig | str:
    if tile is not None:
        return tile
    m = a.shape[0] if getattr(a, "ndim", 0) == 2 else 1
    n = b.shape[1] if getattr(b, "ndim", 0) == 2 else 1
    return auto_tile(m, n)


def protected_matmul(
    a: Any,
    b: Any,
    *,
    checksum: str = "ones",
    level: str = "I",
    mode: str = "exact",
    backend: str = "auto",
    tile: TileConfig | str | None = None,
) -> MatmulResult:
    """C = A·B with per-thread execution signatures.

    Args:
        a: (M, K) float32, C-contiguous, finite; NumPy or CuPy.
        b: (K, N) float32 likewise, or a `safemon.ecc.ProtectedArray` (verified before use).
        checksum: "xor" | "twos" | "ones" | "fletcher" | "crc32c", or a combination "X_Y"
            (X folded at level I, Y at level M).
        level: "I", "M" or "E" ("I" or "I+M" for a combination).
        mode: "exact" (no FMA contraction) or "fma".
        backend: "auto" (CuPy when a CUDA device is usable, else NumPy), "numpy" or "cupy".
        tile: a tile name ("small", "large", "wide"), a `TileConfig`, or None to pick by shape.

    Returns:
        `MatmulResult` with c (M, N) float32, es (threads, words) uint32, the variant, the backend.

    Raises:
        TypeError: wrong array type or dtype.
        InvalidInputError (a ValueError): wrong rank, empty, non-contiguous, mismatched K,
            non-finite values.
        ValueError: unknown checksum, level, mode, tile or backend.
        BackendUnavailableError: backend="cupy" without a usable CUDA device.
        UncorrectableError: `b` is a ProtectedArray with an uncorrectable ECC error.
    """
    variant = make_variant(checksum, level, mode, _tile_for(a, b, tile))
    return run_variant(a, b, variant, backend)


def matmul(
    a: Any,
    b: Any,
    *,
    mode: str = "exact",
    backend: str = "auto",
    tile: TileConfig | str | None = None,
) -> Any:
    """The unprotected kernel with the same tiling: returns C only (the overhead baseline)."""
    variant = make_variant(None, None, mode, _tile_for(a, b, tile))
    return run_variant(a, b, variant, backend).c
