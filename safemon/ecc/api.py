"""`encode` / `decode`: one entry point for host (NumPy) and device (CuPy) buffers.

The array module is chosen from the data: a `cupy.ndarray` is coded on its GPU by the
kernels of `safemon.ecc.gpu`, a `numpy.ndarray` on the host by `safemon.ecc.code`. Both
produce the same check bytes and the same `EccReport` for the same bytes.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from safemon.ecc.code import EccReport, check_bits, decode_host, encode_host
from safemon.ecc.gpu import decode_device, encode_device, is_device_array
from safemon.errors import InvalidInputError

__all__ = ["decode", "encode"]


def _is_host(x: object) -> bool:
    return isinstance(x, np.ndarray)


def encode(data: Any, *, word_bits: int = 32) -> Any:
    """Check bits of `data`, packed four check bytes per uint32.

    Args:
        data: a C-contiguous `numpy.ndarray` or `cupy.ndarray` of any dtype and shape; its
            bytes are read as little-endian `word_bits`-bit words, the last one zero-padded
            when `data.nbytes` is not a multiple of `word_bits // 8`.
        word_bits: 32 for the Hsiao (39,32) code, 64 for (72,64).

    Returns:
        uint32 array of shape `(ceil(n_words / 4),)` on the same device as `data`: the check
        byte of word i is byte `i % 4` (little-endian) of element `i // 4`.

    Raises:
        InvalidInputError: `data` is not a NumPy/CuPy array, is not C-contiguous, or
            `word_bits` is not 32 or 64.
    """
    check_bits(word_bits)
    if _is_host(data):
        return encode_host(data, word_bits)
    if is_device_array(data):
        return encode_device(data, word_bits)
    raise InvalidInputError(f"encode needs a NumPy or CuPy array, got {type(data).__name__}")


def decode(data: Any, check: Any, *, word_bits: int = 32, correct: bool = True) -> EccReport:
    """Check `data` against `check` (from `encode`) and report what was found.

    With `correct=True` every single-bit error (in a data bit or a check bit) is fixed in
    place in `data` or `check`; uncorrectable words are reported and left as they are.
    `decode` itself never raises for ECC errors; `ProtectedArray` turns uncorrectable
    ones into `UncorrectableError`.

    Args:
        data: the buffer, as for `encode`.
        check: its packed check array, same array module and device as `data`.
        word_bits: 32 or 64, as used for `encode`.
        correct: write the corrections back.

    Returns:
        an `EccReport` (word indices are into `data` viewed as code words).

    Raises:
        InvalidInputError: bad types, shapes, dtypes, mixed host/device arrays, or
            `correct=True` on read-only arrays.
    """
    check_bits(word_bits)
    if _is_host(data):
        if not _is_host(check):
            raise InvalidInputError(f"data is a NumPy array but check is {type(check).__name__}")
        return decode_host(data, check, word_bits, correct)
    if is_device_array(data):
        if not is_device_array(check):
            raise InvalidInputError(f"data is a CuPy array but check is {type(check).__name__}")
        return decode_device(data, check, word_bits, correct)
    raise InvalidInputError(f"decode needs a NumPy or CuPy array, got {type(data).__name__}")
