"""`safemon.arrays` on the host: which inputs are accepted and how results come back."""

from __future__ import annotations

import numpy as np
import pytest

from safemon.arrays import ArrayKind, as_host
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
