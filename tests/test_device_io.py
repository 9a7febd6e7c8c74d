"""`safemon.device_io` without a GPU: the channel side's bookkeeping of imported CUDA IPC
handles (capacity, idle close, size checks, refusals) against a recording stand-in for the
CUDA runtime, and the digest and handle formats. The real CUDA calls run in
tests/runtime/test_device_io_gpu.py on a GPU."""

from __future__ import annotations

import types
from typing import Any

import pytest

from safemon import device_io
from safemon.device_io import ImportedBuffers, digest_hex, parse_digest, valid_handle
from safemon.errors import DeviceInputError


class FakeRuntime:
    """Records opens, closes and copies; every opened handle maps 1 MiB at a new pointer."""

    cudaIpcMemLazyEnablePeerAccess = 1

    class CUDARuntimeError(Exception):
        pass

    def __init__(self) -> None:
        self.opened: list[bytes] = []
        self.closed: list[int] = []
        self.copies: list[tuple[int, int, int]] = []
        self.refuse = False

    def ipcOpenMemHandle(self, handle: bytes, flags: int) -> int:
        if self.refuse:
            raise self.CUDARuntimeError("cudaErrorInvalidValue")
        self.opened.append(handle)
        return 0x1000_0000 * len(self.opened)

    def ipcCloseMemHandle(self, pointer: int) -> None:
        self.closed.append(pointer)

    def memcpyAsync(self, dst: int, src: int, n: int, kind: int, stream: int) -> None:
        self.copies.append((dst, src, n))

    def getDevice(self) -> int:
        return 3


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def rt(monkeypatch: pytest.MonkeyPatch) -> FakeRuntime:
    fake = FakeRuntime()
    cupy = types.SimpleNamespace(
        cuda=types.SimpleNamespace(
            runtime=fake,
            UnownedMemory=lambda ptr, size, owner, device: types.SimpleNamespace(
                ptr=ptr, size=size, owner=owner, device=device),
            MemoryPointer=lambda mem, offset: types.SimpleNamespace(mem=mem, offset=offset)),
        float32="float32",
        ndarray=lambda shape, dtype, memptr: types.SimpleNamespace(shape=shape, dtype=dtype,
                                                                   memptr=memptr))
    fake_cupy: Any = cupy
    fake_cupy.cuda.runtime.CUDARuntimeError = FakeRuntime.CUDARuntimeError
    monkeypatch.setattr(device_io, "_cupy", lambda: cupy)
    monkeypatch.setattr(device_io, "_allocation_size", lambda _p: 1 << 20)
    return fake


def _array(nbytes: int, ptr: int = 0xABC) -> Any:
    return types.SimpleNamespace(nbytes=nbytes, data=types.SimpleNamespace(ptr=ptr))


STREAM = types.SimpleNamespace(ptr=7)


def _handle(i: int) -> str:
    return f"{i:02x}" * 64


def test_a_handle_is_opened_once_and_the_least_recently_used_is_closed_at_capacity(rt: FakeRuntime) -> None:
    imp = ImportedBuffers(capacity=2, clock=Clock())
    imp.read(_handle(1), _array(64), STREAM)
    imp.read(_handle(1), _array(64), STREAM)
    imp.read(_handle(2), _array(64), STREAM)
    imp.read(_handle(1), _array(64), STREAM)  # 1 is now the most recently used
    imp.read(_handle(3), _array(64), STREAM)  # evicts 2
    assert [h.hex()[:2] for h in rt.opened] == ["01", "02", "03"]
    assert rt.closed == [0x2000_0000] and len(imp) == 2


def test_imports_unused_for_the_idle_time_are_closed(rt: FakeRuntime) -> None:
    clock = Clock()
    imp = ImportedBuffers(idle_s=30.0, clock=clock)
    imp.read(_handle(1), _array(64), STREAM)
    clock.now = 20.0
    imp.write(_handle(2), 0, _array(64), STREAM)
    clock.now = 40.0
    assert imp.close_idle() == 1 and rt.closed == [0x1000_0000] and len(imp) == 1
    imp.close_all()
    assert len(imp) == 0 and len(rt.closed) == 2


