"""Compile GPU test kernels in parallel before the tests run them (device machine only).

A kernel build takes NVRTC seconds, and the GPU suites use hundreds of builds: compiled one
after the other in the test process, the compiles alone outlast a device call. CuPy keeps
every compiled binary in its on-disk cache, keyed on the code and the options
(`KernelBuild.code`), and a process that asks for the same build later loads it from there.
So the suites compile their builds in worker processes first, one per core, and the tests
then load them. Compiling is best effort here: a build that fails is left to the test that
uses it, which compiles it itself and reports the NVRTC log.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context

from safemon.kernels.catalog import Variant


def warm_kernel(variant: Variant) -> bool:
    """Compile `variant`'s kernel in this process (filling CuPy's on-disk cache); True when
    it compiled. Meant for pool workers: errors are the test's to report."""
    try:
        from safemon.kernels.gpu import kernel_for

        kernel_for(variant)
    except Exception:
        return False
    return True


def warm_kernels(variants: Iterable[Variant]) -> int:
    """Compile every distinct variant's kernel in a pool of spawned workers (one per core
    but one); returns how many compiled."""
    todo = list(dict.fromkeys(variants))
    if not todo:
        return 0
    workers = max(1, min(15, (os.cpu_count() or 2) - 1, len(todo)))
    with ProcessPoolExecutor(workers, mp_context=get_context("spawn")) as pool:
        return sum(pool.map(warm_kernel, todo, chunksize=1))
