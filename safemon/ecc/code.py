"""SEC-DED Hsiao codes (39,32) and (72,64): the pure NumPy algebra and the host codec.

Everything here is a pure function of its arguments (no I/O, no GPU), and it is the
reference the CuPy kernels in `cuda/ecc.cu` are held against bit for bit.

Conventions (docs/ECC.md states them with the matrices):

* A *word* is `word_bits` (32 or 64) consecutive bytes of the buffer read little-endian:
  data bit j of word i is bit `j % 8` of byte `i * word_bytes + j // 8`.
* Code-word positions 0..k-1 are the data bits, k..n-1 the check bits (check bit r is
  bit r of the word's check byte).
* The check byte of word i is byte `i % 4` (little-endian) of `check[i // 4]`, a uint32.
  Bytes of the last uint32 that belong to no word are 0 after `encode_host`.
* For the (39,32) code the check byte's bit 7 is spare: written 0, ignored when checking.
* Tail rule: when the buffer's byte size is not a multiple of the word, the missing bytes
  of the last word count as zero for the code and are never read or written. A syndrome
  that points at one of those padding bits is reported uncorrectable (no stored bit can
  have flipped there, so at least two stored bits did).
"""

from __future__ import annotations

import functools
import sys
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from safemon.errors import InvalidInputError

__all__ = [
    "NO_ERROR",
    "UNCORRECTABLE",
    "WORD_BITS",
    "EccReport",
    "check_bits",
    "check_masks",
    "decode_host",
    "encode_host",
    "encode_words",
    "generator_matrix",
    "n_check_words",
    "n_words",
    "parity_check_matrix",
    "syndrome_table",
    "valid_bits_last_word",
]

#: The supported data-word widths, in bits.
WORD_BITS: tuple[int, ...] = (32, 64)

#: `syndrome_table` entry for the zero syndrome.
NO_ERROR = -1
#: `syndrome_table` entry (and `EccReport` position) for a detected, uncorrectable error.
UNCORRECTABLE = -2

# Hsiao (39,32): the 35 weight-3 columns of length 7 minus three chosen so that the row
# weights are balanced (13,13,14,14,14,14,14): rows {0,1,2}, {3,4,5} and {6,0,1}.
_DROP_39_32 = frozenset({0b0000111, 0b0111000, 0b1000011})


def _require_word_bits(word_bits: int) -> None:
    if word_bits not in WORD_BITS:
        raise InvalidInputError(f"word_bits must be 32 or 64, got {word_bits!r}")


def check_bits(word_bits: int) -> int:
    """Number of check bits r: 7 for 32-bit words, 8 for 64-bit words."""
    _require_word_bits(word_bits)
    return 7 if word_bits == 32 else 8


@functools.cache
def _data_columns(word_bits: int) -> tuple[int, ...]:
    """Column j of H's data part, as an r-bit integer (bit r = row r), for j in 0..k-1."""
    r = check_bits(word_bits)
    weight3 = [c for c in range(1 << r) if c.bit_count() == 3]
    if word_bits == 32:
        return tuple(c for c in weight3 if c not in _DROP_39_32)
    # (72,64): all 56 weight-3 columns, then the 8 rotations of 0b00011111 (weight 5),
    # which give every row weight 21 + 5 = 26: the classic balanced Hsiao code.
    weight5 = [((0x1F << i) | (0x1F >> (8 - i))) & 0xFF for i in range(8)]
    return tuple(weight3 + weight5)


def parity_check_matrix(word_bits: int) -> npt.NDArray[np.uint8]:
    """H, shape (r, n), uint8 0/1: columns 0..k-1 are the data bits, k..n-1 the identity.

    Every column has odd weight and all are distinct (Hsiao), so a single error gives an
    odd syndrome equal to its column and any double error an even, nonzero one.
    """
    r = check_bits(word_bits)
    cols = list(_data_columns(word_bits)) + [1 << i for i in range(r)]
    h = np.array([[(c >> row) & 1 for c in cols] for row in range(r)], dtype=np.uint8)
    return h


def generator_matrix(word_bits: int) -> npt.NDArray[np.uint8]:
    """G, shape (k, n), uint8 0/1, systematic: `[I_k | P^T]` with H = `[P | I_r]`.

    The code word of data row-vector d is `d @ G mod 2`; `G @ H.T mod 2 == 0`.
    """
    h = parity_check_matrix(word_bits)
    k = word_bits
    return np.concatenate([np.eye(k, dtype=np.uint8), h[:, :k].T.copy()], axis=1)


@functools.cache
def _masks(word_bits: int) -> tuple[int, ...]:
    cols = _data_columns(word_bits)
    r = check_bits(word_bits)
    return tuple(
        sum(1 << j for j, c in enumerate(cols) if (c >> row) & 1) for row in range(r)
    )


