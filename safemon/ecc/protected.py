"""`ProtectedArray`: a buffer that owns its data and check bits and never hands out bad data.

It lives where its data lives: on a GPU when built from a CuPy array (or uploaded with
`from_host(..., backend="cupy")`), in host memory on the NumPy backend. The API and the
check bytes are the same on both. Every read path checks first: single-bit errors are
corrected in place and counted, and an uncorrectable error raises `UncorrectableError`
naming the buffer and the word indices.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from safemon.ecc.api import decode, encode
from safemon.ecc.code import EccReport, check_bits, n_words
from safemon.ecc.gpu import is_device_array
from safemon.errors import InvalidInputError, UncorrectableError
from safemon.kernels.backend import Backend, resolve_backend
from safemon.kernels.compiler import import_cupy

__all__ = ["ErrorCallback", "ProtectedArray", "ScrubResult", "UploadHook"]

#: `on_errors(buffer_name, corrected, new_uncorrectable)`: called after a check that found
#: something, with the counts it added to the buffer's cumulative totals.
ErrorCallback = Callable[[str, int, int], None]
#: `after_upload(device_data, device_check)`: test / fault-injection hook of `from_host`,
#: called between the upload and the device-side verification.
UploadHook = Callable[[Any, Any], None]


@dataclass(frozen=True, eq=False)
class ScrubResult:
    """One patrol of one buffer.

    Attributes:
        buffer: the buffer's name.
        n_words: code words checked.
        corrected: words whose single-bit error this pass corrected.
        uncorrectable_words: int64, sorted: every word found uncorrectable in this pass.
        new_uncorrectable: how many of those were not known before (what the cumulative
            total grew by).
        corrected_total / uncorrectable_total: the buffer's cumulative counts afterwards.
    """

    buffer: str
    n_words: int
    corrected: int
    uncorrectable_words: npt.NDArray[np.int64]
    new_uncorrectable: int
    corrected_total: int
    uncorrectable_total: int

    @property
    def ok(self) -> bool:
        """True when the buffer holds no uncorrectable word after this pass."""
        return self.uncorrectable_words.size == 0


class ProtectedArray:
    """Data plus SEC-DED check bits, owned together, on one device (or on the host).

    Counting rule: `corrected_total` grows by one for every word a check corrects (on any
    path: verification, download, scrub). `uncorrectable_total` grows by one for each word
    the first time it is found uncorrectable; the word stays known-bad (and every read
    raises) until `update` rewrites the buffer.

    Thread-safe: checks and updates of one buffer are serialised by a lock.
    """

    def __init__(
        self,
        data: Any,
        *,
        name: str,
        word_bits: int = 32,
        on_errors: ErrorCallback | None = None,
    ) -> None:
        """Take a copy of `data` (NumPy or CuPy, any shape/dtype) and encode it where it is.

        Encoding happens after the copy, on the array's own device: use this for data that
        was written on the device. For data coming from the host use `from_host`, which
        also protects the transfer.

        Raises:
            InvalidInputError: not a NumPy/CuPy array, empty name, bad `word_bits`.
        """
        check_bits(word_bits)
        xp = _module_of(data)
        self._init(xp.array(data, order="C", copy=True), None, name, word_bits, on_errors)

    def _init(
        self,
        data: Any,
        check: Any | None,
        name: str,
        word_bits: int,
        on_errors: ErrorCallback | None,
    ) -> None:
        if not isinstance(name, str) or not name:
            raise InvalidInputError("a ProtectedArray needs a non-empty name")
        self._name = name
        self._word_bits = word_bits
        self._data = data
        self._check = encode(data, word_bits=word_bits) if check is None else check
        self._on_errors = on_errors
        self._lock = threading.Lock()
        self._known_bad: npt.NDArray[np.int64] = np.empty(0, dtype=np.int64)
        #: where the next `scrub_part` starts (a code-word index, a multiple of 4)
        self._scrub_cursor = 0
        self.corrected_total = 0
        self.uncorrectable_total = 0
        self._derived: dict[Hashable, Any] = {}

    @classmethod
    def from_host(
        cls,
        array: npt.ArrayLike,
        *,
        name: str,
        word_bits: int = 32,
        backend: Backend | str = Backend.AUTO,
        on_errors: ErrorCallback | None = None,
        after_upload: UploadHook | None = None,
    ) -> ProtectedArray:
        """Encode a host array on the host, upload data and check bits, verify on the device.

        A bit flipped in transit is corrected (and counted); anything worse raises, so a
        buffer that exists was intact when it arrived.

        Args:
            array: a NumPy array (copied; any layout is accepted, stored C-contiguous).
            name: the buffer's name in errors and metrics.
            word_bits: 32 or 64.
            backend: "cupy" (current CUDA device), "numpy" (host memory) or "auto" (CuPy
                when a CUDA device is usable, else NumPy).
            on_errors: see `ErrorCallback`.
            after_upload: see `UploadHook` (tests and fault injection).

        Raises:
            InvalidInputError: `array` is not a NumPy array, bad name / word_bits / backend.
            BackendUnavailableError: backend "cupy" without a usable device.
            UncorrectableError: the verification after upload found an uncorrectable word.
        """
        check_bits(word_bits)
        if not isinstance(array, np.ndarray):
            raise InvalidInputError(
                f"from_host needs a NumPy array, got {type(array).__name__}; "
                "use ProtectedArray(data, name=...) for device arrays"
            )
        resolved = resolve_backend(backend)
        host = np.array(array, order="C", copy=True)
        host_check = encode(host, word_bits=word_bits)
        if resolved.on_device:
            cupy = import_cupy()
            dev_data, dev_check = cupy.asarray(host), cupy.asarray(host_check)
        else:
            # Host "device": the copy above stands for the upload.
            dev_data, dev_check = host, host_check
        if after_upload is not None:
            after_upload(dev_data, dev_check)
        self = cls.__new__(cls)
        self._init(dev_data, dev_check, name, word_bits, on_errors)
        with self._lock:
            self._check_and_raise(self._data, self._check)
        return self

    # ---- properties ------------------------------------------------------------------

    @property
    def name(self) -> str:
        """The buffer's name (errors, metrics label `buffer`)."""
        return self._name

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(int(s) for s in self._data.shape)

    @property
    def dtype(self) -> np.dtype[Any]:
        dt: np.dtype[Any] = np.dtype(self._data.dtype)
        return dt

    @property
    def nbytes(self) -> int:
        """Bytes of data (check bits not included; they add `check_nbytes`)."""
        return int(self._data.nbytes)

    @property
    def check_nbytes(self) -> int:
        """Bytes of the packed check array."""
        return int(self._check.nbytes)

    @property
    def word_bits(self) -> int:
        return self._word_bits

    @property
    def n_words(self) -> int:
        """Code words covering the data."""
        return n_words(self.nbytes, self._word_bits)

    @property
    def on_device(self) -> bool:
        """True when the data live in GPU memory (CuPy), False on the NumPy backend."""
        return is_device_array(self._data)

    @property
    def storage(self) -> tuple[Any, Any]:
        """The arrays that hold the data and the check bits now. Work queued on them ahead
        of time (a captured CUDA graph: `safemon.channels.step_graphs`) stays valid while
        these are the arrays; `update` replaces the check bits' array."""
        return self._data, self._check

    @property
    def known_bad_words(self) -> tuple[int, ...]:
        """Words found uncorrectable so far (cleared by `update`)."""
        return tuple(int(w) for w in self._known_bad)

    # ---- checked access ----------------------------------------------------------------

    def verified(self) -> Any:
        """Check and correct the buffer in place, then return the stored array.

        The returned array is the protected storage itself (no copy): treat it as
        read-only, or call `update` after writing to it, or its check bits go stale.

        Raises:
            UncorrectableError: an uncorrectable word (buffer name and word indices).
        """
        with self._lock:
            self._check_and_raise(self._data, self._check)
            return self._data

    def derived(self, key: Hashable, make: Callable[[Any], Any]) -> Any:
        """A value computed from the contents once, after a full check, and kept until
        `update` rewrites them: the first call for `key` checks and corrects the buffer
        (as `verified`), calls `make(stored array)` and keeps what it returns; later calls
        return that. For values that depend only on the data (a weight's ABFT vectors,
        `safemon.kernels.abft.abft_weight_vectors`): corrections restore the data the
        value was made from, so they never make it stale. `make` runs under the buffer's
        lock and must leave its result usable from any stream (wait for its own work).

        Raises:
            UncorrectableError: an uncorrectable word (nothing is kept).
        """
        with self._lock:
            if key not in self._derived:
                self._check_and_raise(self._data, self._check)
                self._derived[key] = make(self._data)
            return self._derived[key]

    def launch_check(self, errors_out: Any) -> Any:
        """Queue the read-only ECC check on the current stream and return the stored array
        without waiting (the fused path of `safemon.kernels.checked`).

        The number of words with a nonzero syndrome is added to `errors_out` (a zeroed
        1-element uint64 CuPy array, or a zeroed uint64's device address as `numpy.uintp`). Nothing is corrected or counted here: the caller must
        read `errors_out` before releasing anything computed from the array, and when it is
        nonzero call `verified()` (which corrects, counts and raises) and compute again.

        Raises:
            InvalidInputError: the buffer lives on the host (use `verified()`).
        """
        if not self.on_device:
            raise InvalidInputError(f"{self._name!r} lives on the host; use verified()")
        from safemon.ecc.gpu import count_errors_device

        with self._lock:
            count_errors_device(self._data, self._check, self._word_bits, out=errors_out)
            return self._data

    def to_host(self) -> npt.NDArray[Any]:
        """Download data and check bits, check and correct the host copy, return it.

        The device copy is not modified (a flip found here was in transit or is still on
        the device, where the next `verified` or `scrub` fixes it).

        Raises:
            UncorrectableError: an uncorrectable word in the downloaded copy.
        """
        with self._lock:
            if self.on_device:
                host, check = self._data.get(), self._check.get()
            else:
                host, check = self._data.copy(), self._check.copy()
            self._check_and_raise(host, check)
            return host  # type: ignore[no-any-return]

    def scrub(self) -> ScrubResult:
        """Patrol the whole buffer: correct single errors in place, record uncorrectable ones.

        Does not raise for ECC errors (a patrol reports; the next read raises).
        """
        with self._lock:
            report = decode(self._data, self._check, word_bits=self._word_bits, correct=True)
            new = self._record(report)
            return ScrubResult(
                buffer=self._name,
                n_words=report.n_words,
                corrected=report.n_corrected,
                uncorrectable_words=report.uncorrectable_words,
                new_uncorrectable=new,
                corrected_total=self.corrected_total,
                uncorrectable_total=self.uncorrectable_total,
            )

    def scrub_part(self, max_words: int) -> tuple[ScrubResult, bool]:
        """Patrol the next `max_words` code words (rounded up to a multiple of 4, the check
        bytes' packing) from where the last call stopped, as `scrub` does for the whole
        buffer: so that a slow patrol (a host buffer on the NumPy backend: tens of ms per
        MiB) can be cut into pieces that each end in bounded time. A device buffer is
        patrolled whole (one kernel; fast).

        Returns:
            the result for the words patrolled (word indices are the buffer's), and whether
            this call reached the buffer's end (the next call starts again at word 0).

        Raises:
            InvalidInputError: `max_words` < 1.
        """
        if isinstance(max_words, bool) or not isinstance(max_words, int) or max_words < 1:
            raise InvalidInputError(f"max_words must be an int >= 1, got {max_words!r}")
        if self.on_device:
            return self.scrub(), True
        wb = self._word_bits // 8
        with self._lock:
            total = n_words(int(self._data.nbytes), self._word_bits)
            start = self._scrub_cursor
            stop = min(total, start + (max_words + 3) // 4 * 4)
            flat = self._data.reshape(-1).view(np.uint8)
            report = decode(flat[start * wb:min(stop * wb, flat.size)],
                            self._check[start // 4:(stop + 3) // 4],
                            word_bits=self._word_bits, correct=True)
            words = report.uncorrectable_words + start
            new = self._record(report, words)
            self._scrub_cursor = 0 if stop >= total else stop
            return ScrubResult(
                buffer=self._name,
                n_words=report.n_words,
                corrected=report.n_corrected,
                uncorrectable_words=words,
                new_uncorrectable=new,
                corrected_total=self.corrected_total,
                uncorrectable_total=self.uncorrectable_total,
            ), stop >= total

    def update(self, data: Any) -> None:
        """Overwrite the contents with `data` (same shape, dtype and array module) and re-encode.

        Clears the known-bad words and the `derived` values (the buffer is rewritten).
        Cumulative counts are kept.

        Raises:
            InvalidInputError: shape, dtype or array module differ.
        """
        if _module_of(data) is not _module_of(self._data):
            raise InvalidInputError(
                f"update of {self._name!r} needs a {type(self._data).__module__} array, "
                f"got {type(data).__module__}"
            )
        if tuple(data.shape) != self.shape or np.dtype(data.dtype) != self.dtype:
            raise InvalidInputError(
                f"update of {self._name!r} needs shape {self.shape} and dtype {self.dtype}, "
                f"got {tuple(data.shape)} {data.dtype}"
            )
        with self._lock:
            self._data[...] = data
            self._check = encode(self._data, word_bits=self._word_bits)
            self._known_bad = np.empty(0, dtype=np.int64)
            self._derived.clear()

    # ---- internals ---------------------------------------------------------------------

    def _record(self, report: EccReport,
                uncorrectable: npt.NDArray[np.int64] | None = None) -> int:
        """Add a report to the cumulative counts; return the number of new bad words.
        `uncorrectable`: the report's uncorrectable words as indices of the whole buffer,
        when the report covers a part of it (default: the report's own)."""
        bad = report.uncorrectable_words if uncorrectable is None else uncorrectable
        new_bad = np.setdiff1d(bad, self._known_bad, assume_unique=True)
        if new_bad.size:
            self._known_bad = np.union1d(self._known_bad, new_bad)
        self.corrected_total += report.n_corrected
        self.uncorrectable_total += int(new_bad.size)
        if self._on_errors is not None and (report.n_corrected or new_bad.size):
            self._on_errors(self._name, report.n_corrected, int(new_bad.size))
        return int(new_bad.size)

    def _check_and_raise(self, data: Any, check: Any) -> None:
        report = decode(data, check, word_bits=self._word_bits, correct=True)
        self._record(report)
        if report.n_uncorrectable:
            raise UncorrectableError(self._name, report.uncorrectable_words.tolist())

    def __repr__(self) -> str:
        where = "device" if self.on_device else "host"
        return (
            f"ProtectedArray(name={self._name!r}, shape={self.shape}, dtype={self.dtype}, "
            f"word_bits={self._word_bits}, on={where})"
        )


def _module_of(data: Any) -> Any:
    if isinstance(data, np.ndarray):
        return np
    if is_device_array(data):
        return import_cupy()
    raise InvalidInputError(f"expected a NumPy or CuPy array, got {type(data).__name__}")
