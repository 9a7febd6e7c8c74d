"""The one timer of the benchmarks: GPU time with CUDA events, wall time, percentiles.

GPU time (`kernel_samples_ms`, `median_kernel_ms`): `warmup` untimed calls, a stream
synchronisation, then `repeats` timed calls. Before each timed call a spin kernel that keeps
the stream busy for `spin_ns` nanoseconds is queued, so the timed work is already queued
when its start event fires and Python's launch latency is not counted. Events are recorded
on the current stream (the null stream unless the caller made another current).

Wall time (`wall_samples_s`): `time.perf_counter()` around the call and a synchronisation of
the current stream, so work still queued is paid for: what a user sees.

Every figure is reported, never asserted in a test (timings depend on the machine).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = [
    "SPIN_NS",
    "kernel_samples_ms",
    "median_kernel_ms",
    "percentiles",
    "wall_samples_s",
]

#: Default busy time queued before each timed call, in nanoseconds: longer than Python's
#: launch path for one kernel.
SPIN_NS = 50_000


def kernel_samples_ms(
    cp: Any, fn: Callable[[], object], repeats: int, warmup: int, *, spin_ns: int = SPIN_NS,
) -> npt.NDArray[np.float64]:
    """GPU milliseconds of each of `repeats` calls of `fn` (CUDA events, launch latency hidden).

    Args:
        cp: the `cupy` module.
        fn: queues the work to time on the current stream; its return value is ignored.
        repeats: timed calls (at least 1).
        warmup: untimed calls first (0 or more).
        spin_ns: busy time queued before each timed call, nanoseconds.

    Raises:
        ValueError: repeats < 1 or warmup < 0.
    """
    if repeats < 1 or warmup < 0:
        raise ValueError(f"need repeats >= 1 and warmup >= 0, got {repeats}, {warmup}")
    from safemon.ecc.gpu import spin_function

    spin = spin_function()
    for _ in range(warmup):
        fn()
    cp.cuda.get_current_stream().synchronize()
    times = np.empty(repeats, dtype=np.float64)
    for i in range(repeats):
        start, stop = cp.cuda.Event(), cp.cuda.Event()
        spin((1,), (1,), (np.uint64(spin_ns),))
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times[i] = cp.cuda.get_elapsed_time(start, stop)
    return times


def median_kernel_ms(
    cp: Any, fn: Callable[[], object], repeats: int, warmup: int, *, spin_ns: int = SPIN_NS,
) -> float:
    """The median of `kernel_samples_ms` (same arguments and errors), in milliseconds."""
    return float(np.median(kernel_samples_ms(cp, fn, repeats, warmup, spin_ns=spin_ns)))


def wall_samples_s(
    fn: Callable[[], object], repeats: int, warmup: int,
    sync: Callable[[], object] | None = None,
) -> npt.NDArray[np.float64]:
    """Wall seconds of each of `repeats` calls of `fn`, each followed by `sync()` when given.

    Raises:
        ValueError: repeats < 1 or warmup < 0.
    """
    if repeats < 1 or warmup < 0:
        raise ValueError(f"need repeats >= 1 and warmup >= 0, got {repeats}, {warmup}")
    for _ in range(warmup):
        fn()
    if sync is not None:
        sync()
    times = np.empty(repeats, dtype=np.float64)
    for i in range(repeats):
        t0 = time.perf_counter()
        fn()
        if sync is not None:
            sync()
        times[i] = time.perf_counter() - t0
    return times


def percentiles(samples: Sequence[float] | npt.NDArray[np.float64], qs: Sequence[float],
                scale: float = 1.0) -> tuple[float, ...]:
    """The `qs` percentiles (0..100, NumPy's linear interpolation) of `samples` × `scale`.

    Raises:
        ValueError: no samples.
    """
    arr = np.asarray(samples, dtype=np.float64)
    if arr.size == 0:
        raise ValueError("percentiles of no samples")
    return tuple(float(v) for v in np.percentile(arr * scale, list(qs)))