def check_masks(word_bits: int) -> tuple[int, ...]:
    """Row masks of H's data part: check bit r = parity(word & mask[r]). r entries.

    These are the constants the CUDA kernels are compiled with (`-DECC32_M<r>` etc.).
    """
    _require_word_bits(word_bits)
    return _masks(word_bits)


@functools.cache
def _table(word_bits: int) -> npt.NDArray[np.int16]:
    r = check_bits(word_bits)
    k = word_bits
    table = np.full(1 << r, UNCORRECTABLE, dtype=np.int16)
    table[0] = NO_ERROR
    for j, c in enumerate(_data_columns(word_bits)):
        table[c] = j
    for i in range(r):
        table[1 << i] = k + i
    table.flags.writeable = False
    return table


def syndrome_table(word_bits: int) -> npt.NDArray[np.int16]:
    """Decoder table, shape (2**r,), int16, read-only.

    Entry s is `NO_ERROR` (-1) for s = 0, the code-word position (0..n-1) of the single
    flipped bit whose column is s, or `UNCORRECTABLE` (-2): every even-weight nonzero
    syndrome (double errors) and the odd-weight ones that match no column.
    """
    _require_word_bits(word_bits)
    return _table(word_bits)


def _parity(x: npt.NDArray[Any]) -> npt.NDArray[np.uint8]:
    """Bitwise parity of each unsigned integer element, as uint8 0/1."""
    if hasattr(np, "bitwise_count"):  # NumPy >= 2.0
        counted: npt.NDArray[np.uint8] = (np.bitwise_count(x) & 1).astype(np.uint8)
        return counted
    y = x.copy()
    shift = x.dtype.itemsize * 4
    while shift:
        y ^= y >> x.dtype.type(shift)
        shift //= 2
    return (y & 1).astype(np.uint8)


def encode_words(words: npt.NDArray[Any], word_bits: int) -> npt.NDArray[np.uint8]:
    """Check bytes of `words` (uint32 for 32, uint64 for 64; any shape) → uint8, same shape."""
    _require_word_bits(word_bits)
    want = np.uint32 if word_bits == 32 else np.uint64
    if words.dtype != want:
        raise InvalidInputError(f"encode_words({word_bits}) needs {np.dtype(want)} words, got {words.dtype}")
    out = np.zeros(words.shape, dtype=np.uint8)
    for row, m in enumerate(_masks(word_bits)):
        out |= _parity(words & want(m)) << np.uint8(row)
    return out


def n_words(nbytes: int, word_bits: int) -> int:
    """Number of code words covering `nbytes` bytes (the last one zero-padded)."""
    wb = word_bits // 8
    return (nbytes + wb - 1) // wb


def n_check_words(nbytes: int, word_bits: int) -> int:
    """Length of the packed uint32 check array for a buffer of `nbytes` bytes."""
    return (n_words(nbytes, word_bits) + 3) // 4