def test_copies_go_to_the_imported_pointer_plus_offset(rt: FakeRuntime) -> None:
    imp = ImportedBuffers(clock=Clock())
    imp.read(_handle(1), _array(256, ptr=0x50), STREAM)
    imp.write(_handle(2), 4096, _array(128, ptr=0x60), STREAM)
    assert rt.copies == [(0x50, 0x1000_0000, 256), (0x2000_0000 + 4096, 0x60, 128)]
    assert imp.pointer(_handle(2), 64, 64) == 0x2000_0000 + 64  # what `view` wraps


@pytest.mark.parametrize(("op", "needle"), [
    (lambda imp: imp.read(_handle(1), _array((1 << 20) + 4), STREAM), "x: .* outside the 1048576-byte"),
    (lambda imp: imp.pointer(_handle(1), 8, 1 << 20), "outside"),
    (lambda imp: imp.write(_handle(1), (1 << 20) - 64, _array(128), STREAM), "output slot: .*outside"),
    (lambda imp: imp.write(_handle(1), -4, _array(4), STREAM), "outside"),
    (lambda imp: imp.read("zz" * 64, _array(4), STREAM), "not a CUDA IPC handle"),
    (lambda imp: imp.read("ab" * 10, _array(4), STREAM), "not a CUDA IPC handle"),
])
def test_out_of_bounds_copies_and_malformed_handles_are_refused_before_any_copy(
        rt: FakeRuntime, op: Any, needle: str) -> None:
    imp = ImportedBuffers(clock=Clock())
    with pytest.raises(DeviceInputError, match=needle):
        op(imp)
    assert rt.copies == []


def test_a_handle_the_driver_refuses_is_a_device_input_error(rt: FakeRuntime) -> None:
    rt.refuse = True
    with pytest.raises(DeviceInputError, match="cannot open"):
        ImportedBuffers(clock=Clock()).read(_handle(1), _array(4), STREAM)


def test_digests_and_handles_travel_as_fixed_width_hex() -> None:
    assert digest_hex(2**64 - 1) == "f" * 16 and digest_hex(5) == "0000000000000005"
    assert parse_digest(digest_hex(123456789)) == 123456789
    assert parse_digest("123") is None and parse_digest("g" * 16) is None and parse_digest(5) is None
    assert valid_handle("0a" * 64) and not valid_handle("0a" * 63) and not valid_handle(None)


def test_a_range_gives_the_same_view_until_its_import_is_closed(rt: FakeRuntime) -> None:
    """`view` makes one array per (offset, shape) of an open import, on the device the
    import was opened on, and makes it afresh once the import was closed and reopened."""
    imp = ImportedBuffers(capacity=2, clock=Clock())
    x = imp.view(_handle(1), 0, (4, 8), "x")
    assert imp.view(_handle(1), 0, (4, 8), "x") is x
    assert x.shape == (4, 8) and x.memptr.mem.ptr == 0x1000_0000
    assert x.memptr.mem.size == 128 and x.memptr.mem.device == 3
    slot = imp.view(_handle(1), 4096, (4, 8))
    assert slot is not x and slot.memptr.mem.ptr == 0x1000_0000 + 4096
    assert imp.view(_handle(1), 0, (8, 4)) is not x  # another shape, another array
    imp.view(_handle(2), 0, (1, 1))
    imp.view(_handle(3), 0, (1, 1))  # evicts handle 1: its views go with it
    again = imp.view(_handle(1), 0, (4, 8), "x")
    assert again is not x and again.memptr.mem.ptr == 0x4000_0000
    with pytest.raises(DeviceInputError, match=r"x: .*outside"):
        imp.view(_handle(1), (1 << 20) - 64, (4, 8), "x")  # the range is checked every time


def test_fewer_than_two_imports_are_refused() -> None:
    """A request uses two imports at once (input and output); capacity 1 could evict one
    while a kernel still uses it."""
    with pytest.raises(ValueError, match="two imports"):
        ImportedBuffers(capacity=1)
