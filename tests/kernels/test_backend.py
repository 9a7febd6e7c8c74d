"""`Backend`: parsing with a typed error, what a member means, resolution, and that the
configuration keeps its strings (YAML, environment, the JSON handed to channel processes)."""

from __future__ import annotations

import json

import pytest

from safemon.config import load_config
from safemon.errors import BackendUnavailableError, InvalidInputError
from safemon.kernels.backend import BACKENDS, Backend, resolve_backend
from safemon.kernels.compiler import cuda_available


def test_parse_accepts_the_configuration_strings_and_members() -> None:
    assert [Backend.parse(n) for n in ("auto", "numpy", "cupy")] == [
        Backend.AUTO, Backend.NUMPY, Backend.CUPY]
    assert Backend.parse(Backend.CUPY) is Backend.CUPY
    assert BACKENDS == ("auto", "numpy", "cupy")


@pytest.mark.parametrize("name", ["opencl", "CUPY", "", "numpy "])
def test_parse_refuses_other_names_with_a_typed_error(name: str) -> None:
    with pytest.raises(InvalidInputError, match="unknown backend"):
        Backend.parse(name)
    with pytest.raises(ValueError, match="known: auto, numpy, cupy"):
        resolve_backend(name)


def test_members_say_whether_they_are_resolved_and_on_the_device() -> None:
    assert [b.resolved for b in Backend] == [False, True, True]
    assert [b.on_device for b in Backend] == [False, False, True]
    assert Backend.CUPY == "cupy" and f"{Backend.NUMPY}" == "numpy"


def test_resolution_never_returns_auto_and_keeps_numpy() -> None:
    assert resolve_backend("numpy") is Backend.NUMPY
    expected = Backend.CUPY if cuda_available() else Backend.NUMPY
    assert resolve_backend("auto") is expected


@pytest.mark.skipif(cuda_available(), reason="a CUDA device is usable here")
def test_cupy_without_a_device_is_refused() -> None:
    with pytest.raises(BackendUnavailableError):
        resolve_backend("cupy")


def test_configuration_keeps_its_strings() -> None:
    """The environment and YAML give the member; the JSON dump says the same string."""
    cfg = load_config(None, env={"SAFEMON_BACKEND": "numpy"})
    assert cfg.backend is Backend.NUMPY
    assert json.loads(cfg.model_dump_json())["backend"] == "numpy"
    assert load_config(None, env={}).backend is Backend.AUTO
