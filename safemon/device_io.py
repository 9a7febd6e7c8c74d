"""Device-resident requests: the CUDA IPC buffers between an app and its channels.

On one host, a request whose x is a CUDA array need not cross host memory
(docs/PROTOCOL.md section 11). The *client* owns three buffers per CUDA device, allocated
with cudaMalloc and exported with cudaIpcGetMemHandle (`ExchangeBuffers`):

- two **input** buffers, used in turn (`INPUT_BUFFERS`): x is copied into the next one
  (device to device, on the caller's stream) before each request, and its safemon-digest64
  (`safemon.digest`) travels in the request;
- the **output** buffer: one slot per configured channel; channel i writes its C (or a
  model's output) into slot i and answers with digests only.

The reply names the released channel's slot and the voted C digest; the client digests
that slot on its own device and returns a copy only if the two agree, so the bytes the app
gets are the bytes the channels voted on, whatever happened between them.

A *channel* opens each handle once (`ImportedBuffers`: cudaIpcOpenMemHandle with lazy peer
access, so a channel on another GPU reads and writes over NVLink or PCIe) and keeps at
most `IMPORT_CAPACITY` open, closing the least recently used and any left unused for
`IMPORT_IDLE_S`. Every range a channel reads or writes is checked against the imported
allocation's own size (cuMemGetAddressRange) first, so a foreign, stale or undersized
handle is a `DeviceInputError`, never an out-of-bounds access. For a product, a channel's
copy kernels read x from the input buffer and write the output into its slot directly
(`view`); for a whole-model request x is copied in first (`read`) and the output written by a
kernel. Either way no copy runs between the step's kernels (measured:
scripts/channel_step_probe.py).

Why client-owned buffers (the first plan had a daemon-owned pool): the daemon then needs no
CUDA context of its own (process channels keep the GPU work out of the voter's process),
and a client that dies takes its allocations with it; what a channel still maps is closed
within `IMPORT_IDLE_S` or at the next eviction, so a dead client's memory is held by at most
`IMPORT_CAPACITY` imports per channel, for a bounded time. A living client never frees a
buffer it exported (a grown buffer's predecessor is kept until the client object goes):
CUDA leaves an exporter's cudaFree before the importers' cudaIpcCloseMemHandle undefined.
That still happens when a client process ends while channels hold its buffers open; a
killed client did not disturb the channels in the GPU test
(tests/runtime/test_device_io_gpu.py), and a channel that did fail there would be a channel
fault (restart), never a release: every released slot is checked against the voted digest.

CuPy is imported lazily: nothing here runs on a host without a GPU.
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from safemon.digest import DIGEST_NAME
from safemon.errors import DeviceInputError, DisagreementError

__all__ = [
    "HANDLE_HEX_CHARS",
    "IMPORT_CAPACITY",
    "IMPORT_IDLE_S",
    "INPUT_BUFFERS",
    "SLOT_ALIGN_BYTES",
    "ExchangeBuffers",
    "ImportedBuffers",
    "StagedRequest",
    "digest_hex",
    "output_layout",
    "parse_digest",
    "slot_stride",
]

HANDLE_HEX_CHARS = 128
"""A cudaIpcMemHandle_t is 64 bytes; it travels as 128 lower-case hex characters."""

IMPORT_CAPACITY = 12
"""Handles a channel keeps open at once (least recently used closed first): a client
exports three (`INPUT_BUFFERS` inputs and one output), so four clients' buffers stay open
at once, as two-buffer clients' did at 8, without an import closed and opened again (a
driver call, cudaIpcOpenMemHandle) on every request."""

IMPORT_IDLE_S = 30.0
"""A channel closes a handle no request has used for this long (seconds)."""

#: Views kept per import (`ImportedBuffers.view`); more distinct ranges start the set afresh.
_VIEWS_PER_IMPORT = 16

_MIN_BUFFER_BYTES = 1 << 20
_CUDA_MEMCPY_DEFAULT = 4  # cudaMemcpyDefault: direction (and device) from the pointers (UVA)

#: Alignment of output slots within the output allocation (bytes).
SLOT_ALIGN_BYTES = 256


def _allocation_bytes(nbytes: int) -> int:
    """The size of the exported allocation a client makes for `nbytes`: the next power of
    two, at least `_MIN_BUFFER_BYTES`."""
    return max(_MIN_BUFFER_BYTES, 1 << (int(nbytes) - 1).bit_length())


def _output_need_bytes(slot_bytes: int, slots: int) -> int:
    """Bytes of output allocation that `slots` slots of at least `slot_bytes` each need."""
    return -(-int(slot_bytes) // SLOT_ALIGN_BYTES) * SLOT_ALIGN_BYTES * slots


def output_layout(current: int | None, out_bytes: int, slots: int) -> tuple[int, int]:
    """(allocation size, slot stride) in bytes for a request whose output is `out_bytes`,
    given the size of the output allocation the client holds (`current`, None for none):
    the same allocation, and so the same stride, while its slots hold the output; else a
    new allocation (`_allocation_bytes`)."""
    need = _output_need_bytes(out_bytes, slots)
    size = current if current is not None and current >= need else _allocation_bytes(need)
    return size, slot_stride(size, slots)


def slot_stride(allocation: int, slots: int) -> int:
    """The byte stride of the output slots in an allocation of `allocation` bytes: its share
    per slot, aligned down to `SLOT_ALIGN_BYTES`. It depends on the allocation only, never on
    a request, so channel i writes within [i × stride, (i + 1) × stride) whatever request it
    is on: a channel still on an earlier, larger request cannot write over the slot released
    for a later one (docs/ROBUSTNESS.md, "A late channel wrote over a released slot")."""
    return (int(allocation) // slots) // SLOT_ALIGN_BYTES * SLOT_ALIGN_BYTES


def digest_hex(value: int) -> str:
    """A 64-bit digest as the 16 hex characters that travel in meta."""
    return f"{value & (2**64 - 1):016x}"


def parse_digest(text: object) -> int | None:
    """The digest in `text` (16 hex characters), or None if it is not one."""
    if not isinstance(text, str) or len(text) != 16:
        return None
    try:
        return int(text, 16)
    except ValueError:
        return None


def valid_handle(text: object) -> bool:
    """Whether `text` has the form of an exported handle (128 hex characters)."""
    if not isinstance(text, str) or len(text) != HANDLE_HEX_CHARS:
        return False
    try:
        bytes.fromhex(text)
    except ValueError:
        return False
    return True


def _cupy() -> Any:
    from safemon.kernels.compiler import import_cupy

    return import_cupy()


# ---------------------------------------------------------------- client side


@dataclass(frozen=True)
class StagedRequest:
    """What a device-resident request carries (docs/PROTOCOL.md section 11)."""

    x_ipc: str
    x_rows: int
    x_cols: int
    x_digest: str
    out_ipc: str
    #: the output allocation's slot stride (`slot_stride`): slot i starts at i × this
    out_slot_bytes: int
    #: columns of the (x_rows, out_cols) float32 output (client side only; not sent)
    out_cols: int

    def meta(self) -> dict[str, str | int]:
        """The request meta keys of this staging."""
        return {"x_ipc": self.x_ipc, "x_rows": self.x_rows, "x_cols": self.x_cols,
                "x_digest": self.x_digest, "out_ipc": self.out_ipc,
                "out_slot_bytes": self.out_slot_bytes}


@dataclass
class _Exported:
    memory: Any  # cupy.cuda.Memory: its own cudaMalloc, so its pointer is the handle's base
    handle: str


#: Input buffers a client stages into in turn (per device). A 2oo3 request is answered once
#: two channels agree, and the client then stages its next x at once; the third channel may
#: not have read this request's x yet. With one buffer it would read the next x, see that
#: its digest is not the request's, and be counted as the disagreeing minority of a request
#: it computed correctly (seen on the H100 with the torch example's back-to-back requests,
#: evidence/h200-2026-12-06-stop52/). With two, a channel must fall a whole request behind
#: before the client writes over the x it has yet to read.
INPUT_BUFFERS = 2


class ExchangeBuffers:
    """The client's exported buffers per CUDA device: `INPUT_BUFFERS` input buffers, staged
    into in turn, and one output buffer. Not thread-safe (one per `Client`). Buffers grow (a
    new allocation and handle) when a request needs more; they are never shrunk while the
    client lives.

    Args:
        slots: output slots per request (the deployment's channel count).
    """

    def __init__(self, slots: int) -> None:
        if slots < 1:
            raise ValueError(f"slots must be >= 1, got {slots}")
        self.slots = slots
        #: per turn, device -> input buffer; `_turn[device]` is the next turn to stage into
        self._inputs: list[dict[int, _Exported]] = [{} for _ in range(INPUT_BUFFERS)]
        self._turn: dict[int, int] = {}
        self._outputs: dict[int, _Exported] = {}
        #: buffers replaced by bigger ones: kept, never freed while this object lives,
        #: because channels may still have them open (CUDA leaves freeing an exported
        #: allocation before its importers close it undefined)
        self._retired: list[_Exported] = []

    def _buffer(self, table: dict[int, _Exported], device: int, nbytes: int) -> _Exported:
        cp = _cupy()
        buf = table.get(device)
        if buf is None or buf.memory.size < nbytes:
            size = _allocation_bytes(nbytes)
            with cp.cuda.Device(device):
                memory = cp.cuda.Memory(size)
                handle = bytes(cp.cuda.runtime.ipcGetMemHandle(memory.ptr)).hex()
            if buf is not None:
                self._retired.append(buf)
            buf = table[device] = _Exported(memory, handle)
        return buf

    def stage(self, x: Any, out_cols: int, stream: Any = None) -> StagedRequest:
        """Copy `x` (a C-contiguous float32 CuPy array, already checked) into the next input
        buffer of its device in turn (`INPUT_BUFFERS`: the previous request's x stays where
        it is) and reserve output slots of (rows, `out_cols`) float32. The slots sit at the
        output allocation's fixed stride (`slot_stride`); a request whose output does not
        fit in one grows a new allocation.

        Raises:
            InvalidInputError: x holds NaN or infinity (checked on the device).
        """
        from safemon.errors import InvalidInputError
        from safemon.kernels.model_gpu import copy_digest

        cp = _cupy()
        device = int(x.device.id)
        rows, cols = (int(d) for d in x.shape)
        turn = self._turn.get(device, 0)
        self._turn[device] = (turn + 1) % INPUT_BUFFERS
        inp = self._buffer(self._inputs[turn], device, int(x.nbytes))
        held = self._outputs.get(device)
        size, stride = output_layout(None if held is None else int(held.memory.size),
                                     rows * int(out_cols) * 4, self.slots)
        out = self._buffer(self._outputs, device, size)
        with cp.cuda.Device(device), (stream if stream is not None else contextlib.nullcontext()):
            staged = cp.ndarray(x.shape, cp.float32, cp.cuda.MemoryPointer(inp.memory, 0))
            # One kernel copies x in, digests and finite-checks it; its read-back is the one
            # wait of the staging (x is in place when it returns).
            digest, nonfinite = copy_digest(x, staged)
            if nonfinite:
                raise InvalidInputError("x contains NaN or infinity")
        return StagedRequest(inp.handle, rows, cols, digest_hex(digest), out.handle,
                             stride, int(out_cols))

    def take(self, device: int, staged: StagedRequest, slot: int, digest: str,
             stream: Any = None) -> Any:
        """A new CuPy array holding output slot `slot`, once its digest on the device equals
        the voted `digest`.

        Raises:
            DisagreementError: the slot's bytes are not the ones the channels voted on
                (nothing is returned).
        """
        from safemon.kernels.model_gpu import copy_digest

        cp = _cupy()
        if not 0 <= slot < self.slots:
            raise DisagreementError(f"the daemon released slot {slot} of {self.slots}")
        out = self._outputs[device]
        rows, cols = staged.x_rows, staged.out_cols
        with cp.cuda.Device(device), (stream if stream is not None else contextlib.nullcontext()):
            view = cp.ndarray((rows, cols), cp.float32,
                              cp.cuda.MemoryPointer(out.memory, slot * staged.out_slot_bytes))
            result = cp.empty((rows, cols), cp.float32)
            got, _nonfinite = copy_digest(view, result)  # the copy is what is digested
        if digest_hex(got) != digest:
            raise DisagreementError(
                f"the released output in slot {slot} does not match the voted {DIGEST_NAME} "
                f"({digest_hex(got)} against {digest}): nothing released")
        return result


# ---------------------------------------------------------------- channel side


@dataclass
class _Import:
    pointer: int
    size: int
    used: float
    device: int
    #: float32 views made by `ImportedBuffers.view`, by (offset, shape): a request's x and
    #: output slot are the same ranges request after request, and a CuPy array over an
    #: imported pointer costs tens of microseconds to make (H100, py-spy of a daemon with
    #: inline channels, evidence/h100-2026-11-25-digests/). Dropped with the import.
    views: dict[tuple[int, tuple[int, ...]], Any] = field(default_factory=dict)


def _allocation_size(pointer: int) -> int:
    """The size of the allocation `pointer` starts (cuMemGetAddressRange), in bytes."""
    lib = ctypes.CDLL("libcuda.so.1")
    base = ctypes.c_uint64()
    size = ctypes.c_size_t()
    get = getattr(lib, "cuMemGetAddressRange_v2", None) or lib.cuMemGetAddressRange
    rc = int(get(ctypes.byref(base), ctypes.byref(size), ctypes.c_uint64(pointer)))
    if rc != 0:
        raise DeviceInputError(f"cuMemGetAddressRange of an imported buffer returned {rc}")
    return int(size.value) - (pointer - int(base.value))


class ImportedBuffers:
    """A channel's open CUDA IPC imports, keyed by handle. Not thread-safe (the channel's
    loop owns it).

    Args:
        capacity: imports kept open at once (at least 2).
        idle_s: `close_idle` closes imports unused this long.
        clock: monotonic seconds (injected for tests).
    """

    def __init__(self, capacity: int = IMPORT_CAPACITY, idle_s: float = IMPORT_IDLE_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if capacity < 2:
            raise ValueError(f"capacity {capacity}: a request uses two imports at once")
        self.capacity = capacity
        self.idle_s = idle_s
        self._clock = clock
        self._open: collections.OrderedDict[str, _Import] = collections.OrderedDict()

    def __len__(self) -> int:
        return len(self._open)

    def _get(self, handle: str) -> _Import:
        found = self._open.get(handle)
        if found is not None:
            self._open.move_to_end(handle)
            found.used = self._clock()
            return found
        if not valid_handle(handle):
            raise DeviceInputError("not a CUDA IPC handle (128 hex characters)")
        cp = _cupy()
        rt = cp.cuda.runtime
        try:
            pointer = int(rt.ipcOpenMemHandle(bytes.fromhex(handle),
                                              getattr(rt, "cudaIpcMemLazyEnablePeerAccess", 1)))
        except cp.cuda.runtime.CUDARuntimeError as exc:
            raise DeviceInputError(f"cannot open the CUDA IPC handle: {exc}") from None
        try:
            size = _allocation_size(pointer)
        except DeviceInputError:
            rt.ipcCloseMemHandle(pointer)
            raise
        while len(self._open) >= self.capacity:
            self._close(next(iter(self._open)))
        entry = self._open[handle] = _Import(pointer, size, self._clock(),
                                             int(rt.getDevice()))
        return entry

    def _close(self, handle: str) -> None:
        entry = self._open.pop(handle)
        _cupy().cuda.runtime.ipcCloseMemHandle(entry.pointer)

    def pointer(self, handle: str, offset: int, nbytes: int, what: str = "the range") -> int:
        """The device address of bytes [offset, offset + nbytes) of the buffer `handle`,
        opening it if needed; `what` names the range in the error.

        Raises:
            DeviceInputError: the handle cannot be opened or the range lies outside it.
        """
        entry = self._get(handle)
        if offset < 0 or offset + nbytes > entry.size:
            raise DeviceInputError(
                f"{what}: bytes [{offset}, {offset + nbytes}) lie outside the "
                f"{entry.size}-byte imported buffer")
        return entry.pointer + offset

    def view(self, handle: str, offset: int, shape: tuple[int, ...],
             what: str = "the range") -> Any:
        """A float32 CuPy array of `shape` over the buffer `handle` from byte `offset`
        (C order, no copy): a channel's product reads x from it, and its output is written
        into it directly. The same range gives the same array object while the import is
        open (callers must not reshape it in place). Valid until the import is closed: by
        `close_idle`, `close_all`, or eviction when a later `pointer` opens another handle
        at capacity (the two most recently used, a request's input and output buffers, are
        never evicted then).

        Raises:
            DeviceInputError: as `pointer`.
        """
        shape = tuple(int(d) for d in shape)
        nbytes = 4 * math.prod(shape)
        ptr = self.pointer(handle, offset, nbytes, what)  # checks the range, marks the use
        entry = self._open[handle]
        key = (offset, shape)
        view = entry.views.get(key)
        if view is None:
            cp = _cupy()
            if len(entry.views) >= _VIEWS_PER_IMPORT:
                entry.views.clear()
            mem = cp.cuda.UnownedMemory(ptr, nbytes, self, entry.device)
            view = entry.views[key] = cp.ndarray(shape, dtype=cp.float32,
                                                 memptr=cp.cuda.MemoryPointer(mem, 0))
        return view

    def read(self, handle: str, into: Any, stream: Any) -> None:
        """Copy the first `into.nbytes` bytes of the buffer `handle` (x) into the CuPy array
        `into` with the copy engine, ordered on `stream` (not waited for).

        Raises:
            DeviceInputError: as `pointer`.
        """
        ptr = self.pointer(handle, 0, into.nbytes, "x")
        _cupy().cuda.runtime.memcpyAsync(into.data.ptr, ptr, into.nbytes,
                                         _CUDA_MEMCPY_DEFAULT, stream.ptr)

    def write(self, handle: str, offset: int, source: Any, stream: Any) -> None:
        """Copy the CuPy array `source` to byte `offset` of the buffer `handle` (an output
        slot) with the copy engine, ordered on `stream` (not waited for).

        Raises:
            DeviceInputError: as `pointer`.
        """
        ptr = self.pointer(handle, offset, source.nbytes, "the output slot")
        _cupy().cuda.runtime.memcpyAsync(ptr, source.data.ptr, source.nbytes,
                                         _CUDA_MEMCPY_DEFAULT, stream.ptr)

    def close_idle(self) -> int:
        """Close every import unused for `idle_s`; returns how many were closed."""
        horizon = self._clock() - self.idle_s
        stale = [h for h, e in self._open.items() if e.used < horizon]
        for h in stale:
            self._close(h)
        return len(stale)

    def close_all(self) -> None:
        """Close every import (the channel is leaving)."""
        for h in list(self._open):
            self._close(h)
