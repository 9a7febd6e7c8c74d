"""Compile many kernel builds at once, in worker processes, before a run needs them.

A kernel build costs NVRTC seconds, and a run that compiles its builds one after the other
on a fresh machine (a benchmark over many variants, the GPU test suites) spends minutes
before it measures anything. CuPy keeps every compiled binary in its on-disk cache, keyed on
the code and the options (`KernelBuild.code`), so a process that asks for a build later
loads it from there. `precompile` fills that cache from a pool of spawned processes, one per
core but one. It is best effort: a build that fails to compile is left to the caller that
uses it, which compiles it again and raises `CompileError` with the NVRTC log.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context

from safemon.kernels.catalog import Variant

__all__ = ["MAX_WORKERS", "compile_variant", "precompile"]

#: The most worker processes `precompile` starts.
MAX_WORKERS = 15


def compile_variant(variant: Variant) -> bool:
    """Compile `variant`'s production kernel in this process (filling CuPy's on-disk cache);
    True when it compiled. Errors are the caller's to report when it uses the build."""
    try:
        from safemon.kernels.gpu import kernel_for

        kernel_for(variant)
    except Exception:
        return False
    return True


def precompile(variants: Iterable[Variant]) -> int:
    """Compile every distinct build among `variants` in a pool of spawned processes (at most
    `MAX_WORKERS`, and one core left free); returns how many compiled.

    The split factor is not part of a build (the kernel reads it from gridDim.z), so variants
    that differ only in it are compiled once.
    """
    from dataclasses import replace

    todo = list(dict.fromkeys(replace(v, split=1) for v in variants))
    if not todo:
        return 0
    workers = max(1, min(MAX_WORKERS, (os.cpu_count() or 2) - 1, len(todo)))
    if workers == 1:
        return sum(compile_variant(v) for v in todo)
    with ProcessPoolExecutor(workers, mp_context=get_context("spawn")) as pool:
        return sum(pool.map(compile_variant, todo, chunksize=1))
