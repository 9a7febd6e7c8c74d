"""`safemon.arrays` on the host: which inputs are accepted and how results come back."""

from __future__ import annotations

import importlib.util
from typing import ClassVar

import numpy as np
import pytest

from safemon.arrays import ArrayKind, array_library, as_host, device_view
from safemon.errors import InvalidInputError


def test_numpy_round_trips_as_numpy_and_non_contiguous_is_copied() -> None:
    """A NumPy input is returned C-contiguous (a transposed view is copied), kind numpy;
    restore gives a new NumPy array."""
    a = np.arange(6, dtype=np.float32).reshape(2, 3).T
    host, kind = as_host("x", a)
    assert host.flags.c_contiguous and np.array_equal(host, a)
    assert kind == ArrayKind("numpy")
    out = kind.restore(host)
    assert isinstance(out, np.ndarray) and out is not host


@pytest.mark.parametrize(("x", "needle"), [
    (np.zeros((2, 2), np.float64), "float32"),
    (np.zeros(4, np.float32), "2-D"),
    (np.zeros((0, 3), np.float32), "non-empty"),
    (np.array([[np.inf]], np.float32), "NaN or infinity"),
    ([[1.0]], "unsupported array type"),
])
def test_bad_inputs_are_invalid_input_errors(x: object, needle: str) -> None:
    """Wrong dtype, rank, emptiness, non-finite values and foreign types are refused with
    an InvalidInputError (a ValueError) before anything is sent."""
    with pytest.raises(InvalidInputError, match=needle):
        as_host("x", x)
    assert issubclass(InvalidInputError, ValueError)


class _DLPackOnly:
    """A host array that speaks DLPack and nothing else (no NumPy type, no array protocol)."""

    def __init__(self, a: np.ndarray, device_type: int = 1) -> None:
        self._a = a
        self._device_type = device_type

    def __dlpack__(self, **kwargs: object) -> object:
        return self._a.__dlpack__(**kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        return (self._device_type, 0)


def test_a_host_dlpack_producer_is_read_and_given_back_as_numpy() -> None:
    """Any host array that speaks DLPack is accepted (read with numpy.from_dlpack, a
    transposed layout copied) and its result comes back as a NumPy array."""
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    host, kind = as_host("x", _DLPackOnly(a.T))
    assert array_library("x", _DLPackOnly(a)) == "host"
    assert host.flags.c_contiguous and np.array_equal(host, a.T)
    assert kind == ArrayKind("numpy")
    assert isinstance(kind.restore(host), np.ndarray)


@pytest.mark.parametrize(("x", "needle"), [
    (_DLPackOnly(np.zeros((2, 2), np.float64)), "float32"),
    (_DLPackOnly(np.zeros((2, 2), np.float32), device_type=8), "DLPack device type 8"),
    (_DLPackOnly(np.array([[np.nan]], np.float32)), "NaN or infinity"),
])
def test_bad_dlpack_inputs_are_invalid_input_errors(x: object, needle: str) -> None:
    """The same rules hold for DLPack producers; a device other than CPU or CUDA (here 8,
    kDLMetal) is refused by its type number."""
    with pytest.raises(InvalidInputError, match=needle):
        as_host("x", x)


class _CudaInterfaceOnly:
    """Stands for a CUDA array of a library safemon does not know (Numba, PyCUDA...)."""

    __cuda_array_interface__: ClassVar[dict[str, object]] = {
        "shape": (2, 2), "typestr": "<f4", "data": (0, False), "version": 3}


def test_a_foreign_cuda_array_is_recognised_and_needs_cupy() -> None:
    """An object with `__cuda_array_interface__` is a CUDA array; without CuPy installed it
    is refused with a message that says how to pass it, never read as something else."""
    x = _CudaInterfaceOnly()
    assert array_library("x", x) == "cuda"
    if importlib.util.find_spec("cupy") is not None:
        pytest.skip("CuPy is installed: the GPU tests read foreign CUDA arrays")
    with pytest.raises(InvalidInputError, match="CuPy is not installed"):
        as_host("x", x)
    with pytest.raises(InvalidInputError, match="CuPy is not installed"):
        device_view("x", x)


def test_a_host_array_is_no_device_view() -> None:
    with pytest.raises(InvalidInputError, match="not a CUDA array"):
        device_view("x", np.zeros((2, 2), np.float32))
