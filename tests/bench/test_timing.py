"""`safemon.bench.timing`, the one timer of the benchmarks: what it calls and returns.
No figure is asserted: timings depend on the machine."""

from __future__ import annotations

import numpy as np
import pytest

from safemon.bench.timing import kernel_samples_ms, median_kernel_ms, percentiles, wall_samples_s


def test_wall_samples_call_warmup_then_repeats_each_followed_by_sync() -> None:
    calls: list[str] = []
    times = wall_samples_s(lambda: calls.append("f"), 5, 2, sync=lambda: calls.append("s"))
    assert times.shape == (5,) and times.dtype == np.float64 and (times >= 0).all()
    assert calls == ["f", "f", "s"] + ["f", "s"] * 5


@pytest.mark.parametrize(("repeats", "warmup"), [(0, 0), (1, -1)])
def test_bad_repeat_counts_are_refused(repeats: int, warmup: int) -> None:
    with pytest.raises(ValueError, match="repeats"):
        wall_samples_s(lambda: None, repeats, warmup)
    with pytest.raises(ValueError, match="repeats"):
        kernel_samples_ms(None, lambda: None, repeats, warmup)


def test_percentiles_scale_and_interpolate_like_numpy() -> None:
    samples = [0.004, 0.001, 0.003, 0.002]
    assert percentiles(samples, (50,), 1e3) == pytest.approx((2.5,))
    p0, p100 = percentiles(np.asarray(samples), (0, 100))
    assert (p0, p100) == (0.001, 0.004)
    with pytest.raises(ValueError, match="no samples"):
        percentiles([], (50,))


@pytest.mark.gpu
def test_kernel_timer_returns_one_positive_time_per_repeat() -> None:
    from safemon.kernels.compiler import cuda_available

    if not cuda_available():
        pytest.skip("needs a CUDA device and CuPy")
    import cupy as cp

    x = cp.ones((256, 256), dtype=cp.float32)
    times = kernel_samples_ms(cp, lambda: x @ x, 4, 1)
    assert times.shape == (4,) and (times > 0).all()
    assert median_kernel_ms(cp, lambda: x @ x, 3, 1) > 0
