"""The GPU determinism audit (`safemon audit determinism`), in seed 003's terms.

For every shipped MMM variant (`shipped_variants`: the production builds of
`safemon.kernels.gpu.nvcc_builds`, found through the catalog), under two conditions (alone;
under load from another stream of this process and from another process):
- `repeats` runs of the shipped kernel through `gpu_matmul`, each compared with the first:
  the number of differing elements of C and of the ES array (bit for bit);
- `repeats` runs of the instrumented build (`kernels.block_order_build`), which records the
  rank at which each block started; Kendall tau of those orderings against the first run and
  against block-index order; its C and ES must equal the shipped build's.
Contrasts under the same conditions: a float `atomicAdd` sum (`cuda/atomic_sum.cu`, with the
warps' arrival ranks), CuPy's `sum` and cuBLAS (`cupy.matmul`).

The result is the `safemon.audit.determinism/1` document, written with a plot of the
orderings under `out_dir`.
"""

from __future__ import annotations

import datetime as dt
import json
import platform
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from safemon.audit.determinism import differing_elements, tau_summary
from safemon.audit.gpu_load import ProcessLoad, StreamLoad
from safemon.audit.kernels import atomic_sum_build, block_order_build
from safemon.kernels.catalog import (
    CHECKSUMS,
    COMBINATIONS,
    LEVELS,
    MODES,
    TILE_BUILDS,
    TILES,
    Variant,
    make_variant,
)
from safemon.kernels.compiler import import_cupy, load_module
from safemon.kernels.gpu import build_for, gpu_matmul, nvcc_builds

__all__ = ["CONDITIONS", "build_label", "run_determinism", "shipped_variants"]

CONDITIONS: tuple[str, ...] = ("alone", "load")
SUM_ELEMENTS = 1 << 22
SUM_BLOCKS = 1024
SUM_THREADS = 256


def shipped_variants() -> list[Variant]:
    """The variants whose production builds `nvcc_builds()` lists (injection build excluded)."""
    wanted = set(nvcc_builds())
    seen: set[object] = set()
    out: list[Variant] = []
    kinds: list[tuple[str | None, str | None]] = [(None, None)]
    kinds += [(c, lv) for c in CHECKSUMS for lv in LEVELS] + [(c, "I") for c in COMBINATIONS]
    for checksum, level in kinds:
        for mode in MODES:
            for tile in TILE_BUILDS:
                v = make_variant(checksum, level, mode, tile)
                b = build_for(v)
                if b in wanted and b not in seen:
                    seen.add(b)
                    out.append(v)
    return out


def build_label(variant: Variant) -> str:
    """A name for `variant`'s production build that no other shipped build shares.

    `Variant.name` does not say whether the build reads Aᵀ (`Variant.reads_a_transposed`):
    `wide64` and `WIDE64_READS_AT` give one name and two builds, which the audit must keep
    apart (one row each in the report, one set of orderings each)."""
    return f"{variant.name} (reads A^T)" if variant.reads_a_transposed else variant.name


@contextmanager
def _condition(name: str, process_load: bool) -> Iterator[None]:
    with ExitStack() as stack:
        if name == "load":
            stack.enter_context(StreamLoad())
            if process_load:
                stack.enter_context(ProcessLoad())
        yield


def _mmm_condition(cp: Any, v: Variant, a: Any, b: Any, repeats: int) -> dict[str, Any]:
    m, k = a.shape
    n = b.shape[1]
    c0, es0 = (x.get() for x in gpu_matmul(a, b, v))
    dc, des = [], []
    for _ in range(repeats):
        c, es = gpu_matmul(a, b, v)
        dc.append(differing_elements(c.get(), c0))
        des.append(differing_elements(es.get(), es0))
    kernel = load_module(block_order_build(v)).get_function("safemon_mmm_block_order")
    # A build that reads Aᵀ (`Variant.reads_a_transposed`) takes the K×M transpose, as
    # `gpu_matmul` hands it; given A itself it would compute another product.
    a_in = cp.ascontiguousarray(a.T) if v.reads_a_transposed else a
    t = v.tile
    gx, gy = t.grid(m, n)
    ranks, matches = [], True
    for _ in range(repeats):
        c = cp.empty((m, n), dtype=cp.float32)
        es = cp.empty((gx * gy * t.threads, v.words), dtype=cp.uint32)
        counter = cp.zeros(1, dtype=cp.uint32)
        order = cp.empty(gx * gy, dtype=cp.uint32)
        kernel((gx, gy, 1), (t.threads, 1, 1),
               (a_in, b, c, es, np.int32(m), np.int32(n), np.int32(k), np.uintp(0), counter, order))
        ranks.append(order.get().astype(np.int64))
        matches &= differing_elements(c.get(), c0) == 0 and differing_elements(es.get(), es0) == 0
    return {"runs": repeats, "differing_c": dc, "differing_es": des, "blocks": gx * gy,
            "instrumented_matches_shipped": bool(matches), **tau_summary(np.array(ranks)),
            "_ranks": np.array(ranks)}


