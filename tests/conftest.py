"""Shared test set-up: the `gpu` marker skips cleanly when no CUDA device is usable, and
`multigpu(n)` when fewer than n CUDA devices are visible (`CUDA_VISIBLE_DEVICES` counts)."""

from __future__ import annotations

import pytest

from safemon.kernels.compiler import cuda_available


def _device_count() -> int:
    if not cuda_available():
        return 0
    from safemon.kernels.compiler import import_cupy

    return int(import_cupy().cuda.runtime.getDeviceCount())


def _needed_gpus(item: pytest.Item) -> int | None:
    """The n of the item's `multigpu(n)` marker, None without one."""
    mark = item.get_closest_marker("multigpu")
    if mark is None:
        return None
    n = mark.args[0] if mark.args else mark.kwargs.get("gpus", 2)
    if isinstance(n, bool) or not isinstance(n, int) or n < 2:
        raise pytest.UsageError(f"{item.nodeid}: multigpu(n) needs an int n >= 2, got {n!r}")
    return n


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    available = cuda_available()
    count: int | None = None
    for item in items:
        if "gpu" in item.keywords and not available:
            item.add_marker(pytest.mark.skip(reason="needs a CUDA device and CuPy"))
        needed = _needed_gpus(item)
        if needed is None:
            continue
        if count is None:
            count = _device_count()
        if count < needed:
            item.add_marker(pytest.mark.skip(
                reason=f"needs {needed} CUDA devices, {count} visible"))
