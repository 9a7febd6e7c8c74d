"""`protected_matmul` and `matmul`: validate inputs, pick a backend, run the variant.

Both backends (NumPy reference, CuPy kernels) return bit-identical C and ES for the same
variant; the variant is recorded with every result so results can be compared safely.

On the CuPy backend the input checks (finite A and B, ECC of a protected B) are queued with
the kernel on the current stream and report through a device status block
(`safemon.kernels.checked`): a call waits on the device once, to read that block, or not at
all with `wait=False`, when the caller settles the result later with `MatmulResult.wait()`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from safemon.errors import (
    InvalidInputError,
    KernelCheckError,
    NonFiniteOperandError,
    UncorrectableError,
)
from safemon.kernels.backend import Backend, resolve_backend
from safemon.kernels.catalog import TileConfig, Variant, variant_for_shape
from safemon.kernels.checked import _OK, StatusReport, launch_checked, read_status, run_checked
from safemon.kernels.compiler import cupy_if_imported

__all__ = ["MatmulResult", "matmul", "protected_matmul", "run_variant"]


@dataclass(frozen=True)
class MatmulResult:
    """The outcome of one protected MMM.

    Attributes:
        c: (M, N) float32 product, on the backend's device (NumPy array or CuPy array).
        es: (threads, variant.words) uint32 execution-signature array, same device as `c`.
        variant: the exact kernel variant that produced them.
        backend: `Backend.NUMPY` or `Backend.CUPY` (equal to the strings "numpy" and "cupy").
        status: None once the input checks are known to have passed; a pending result
            (`wait=False` on the CuPy backend) holds the device status block here, and its
            c and es must not be used before `wait()` returns.
    """

    c: Any
    es: Any
    variant: Variant
    backend: Backend
    status: Any = field(default=None, compare=False)
    _inputs: tuple[Any, Any, int] | None = field(default=None, repr=False, compare=False)
    #: A pending result's `CheckedLaunch.keep` (device arrays its kernels read), held until
    #: the result is dropped.
    _keep: Any = field(default=None, repr=False, compare=False)

    @property
    def pending(self) -> bool:
        """True while the input checks of this result have not been read back."""
        return self.status is not None

    def wait(self, report: StatusReport | None = None) -> MatmulResult:
        """Read the status block (one host synchronisation) and return the settled result.

        `report` is this result's status block as a caller already read it
        (`queue_status_reads(...).reports()`, which waits); None reads it here. When B is a
        device `ProtectedArray` whose check found bad words, B is corrected with
        `verified()` and the product computed again. A settled result returns itself.

        Raises:
            InvalidInputError: A or B holds NaN or infinity (the message names which).
            UncorrectableError: B is a ProtectedArray with an uncorrectable ECC error.
            KernelCheckError: an in-kernel check (RMT or ABFT) failed; nothing is released.
        """
        if self.status is None:
            return self
        if report is None:
            report = read_status(self.status)
        if report.ok:
            return MatmulResult(self.c, self.es, self.variant, self.backend)
        assert self._inputs is not None  # a pending result always keeps its inputs
        a, b, ecc_retries = self._inputs
        if report.rmt_mismatch:  # set only when the input checks passed (mmm.cu)
            raise KernelCheckError("rmt", report.rmt_tile)
        if report.abft_failed and not (report.a_nonfinite or report.b_nonfinite
                                       or report.ecc_bad_words):
            raise KernelCheckError("abft", report.abft_tile)
        if report.ecc_bad_words:
            # ECC first: a flipped exponent bit can make B look non-finite.
            b.verified()  # corrects and counts, or raises UncorrectableError
            if ecc_retries < 1:
                raise UncorrectableError(b.name, [])
            return _run_cupy(a, b, self.variant, ecc_retries=ecc_retries - 1, wait=True)
        _raise_nonfinite("a" if report.a_nonfinite else "b")
        raise AssertionError("unreachable")  # pragma: no cover


def _module_of(x: Any) -> Backend:
    """The backend whose arrays `x` is of: CUPY for a CuPy array, else NUMPY."""
    mod = type(x).__module__.split(".")[0]
    return Backend.CUPY if mod == "cupy" else Backend.NUMPY


def _validate(name: str, x: Any, backend: Backend) -> None:
    kind = _module_of(x)
    if not isinstance(x, np.ndarray) and not kind.on_device:
        raise TypeError(f"{name} must be a NumPy or CuPy array, not {type(x).__name__}")
    if kind.on_device and not backend.on_device:
        raise TypeError(f"{name} is a CuPy array but the backend is numpy; pass a NumPy array")
    if x.dtype != np.float32:
        raise TypeError(f"{name} must be float32, not {x.dtype} (safemon never converts silently)")
    if x.ndim != 2:
        raise InvalidInputError(f"{name} must be 2-D, not {x.ndim}-D with shape {tuple(x.shape)}")
    if x.shape[0] == 0 or x.shape[1] == 0:
        raise InvalidInputError(f"{name} must not be empty, got shape {tuple(x.shape)}")
    if not x.flags.c_contiguous:
        raise InvalidInputError(f"{name} must be C-contiguous (row-major); use ascontiguousarray")
    # Device arrays are checked on the device, in the launch sequence (safemon.kernels.checked).
    if not kind.on_device and not np.isfinite(x).all():
        _raise_nonfinite(name)


def _device_ok(cp: Any, x: Any) -> bool:
    """True when `x` is a CuPy float32 2-D non-empty C-contiguous array: everything
    `_validate` asks of a device operand, in one cheap expression (the per-call path of
    device arrays, issue 14). False sends the caller to `_validate` for the message."""
    return (type(x) is cp.ndarray and x.dtype == np.float32 and x.ndim == 2 and x.size > 0
            and getattr(x, "_c_contiguous", False) is True)


def _raise_nonfinite(name: str) -> None:
    raise NonFiniteOperandError(
        f"{name} contains NaN or infinity (finite check of {name}); non-finite inputs are "
        "rejected because NaN payloads differ between CPU and GPU", operand=name)


_protected_type: list[type] = []


def _protected(b: Any) -> Any:
    """`b` when it is a `safemon.ecc.ProtectedArray`, else None."""
    if not _protected_type:  # imported on first use: safemon.ecc imports this package
        from safemon.ecc import ProtectedArray

        _protected_type.append(ProtectedArray)
    return b if isinstance(b, _protected_type[0]) else None


def run_variant(
    a: Any, b: Any, variant: Variant, backend: str = "auto", *, wait: bool = True
) -> MatmulResult:
    """Validate and run an explicit `variant` (the entry point for channels and campaigns).

    With `wait=False` on the CuPy backend the result is pending (see `MatmulResult.wait`);
    on the NumPy backend it is always settled.
    """
    cp = cupy_if_imported()
    if (cp is not None and (backend == "auto" or backend == "cupy") and _device_ok(cp, a)
            and _device_ok(cp, b) and a.shape[1] == b.shape[0]):
        # Both operands already on the device: CuPy is usable (it imported and found a
        # device), so "auto" and "cupy" resolve to it, and the operands pass validation.
        return _run_cupy(a, b, variant, ecc_retries=1, wait=wait)
    resolved = resolve_backend(backend)
    pb = _protected(b)
    if pb is not None and (not resolved.on_device or not pb.on_device):
        b, pb = pb.verified(), None  # host buffers are checked (and corrected) on the host
    _validate("a", a, resolved)
    if pb is None:
        _validate("b", b, resolved)
    else:
        _validate_protected(pb)
    b_shape = tuple(b.shape) if pb is None else pb.shape
    if a.shape[1] != b_shape[0]:
        raise InvalidInputError(
            f"inner dimensions differ: a is {tuple(a.shape)}, b is {b_shape} "
            "(need a K×N b for an M×K a)"
        )
    if resolved.on_device:
        return _run_cupy(a, b if pb is None else pb, variant, ecc_retries=1, wait=wait)
    from safemon.kernels.reference import reference_matmul

    c, es = reference_matmul(a, b, variant)
    if variant.abft:  # the device's check, mirrored on the host
        from safemon.kernels.abft import abft_check

        k = a.shape[1]
        check = abft_check(a, b, c, variant.tile, variant.slices(k), variant.abft_kind,
                           variant.longest_slice(k))
        if not check.ok:
            raise KernelCheckError("abft", check.failed_tiles[0])
    return MatmulResult(c=c, es=es, variant=variant, backend=resolved)


def _validate_protected(pb: Any) -> None:
    """A device ProtectedArray B: float32, 2-D, non-empty (its storage is C-contiguous)."""
    if pb.dtype != np.float32:
        raise TypeError(f"b must be float32, not {pb.dtype} (safemon never converts silently)")
    if len(pb.shape) != 2 or 0 in pb.shape:
        raise InvalidInputError(f"b must be a non-empty 2-D array, got shape {pb.shape}")


def _run_cupy(a: Any, b: Any, variant: Variant, *, ecc_retries: int, wait: bool) -> MatmulResult:
    """Queue checks and kernel on the current stream, and with `wait` read the status block
    (`checked.run_checked`: one host synchronisation); `b` may be a device ProtectedArray,
    whose ECC check then joins the sequence."""
    pb = _protected(b)
    if wait:
        launch, report = run_checked(a, b, variant, b_protected=pb)
        if report is _OK:
            return MatmulResult(launch.c, launch.es, variant, Backend.CUPY)
        return MatmulResult(launch.c, launch.es, variant, Backend.CUPY, status=launch.status,
                            _inputs=(a, b, ecc_retries)).wait(report)
    launch = launch_checked(a, b, variant, b_protected=pb)
    return MatmulResult(launch.c, launch.es, variant, Backend.CUPY, status=launch.status,
                        _inputs=(a, b, ecc_retries), _keep=launch.keep)


def _shape_of(a: Any, b: Any) -> tuple[int, int, int]:
    """(M, N, K) as far as the inputs tell (validation reports anything malformed)."""
    m, k = (a.shape[0], a.shape[1]) if getattr(a, "ndim", 0) == 2 else (1, 1)
    b_shape = tuple(getattr(b, "shape", ()))
    n = b_shape[1] if len(b_shape) == 2 else 1
    return int(m), int(n), int(k)


def _variant_for(
    a: Any, b: Any, checksum: str | None, level: str | None, mode: str,
    tile: TileConfig | str | None, split: int | None, rmt: str = "none",
    abft: bool | str = False,
) -> Variant:
    """The variant of a call: tile and split default to pure functions of the shape."""
    shape = _shape_of(a, b)
    try:
        return variant_for_shape(*shape, checksum, level, mode, tile, split, rmt, abft)
    except TypeError:  # an unhashable argument: validate uncached, for make_variant's message
        return variant_for_shape.__wrapped__(*shape, checksum, level, mode, tile, split, rmt,
                                             abft)


def protected_matmul(
    a: Any,
    b: Any,
    *,
    checksum: str = "ones",
    level: str = "I",
    mode: str = "exact",
    backend: str = "auto",
    tile: TileConfig | str | None = None,
    split: int | None = None,
    wait: bool = True,
    rmt: str = "none",
    abft: bool | str = False,
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
        tile: a tile name (`catalog.NAMED_TILES`: "small", "large", "wide", "wide64", "skinny",
            "half", and level T's "large_k16" and "wide64_k16"), a `TileConfig`,
            or None to pick by shape (`catalog.auto_tile`; intra-warp RMT runs `half` where
            that picks `large` and `wide` where it picks `wide64`, `catalog.rmt_warp_variant`;
            level T their 16-wide k-tiles, `catalog.t_level_variant`).
        split: split-K factor (1..MAX_SPLIT), or None for `auto_split` of the shape and tile.
        wait: on the CuPy backend, read the input checks' status block before returning (one
            host synchronisation). False returns a pending result at once; call its `wait()`
            before using c or es (they hold poison if a check failed).
        rmt: "none", "warp" (intra-warp) or "block" (inter-block) redundant multithreading
            (docs/RMT.md); C is that of rmt="none" (ES too, on the same tile), and a replica
            mismatch raises `KernelCheckError`.
        abft: True checks every C tile's row and column sums (safemon.kernels.abft), "rows"
            its row sums alone (on B's tile-row sums, which a device `ProtectedArray` b
            computes once and keeps: such a call never reads B for the check); a failure
            raises `KernelCheckError`.

    Returns:
        `MatmulResult` with c (M, N) float32, es (threads, words) uint32, the variant, the backend.

    Raises:
        TypeError: wrong array type or dtype.
        InvalidInputError (a ValueError): wrong rank, empty, non-contiguous, mismatched K,
            non-finite values (the message names the operand whose finite check failed).
        ValueError: unknown checksum, level, mode, tile or backend, or a bad split.
        BackendUnavailableError: backend="cupy" without a usable CUDA device.
        UncorrectableError: `b` is a ProtectedArray with an uncorrectable ECC error.
        KernelCheckError: the RMT replicas disagreed or the ABFT check failed.
    """
    variant = _variant_for(a, b, checksum, level, mode, tile, split, rmt, abft)
    return run_variant(a, b, variant, backend, wait=wait)


def matmul(
    a: Any,
    b: Any,
    *,
    mode: str = "exact",
    backend: str = "auto",
    tile: TileConfig | str | None = None,
    split: int | None = None,
) -> Any:
    """The unprotected kernel on the tile and split `tile=None` picks for it: returns C only
    (the overhead baseline; the same K-slices, hence the same C, as every protected variant
    at the shape). The input checks run as for `protected_matmul`, which it waits for."""
    variant = _variant_for(a, b, None, None, mode, tile, split)
    return run_variant(a, b, variant, backend).c
