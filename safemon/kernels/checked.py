"""The checked launch sequence of the CuPy backend: input checks, kernel, one status block.

A protected call on the GPU queues everything on CuPy's current stream, with no host wait in
between (the one exception: the ABFT checksum products of a large product run on a side
stream, joined back into the current stream before the verify kernel, so that whatever the
caller queues or waits for on its stream comes after them):

1. a zeroed status block of `STATUS_WORDS` uint32 words;
2. when `b` is a `ProtectedArray` on the device, its read-only ECC check, which adds the
   number of bad code words to words 2–3 (one uint64, `STATUS_ECC`);
3. the MMM kernel (and for a split variant the split-K reduction). It reads words 0–3 first
   and, when any is nonzero, computes nothing and stores poison (canonical NaN in C,
   0xFFFFFFFF in ES), so a result whose checks failed never carries usable numbers. The
   finite check of A and B is part of it (mmm.cu): a block that loaded NaN or infinity
   (which then reaches one of its accumulators; only such a block reads its inputs again to
   tell) stores poison for its tile and sets word 0 (`STATUS_A`) or 1 (`STATUS_B`).
   An RMT variant (docs/RMT.md) whose replicas (lanes, or blocks) disagree poisons that
   block tile the same way and sets word 4 (`STATUS_RMT`) and word 5 (`STATUS_RMT_TILE`: 0xFFFFFFFF − the
   lowest failed block's id);
4. for an ABFT variant, abft.cu's check of C (`safemon.kernels.abft`), which sets word 6
   (`STATUS_ABFT`) and word 7 (`STATUS_ABFT_TILE`, encoded like word 5) when a tile fails.
   Its checksum products read only A and B: from `abft.ABFT_OVERLAP_MIN_MACS` multiply-adds
   on they run on this thread's side stream beside step 3 (their work buffer allocated and
   an event recorded before it), and the verify kernel waits for them. The row-only check
   ("rows") of a `ProtectedArray` weight takes B's vectors from the weight
   (`weight_vectors`: made once, from the verified weight) and never reads B.

`read_status` then copies the 32-byte block to the host: the one host synchronisation of a
call. A caller with a read-back of its own (a channel's digests) queues the copies first
(`queue_status_reads`) and pays one synchronisation for both. `StatusReport` says which
check failed. The ECC check only counts; the caller
corrects with `ProtectedArray.verified()` and computes again (`safemon.kernels.api`).

A caller that waits at once (`run_checked`, the synchronous API call) skips step 1 in the
steady state: each thread keeps, per device, one status block that its last read found all
zero. Nothing writes a block after the read that found it zero (that read waited for every
launch queued with it), so it is still zero when the thread's next call takes it. A call takes
the block out of the slot before launching and puts it back only after a read that found it
zero; a failed check, an exception or a pending (`wait=False`) call never returns it, and the
next call zeroes a fresh one. The measured saving is in evidence/h100-2026-11-23-host/.
Until issue 14's second session the finite check was a separate kernel (finite.cu) that
read every input word once more before the product; `safemon.kernels.gpu.all_finite` keeps
it for callers that check an array alone.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from safemon.kernels.abft import AbftWeightVectors, abft_weight_vectors, begin_abft, finish_abft
from safemon.kernels.catalog import TileConfig, Variant
from safemon.kernels.compiler import import_cupy
from safemon.kernels.gpu import gpu_matmul
from safemon.kernels.pinned import PinnedBuffer

__all__ = [
    "STATUS_A",
    "STATUS_ABFT",
    "STATUS_ABFT_TILE",
    "STATUS_B",
    "STATUS_ECC",
    "STATUS_RMT",
    "STATUS_RMT_TILE",
    "STATUS_WORDS",
    "CheckedLaunch",
    "QueuedStatusReads",
    "StatusReport",
    "launch_checked",
    "queue_status_reads",
    "read_status",
    "run_checked",
]

#: uint32 words of the status block (32 bytes). The kernel reads words 0-3, the input checks,
#: as one uint4 before computing; words 4-7 are written by checks inside the kernel.
STATUS_WORDS = 8
#: Word set to 1 when A holds NaN or infinity.
STATUS_A = 0
#: Word set to 1 when B holds NaN or infinity.
STATUS_B = 1
#: First of the two words (a little-endian uint64) counting B's code words with a nonzero
#: ECC syndrome.
STATUS_ECC = 2
#: Word set to 1 by an RMT kernel whose replicas (lanes or blocks) disagreed (mmm.cu).
STATUS_RMT = 4
#: 0xFFFFFFFF − the lowest linear tile id (z, by, bx) whose RMT check failed; 0 if none.
STATUS_RMT_TILE = 5
#: Word set to 1 by abft.cu when a tile's row or column checksum fails.
STATUS_ABFT = 6
#: 0xFFFFFFFF − the lowest linear tile id (by·gx + bx) whose ABFT check failed; 0 if none.
STATUS_ABFT_TILE = 7


@dataclass(frozen=True)
class StatusReport:
    """The status block read back on the host.

    Attributes:
        a_nonfinite / b_nonfinite: the finite check of A / B found NaN or infinity.
        ecc_bad_words: code words of the ECC-protected B with a nonzero syndrome.
        rmt_mismatch: an RMT kernel's replicas disagreed (C and ES of that tile are poison).
        rmt_tile: the lowest linear block id whose RMT check failed, else None.
        abft_failed: the ABFT check of C failed (C must not be released).
        abft_tile: the lowest tile id (by·gx + bx) whose ABFT check failed, else None.
    """

    a_nonfinite: bool
    b_nonfinite: bool
    ecc_bad_words: int
    rmt_mismatch: bool = False
    rmt_tile: int | None = None
    abft_failed: bool = False
    abft_tile: int | None = None

    @property
    def ok(self) -> bool:
        return not (self.a_nonfinite or self.b_nonfinite or self.ecc_bad_words
                    or self.rmt_mismatch or self.abft_failed)

    @classmethod
    def from_words(cls, words: npt.NDArray[np.uint32]) -> StatusReport:
        """Decode a (STATUS_WORDS,) uint32 block.

        Raises:
            ValueError: `words` does not hold STATUS_WORDS words.
        """
        if words.shape != (STATUS_WORDS,):
            raise ValueError(f"a status block holds {STATUS_WORDS} words, not {words.shape}")
        ecc = int(words[STATUS_ECC]) | (int(words[STATUS_ECC + 1]) << 32)
        return cls(bool(words[STATUS_A]), bool(words[STATUS_B]), ecc,
                   bool(words[STATUS_RMT]), _tile(words[STATUS_RMT_TILE]),
                   bool(words[STATUS_ABFT]), _tile(words[STATUS_ABFT_TILE]))


def _tile(word: np.uint32) -> int | None:
    """Decode a tile word (0xFFFFFFFF − id, 0 for none)."""
    return None if int(word) == 0 else 0xFFFFFFFF - int(word)


@dataclass(frozen=True)
class CheckedLaunch:
    """What `launch_checked` queued: device C and ES (poison if a check failed), the
    device status block, and whether B's ECC check is part of it. `keep` holds what the
    queued kernels read and nothing else may keep alive until they ran: a weight's ABFT
    vectors, which `ProtectedArray.update` drops from the weight (allocated on the stream
    that made them, their memory could otherwise go to a new allocation there while this
    launch's stream still reads them). Hold the launch until its status was read."""

    c: Any
    es: Any
    status: Any
    ecc_checked: bool
    keep: Any = None


def launch_checked(
    a: Any, b: Any, variant: Variant, *, a_on_device: bool = True, b_on_device: bool = True,
    b_protected: Any = None,
) -> CheckedLaunch:
    """Queue checks and kernel on the current stream (a large ABFT product's checksum
    products on a side stream, joined back before its verify kernel); never waits.

    Args:
        a: (M, K) float32 C-contiguous CuPy or NumPy array.
        b: (K, N) float32 likewise; ignored when `b_protected` is given.
        variant: the kernel variant (its split decides the grid).
        a_on_device / b_on_device: accepted for callers of the first checked sequence and
            ignored: the kernel's finite check covers both operands wherever they came from.
        b_protected: a device `ProtectedArray` holding B: its ECC check joins the sequence.
    """
    del a_on_device, b_on_device  # the kernel checks every operand it loads
    cp = import_cupy()
    return _launch(cp, a, b, variant, cp.zeros(STATUS_WORDS, dtype=cp.uint32), b_protected)


def _launch(cp: Any, a: Any, b: Any, variant: Variant, status: Any, b_protected: Any) -> CheckedLaunch:
    """Queue the sequence with the zeroed device block `status` (module docstring)."""
    weights = None
    if b_protected is not None and variant.abft_kind == "rows":
        weights = weight_vectors(b_protected, variant.tile)
    if b_protected is not None:
        b = b_protected.launch_check(np.uintp(int(status.data.ptr) + 4 * STATUS_ECC))
    if not isinstance(a, cp.ndarray):
        a = cp.asarray(a)  # uploaded once for the kernel and the ABFT check
    if not isinstance(b, cp.ndarray):
        b = cp.asarray(b)
    if not variant.abft:
        c, es = gpu_matmul(a, b, variant, status=status)
        return CheckedLaunch(c, es, status, b_protected is not None)
    # Large products: the checksum products on a side stream, queued after the MMM kernel so
    # that they take the multiprocessors its last wave leaves idle (they read only A and B);
    # the verify kernel waits for both on this stream. Smaller ones: all after the kernel,
    # as one sequence on this stream.
    pending = begin_abft(a.shape[0], b.shape[1], a.shape[1], variant, weights=weights)
    c, es = gpu_matmul(a, b, variant, status=status)
    finish_abft(pending, a, b, c, int(status.data.ptr))
    return CheckedLaunch(c, es, status, b_protected is not None, weights)


def weight_vectors(b_protected: Any, tile: TileConfig) -> AbftWeightVectors:
    """The row-only ABFT check's vectors of the weight `b_protected` (a device
    `ProtectedArray`) for `tile`'s width: computed once, from the verified weight, and kept
    with it (`ProtectedArray.derived`) until it is rewritten. The first call waits for them
    (so that every stream may read them) and raises `UncorrectableError` for a weight that
    fails its ECC check."""

    def make(data: Any) -> AbftWeightVectors:
        vectors = abft_weight_vectors(data, tile)
        import_cupy().cuda.get_current_stream().synchronize()
        return vectors

    return b_protected.derived(("abft-b-vectors", tile.bn), make)  # type: ignore[no-any-return]


class _ZeroBlocks(threading.local):
    """This thread's status blocks known to be all zero, by device id (module docstring)."""

    def __init__(self) -> None:
        self.by_device: dict[int, Any] = {}


_zero_blocks = _ZeroBlocks()


def run_checked(a: Any, b: Any, variant: Variant, *, b_protected: Any = None
                ) -> tuple[CheckedLaunch, StatusReport]:
    """`launch_checked` and `read_status` for a caller that waits at once: the checked launch
    and its status report (one host synchronisation). Same arguments as `launch_checked`.

    The status block is this thread's reused zero block when it has one (module docstring),
    so a call whose checks pass queues no zeroing of its own. When the report is OK the
    returned `launch.status` goes back to the slot and serves the thread's next call: read
    nothing from it afterwards (the report already says what it held).
    """
    cp = import_cupy()
    device = cp.cuda.runtime.getDevice()
    status = _zero_blocks.by_device.pop(device, None)
    if status is None:
        status = cp.zeros(STATUS_WORDS, dtype=cp.uint32)
    launch = _launch(cp, a, b, variant, status, b_protected)
    report = read_status(status)
    if report is _OK:  # all eight words read back zero, after every write queued to them
        _zero_blocks.by_device[device] = status
    return launch, report


#: Page-locked rows for status read-backs, 4 blocks' worth to start.
_HOST_ROWS = PinnedBuffer(np.uint32, 4 * STATUS_WORDS)


@dataclass(frozen=True)
class QueuedStatusReads:
    """Copies of status blocks queued into page-locked rows (`queue_status_reads`)."""

    rows: npt.NDArray[np.uint32]
    stream: Any

    def reports(self) -> list[StatusReport]:
        """Wait for the stream (at once when a later read-back already waited for it) and
        decode each block, in the order the blocks were given."""
        self.stream.synchronize()
        return [_OK if not row.any() else StatusReport.from_words(row.copy())
                for row in self.rows]


def queue_status_reads(statuses: Sequence[Any]) -> QueuedStatusReads:
    """Queue a copy of each device status block to the host on the current stream; no
    wait. A caller that queues these before its own read-back (digests) pays one host
    synchronisation for both; `reports()` then decodes them. The rows belong to this
    thread and are reused by its next read (`safemon.kernels.pinned`): collect the
    reports first."""
    cp = import_cupy()
    stream = cp.cuda.get_current_stream()
    n = len(statuses)
    rows = _HOST_ROWS.get(cp, n * STATUS_WORDS)[:n * STATUS_WORDS].reshape(n, STATUS_WORDS)
    for row, status in zip(rows, statuses, strict=True):
        cp.cuda.runtime.memcpyAsync(row.ctypes.data, status.data.ptr, 4 * STATUS_WORDS,
                                    cp.cuda.runtime.memcpyDeviceToHost, stream.ptr)
    return QueuedStatusReads(rows, stream)


def read_status(status: Any) -> StatusReport:
    """Copy the status block to the host on the current stream and wait for it (the one
    host synchronisation of a checked call)."""
    cp = import_cupy()
    stream = cp.cuda.get_current_stream()
    row, ptr, zero_view = _host_row(cp)
    cp.cuda.runtime.memcpyAsync(ptr, status.data.ptr, 4 * STATUS_WORDS,
                                cp.cuda.runtime.memcpyDeviceToHost, stream.ptr)
    stream.synchronize()
    if zero_view.tobytes() == _ZERO_BYTES:
        return _OK
    return StatusReport.from_words(row[:STATUS_WORDS].copy())


_ZERO_BYTES = bytes(4 * STATUS_WORDS)


class _HostRow(threading.local):
    """This thread's first pinned status row: (words, address, byte view), cached because
    `ndarray.ctypes.data` and a fresh memoryview cost a microsecond each per call."""

    def __init__(self) -> None:
        self.row: tuple[npt.NDArray[np.uint32], int, memoryview] | None = None
        self.base: npt.NDArray[np.uint32] | None = None


_host_rows = _HostRow()


def _host_row(cp: Any) -> tuple[npt.NDArray[np.uint32], int, memoryview]:
    base = _HOST_ROWS.get(cp, STATUS_WORDS)
    cached = _host_rows.row
    if cached is None or _host_rows.base is not base:  # first call, or the buffer grew
        row = base[:STATUS_WORDS]
        cached = (row, row.ctypes.data, row.data.cast("B"))
        _host_rows.row, _host_rows.base = cached, base
    return cached


_OK = StatusReport(False, False, 0)