def valid_bits_last_word(nbytes: int, word_bits: int) -> int:
    """Data bits of the last word that are stored (the rest is zero padding); 0 if empty."""
    if nbytes == 0:
        return 0
    rem = nbytes % (word_bits // 8)
    return word_bits if rem == 0 else rem * 8


@dataclass(frozen=True, eq=False)
class EccReport:
    """What one `decode` found.

    Attributes:
        n_words: code words checked.
        word_bits: 32 or 64.
        corrected_words: int64, sorted, indices of words with a single-bit error; they
            were fixed in place (data or check byte) when `applied` is True.
        corrected_positions: int16, the code-word position (0..k-1 data bit, k..n-1 check
            bit) of each of those errors, aligned with `corrected_words`.
        uncorrectable_words: int64, sorted, indices of words with a detected error that
            cannot be corrected (their data was left as it is).
        applied: whether the correctable errors were written back.
    """

    n_words: int
    word_bits: int
    corrected_words: npt.NDArray[np.int64]
    corrected_positions: npt.NDArray[np.int16]
    uncorrectable_words: npt.NDArray[np.int64]
    applied: bool

    @property
    def n_corrected(self) -> int:
        """Number of words with a correctable (single-bit) error."""
        return int(self.corrected_words.size)

    @property
    def n_uncorrectable(self) -> int:
        """Number of words with an uncorrectable error."""
        return int(self.uncorrectable_words.size)

    @property
    def clean(self) -> bool:
        """True when no error of any kind was found."""
        return self.n_corrected == 0 and self.n_uncorrectable == 0

    @staticmethod
    def from_found(
        n_words: int,
        word_bits: int,
        words: npt.NDArray[Any],
        positions: npt.NDArray[Any],
        applied: bool,
    ) -> EccReport:
        """Build a report from unordered (word index, position-or-UNCORRECTABLE) pairs."""
        words = np.asarray(words, dtype=np.int64)
        positions = np.asarray(positions, dtype=np.int16)
        order = np.argsort(words, kind="stable")
        words, positions = words[order], positions[order]
        good = positions >= 0
        return EccReport(
            n_words=n_words,
            word_bits=word_bits,
            corrected_words=words[good],
            corrected_positions=positions[good],
            uncorrectable_words=words[~good],
            applied=applied,
        )


def _require_little_endian() -> None:
    if sys.byteorder != "little":  # pragma: no cover - every supported host is little-endian
        raise InvalidInputError("safemon.ecc's packed layout is defined for little-endian hosts only")


def _host_bytes(data: npt.NDArray[Any]) -> npt.NDArray[np.uint8]:
    if not isinstance(data, np.ndarray):
        raise InvalidInputError(f"expected a NumPy array, got {type(data).__name__}")
    if not data.flags.c_contiguous:
        raise InvalidInputError("ECC needs a C-contiguous array (it is viewed as raw words)")
    return data.reshape(-1).view(np.uint8)


def _host_words(raw: npt.NDArray[np.uint8], word_bits: int) -> npt.NDArray[Any]:
    """The buffer as little-endian words; a zero-padded copy of the last one if partial."""
    wb = word_bits // 8
    nfull = raw.size // wb
    dt = np.dtype("<u4") if word_bits == 32 else np.dtype("<u8")
    full = raw[: nfull * wb].view(dt)
    if raw.size % wb:
        last = np.zeros(wb, dtype=np.uint8)
        last[: raw.size % wb] = raw[nfull * wb :]
        full = np.concatenate([full, last.view(dt)])
    return full.astype(np.uint32 if word_bits == 32 else np.uint64, copy=False)


def encode_host(data: npt.NDArray[Any], word_bits: int = 32) -> npt.NDArray[np.uint32]:
    """Packed check array of a C-contiguous NumPy array: uint32, shape (ceil(words/4),).

    Raises:
        InvalidInputError: not a NumPy array, not C-contiguous, or bad `word_bits`.
    """
    _require_word_bits(word_bits)
    _require_little_endian()
    raw = _host_bytes(data)
    cb = encode_words(_host_words(raw, word_bits), word_bits)
    packed = np.zeros(n_check_words(raw.size, word_bits) * 4, dtype=np.uint8)
    packed[: cb.size] = cb
    return packed.view(np.uint32)


def _host_check_bytes(
    check: npt.NDArray[Any], nbytes: int, word_bits: int, xp_name: str = "NumPy"
) -> npt.NDArray[np.uint8]:
    if not isinstance(check, np.ndarray):
        raise InvalidInputError(f"check must be a {xp_name} array, got {type(check).__name__}")
    want = n_check_words(nbytes, word_bits)
    if check.dtype != np.uint32 or check.ndim != 1 or check.size != want:
        raise InvalidInputError(
            f"check must be a 1-D uint32 array of {want} elements for {nbytes} bytes of "
            f"{word_bits}-bit words, got {check.dtype} with shape {check.shape}"
        )
    if not check.flags.c_contiguous:
        raise InvalidInputError("check must be C-contiguous")
    return check.view(np.uint8)


def decode_host(
    data: npt.NDArray[Any], check: npt.NDArray[np.uint32], word_bits: int = 32, correct: bool = True
) -> EccReport:
    """Check a NumPy buffer against its packed check array; fix single errors if `correct`.

    With `correct`, a single flipped data bit is flipped back in `data` and a single
    flipped check bit in `check`, both in place; uncorrectable words are left untouched.

    Raises:
        InvalidInputError: bad types/shapes, or `correct` with a read-only array.
    """
    _require_word_bits(word_bits)
    _require_little_endian()
    raw = _host_bytes(data)
    cbytes = _host_check_bytes(check, raw.size, word_bits)
    if correct and not (data.flags.writeable and check.flags.writeable):
        raise InvalidInputError("decode(correct=True) needs writeable data and check arrays")
    nw = n_words(raw.size, word_bits)
    k = word_bits
    spare = np.uint8(0x7F if word_bits == 32 else 0xFF)
    syn = encode_words(_host_words(raw, word_bits), word_bits) ^ (cbytes[:nw] & spare)
    bad = np.flatnonzero(syn)
    pos = _table(word_bits)[syn[bad]].astype(np.int16)
    if bad.size and nw:
        vb = valid_bits_last_word(raw.size, word_bits)
        on_pad = (bad == nw - 1) & (pos >= vb) & (pos < k)
        pos[on_pad] = UNCORRECTABLE
    if correct and bad.size:
        data_fix = pos >= 0
        data_fix &= pos < k
        w, p = bad[data_fix], pos[data_fix].astype(np.int64)
        raw[w * (k // 8) + p // 8] ^= (np.uint8(1) << (p % 8).astype(np.uint8))
        chk_fix = pos >= k
        w, p = bad[chk_fix], pos[chk_fix].astype(np.int64) - k
        cbytes[w] ^= np.uint8(1) << p.astype(np.uint8)
    return EccReport.from_found(nw, word_bits, bad, pos, applied=correct)
