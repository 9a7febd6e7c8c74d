"""Shared test set-up: the `gpu` marker skips cleanly when no CUDA device is usable."""

from __future__ import annotations

import pytest

from safemon.kernels.compiler import cuda_available


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if cuda_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device and CuPy")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