def _atomic_sum(cp: Any, x: Any, repeats: int) -> dict[str, Any]:
    kernel = load_module(atomic_sum_build()).get_function("audit_atomic_sum")
    warps = SUM_BLOCKS * SUM_THREADS // 32
    sums, ranks = [], []
    for _ in range(repeats):
        acc = cp.zeros(1, dtype=cp.float32)
        counter = cp.zeros(1, dtype=cp.uint32)
        order = cp.empty(warps, dtype=cp.uint32)
        kernel((SUM_BLOCKS, 1, 1), (SUM_THREADS, 1, 1), (x, np.uint32(x.size), acc, counter, order))
        sums.append(acc.get())
        ranks.append(order.get().astype(np.int64))
    return {"runs": repeats, "distinct_results": _distinct(sums),
            "differing_vs_first": [differing_elements(s, sums[0]) for s in sums[1:]],
            "warps": warps, **tau_summary(np.array(ranks)), "_ranks": np.array(ranks)}


def _distinct(values: list[Any]) -> int:
    return len({np.asarray(v).tobytes() for v in values})


def _repeat(fn: Callable[[], Any], repeats: int) -> dict[str, Any]:
    outs = [fn().get() for _ in range(repeats)]
    return {"runs": repeats, "distinct_results": _distinct(outs),
            "differing_max": max(differing_elements(o, outs[0]) for o in outs)}


def _device(cp: Any) -> dict[str, str]:
    props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
    name = props["name"]
    return {"name": name.decode() if isinstance(name, bytes) else str(name),
            "cupy": str(cp.__version__), "cuda_runtime": str(cp.cuda.runtime.runtimeGetVersion()),
            "host": platform.node()}


def run_determinism(*, repeats: int, size: int, out_dir: Path, process_load: bool = True,
                    seed: int = 0) -> dict[str, Any]:
    """Run the audit (module docstring), write `determinism.json`, `orderings.npz` and
    `orderings.png` under `out_dir`, and return the document.

    Raises:
        ValueError: `repeats` < 2, or `size` not above the largest tile (every variant needs
            at least two blocks for an ordering).
        BackendUnavailableError: no CuPy or no CUDA device.
    """
    largest = max(max(t.bm, t.bn) for t in TILES.values())
    if repeats < 2 or size <= largest:
        raise ValueError(f"need repeats >= 2 and size > {largest}; got {repeats}, {size}")
    cp = import_cupy()
    rng = np.random.default_rng(seed)
    a = cp.asarray(rng.standard_normal((size, size), dtype=np.float32))
    b = cp.asarray(rng.standard_normal((size, size), dtype=np.float32))
    x = cp.asarray(rng.standard_normal(SUM_ELEMENTS, dtype=np.float32))
    variants = shipped_variants()
    per_variant: dict[str, dict[str, Any]] = {
        build_label(v): {"variant": v.name, "build": build_label(v),
                         "reads_a_transposed": v.reads_a_transposed} for v in variants}
    contrasts: dict[str, dict[str, Any]] = {"atomic_sum": {}, "cupy_sum": {}, "cublas_matmul": {}}
    arrays: dict[str, Any] = {}
    for cond in CONDITIONS:
        with _condition(cond, process_load):
            for v in variants:
                label = build_label(v)
                r = _mmm_condition(cp, v, a, b, repeats)
                arrays[f"{label}|{cond}"] = r.pop("_ranks")
                per_variant[label][cond] = r
                print(f"{cond:5s} {label:40s} differing C/ES max {max(r['differing_c'])}/"
                      f"{max(r['differing_es'])}, tau vs first min {r['tau_vs_first_min']:.3f}",
                      flush=True)
            s = _atomic_sum(cp, x, repeats)
            arrays[f"atomic_sum|{cond}"] = s.pop("_ranks")
            contrasts["atomic_sum"][cond] = s
            contrasts["cupy_sum"][cond] = _repeat(lambda: cp.sum(x), repeats)
            contrasts["cublas_matmul"][cond] = _repeat(lambda: cp.matmul(a, b), repeats)
            print(f"{cond:5s} atomic sum: {s['distinct_results']} distinct of {repeats}; "
                  f"cupy sum {contrasts['cupy_sum'][cond]['distinct_results']}; cuBLAS "
                  f"{contrasts['cublas_matmul'][cond]['distinct_results']}", flush=True)
    for row in per_variant.values():
        row["differing_max"] = max(max(row[c]["differing_c"] + row[c]["differing_es"])
                                   for c in CONDITIONS)
    doc = {"schema": "safemon.audit.determinism/1",
           "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
           "device": _device(cp), "size": size, "repeats": repeats, "seed": seed,
           "conditions": {"alone": "nothing else on the device",
                          "load": "cuBLAS products on another stream of this process"
                                  + (" and in another process" if process_load else "")},
           "variants": list(per_variant.values()), "contrasts": contrasts}
    _write(out_dir, doc, arrays)
    return doc


def _write(out_dir: Path, doc: dict[str, Any], arrays: dict[str, Any]) -> None:
    from safemon.audit.determinism_plot import plot_orderings

    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "determinism.json").write_text(json.dumps(doc, indent=1) + "\n")
    # Ranks are below 2**16 for every shipped grid; the smallest unsigned type keeps the file small.
    compact = {k.replace("/", "_"): v.astype(np.uint16 if v.max() < 1 << 16 else np.uint32)
               for k, v in arrays.items()}
    np.savez_compressed(out_dir / "orderings.npz", **compact)
    plot_orderings(doc, arrays, out_dir / "orderings.png")
