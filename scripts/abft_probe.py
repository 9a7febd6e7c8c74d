"""Device probe: the ABFT check's cost at given shapes, current abft.cu against a previous one.

usage: python3 scripts/abft_probe.py [--sizes 64x4096x4096:small:4,4096x4096x4096:large:1]
                                     [--iters 20] [--old DIR]

For each size (M×N×K, tile, split) it times with CUDA events (median of `--iters`, after two
warm-ups; the cases take turns call by call) the unprotected kernel alone, with the current ABFT check (`launch_checked` of the
`abft=True` variant), with the row-only check (`abft="rows"`: B's vectors kept as a
registered weight keeps them, once in one stream and once with the row products on the side
stream, and made on each call as for a raw B) and, with `--old DIR`, with the check of a
previous tree (DIR holds
that tree's `safemon/kernels/abft.py` and `cuda/abft.cu` side by side, e.g. from `git show
REV:path`; its own `launch_abft` queues it after the same unprotected kernel), all in the same
process; every checked run must pass. Under `ncu --kernel-name regex:safemon_abft` it
gives each check kernel's own duration.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

import numpy as np


def _old_module(tree: Path) -> Any:
    """A previous `safemon/kernels/abft.py` (`tree`/abft.py) launching its own abft.cu
    (`tree`/abft.cu), loaded beside the current one: its kernels are cached under another key
    (`("abft-old",)`), so neither is served the other's functions."""
    import types

    src = (tree / "abft.py").read_text()
    src = src.replace('Path(__file__).parent / "cuda" / "abft.cu"',
                      f'Path({str(tree / "abft.cu")!r})')
    src = src.replace('("abft",)', '("abft-old",)')
    if '("abft-old",)' not in src or str(tree / "abft.cu") not in src:
        raise ValueError(f"{tree / 'abft.py'}: not the launch code this probe knows how to load")
    mod = types.ModuleType("abft_old")
    sys.modules["abft_old"] = mod  # dataclasses look their module up there
    exec(compile(src, str(tree / "abft.py"), "exec"), mod.__dict__)
    return mod


def _cases(a: Any, b: Any, plain: Any, checked: Any, rows: Any, old: str | None
           ) -> dict[str, Any]:
    """The timed calls of one size: each queues its work and returns its status block."""
    import cupy as cp

    from safemon.kernels.abft import abft_weight_vectors, begin_abft, finish_abft
    from safemon.kernels.checked import STATUS_WORDS, launch_checked
    from safemon.kernels.gpu import gpu_matmul

    m, k = a.shape
    n = b.shape[1]
    weights = abft_weight_vectors(b, rows.tile)

    def run_rows(side: bool, given: bool) -> Any:
        status = cp.zeros(STATUS_WORDS, dtype=cp.uint32)
        pending = begin_abft(m, n, k, rows, side=side, weights=weights if given else None)
        c, _ = gpu_matmul(a, b, rows, status=status)
        finish_abft(pending, a, b, c, int(status.data.ptr))
        return status

    def run_plain() -> Any:
        return launch_checked(a, b, plain).status

    def run_new() -> Any:
        return launch_checked(a, b, checked).status

    old_mod = _old_module(Path(old)) if old else None

    def run_old() -> Any:
        status = cp.zeros(STATUS_WORDS, dtype=cp.uint32)
        c, _ = gpu_matmul(a, b, plain, status=status)
        old_mod.launch_abft(a, b, c, checked, int(status.data.ptr))
        return status

    cases = {"unprotected": run_plain, "abft (current)": run_new,
             "abft-rows (weight vectors)": lambda: run_rows(False, True),
             "abft-rows (weight vectors, side stream)": lambda: run_rows(True, True),
             "abft-rows (B's vectors per call)": lambda: run_rows(False, False)}
    if old:
        cases["abft (previous)"] = run_old
    return cases


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="64x4096x4096:small:4,4096x4096x4096:large:1")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--old", default=None)
    args = ap.parse_args()
    import cupy as cp

    from safemon.kernels.catalog import make_variant
    from safemon.kernels.checked import read_status

    for spec in args.sizes.split(","):
        size, tile, split = spec.split(":")
        m, n, k = (int(v) for v in size.split("x"))
        rng = np.random.default_rng(0)
        a = cp.asarray(rng.standard_normal((m, k), dtype=np.float32))
        b = cp.asarray(rng.standard_normal((k, n), dtype=np.float32))
        plain = make_variant(None, None, "fma", tile, int(split))
        checked = make_variant(None, None, "fma", tile, int(split), abft=True)
        rows = make_variant(None, None, "fma", tile, int(split), abft="rows")

        cases = _cases(a, b, plain, checked, rows, args.old)
        times: dict[str, list[float]] = {name: [] for name in cases}
        for _ in range(args.iters + 2):  # the cases in turn, so that drift hits each alike
            for name, fn in cases.items():
                start, end = cp.cuda.Event(), cp.cuda.Event()
                start.record()
                status = fn()
                end.record()
                end.synchronize()
                times[name].append(cp.cuda.get_elapsed_time(start, end) * 1e3)
                assert read_status(status).ok, (name, size)  # after the timed window
        got = {name: statistics.median(t[2:]) for name, t in times.items()}
        base = got["unprotected"]
        print(f"{size} {plain.name}: " + ", ".join(
            f"{name} {t:.1f} µs ({t / base:.2f}×)" for name, t in got.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
