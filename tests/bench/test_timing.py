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


def test_bench_precompiles_exactly_the_variants_it_times() -> None:
    """`run_bench` compiles its builds in parallel first (safemon.kernels.precompile): the
    list holds every variant a size times, that size's unprotected baseline of the same
    tiling and split, and the variant each API call picks."""
    from safemon.bench.api import API_CALLS
    from safemon.bench.overhead import _api_variants, _kernel_variants, _variants_at
    from safemon.dims import parse_dims_list
    from safemon.kernels.api import _variant_for
    from safemon.kernels.catalog import Variant, make_variant

    dims_list = parse_dims_list("80,1x4096x4096,64x4096x4096")
    keep = {"ones/M", "twos/M"}

    def wanted(v: Variant) -> bool:
        return f"{v.checksum}/{v.level}" in keep and v.rmt == "none" and not v.abft

    planned = _kernel_variants(dims_list, ["fma"], wanted)
    for d in dims_list:
        timed = _variants_at(d, "fma", wanted)
        assert len(timed) == 2 and set(timed) <= set(planned)
        base = make_variant(None, None, "fma", timed[0].tile, timed[0].split)
        assert base in planned
    api = _api_variants(dims_list)
    for d in dims_list:
        a, b = np.zeros((d.m, d.k), np.float32), np.zeros((d.k, d.n), np.float32)
        for _, checksum, level, mode, _ in API_CALLS:
            lv = None if checksum is None else level or "I"
            assert _variant_for(a, b, checksum, lv, mode, None, None) in api
