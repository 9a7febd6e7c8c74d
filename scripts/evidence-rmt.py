"""Issue 15 evidence in one device call: in-kernel and input campaigns and overheads of the
RMT and ABFT variants beside the unprotected kernel and ES-M (one JSON file per part), and the
same results as evidence-store files (OUTDIR/store/<device>/*_checked.json) that `safemon
select --evidence` reads beside the ES-only catalog's store.

usage: python scripts/evidence-rmt.py OUTDIR [--sites N] [--reps N]
           [--parts tests,bench,store-bench,inkernel,input] [--only LABELS] [--tag TAG]
           [--tests PATHS]

`--only` keeps the checked variants whose labels it lists (e.g. "unprotected/rmt-block,
ones/M/rmt-block"); the baselines (unprotected, ES-M) always run. `--tag` is appended to the
store files' names, so that a partial run adds to a store instead of replacing its files.

Part `tests` first runs the GPU tests of these variants (slow ones included: the 10⁴ clean
runs) and writes OUTDIR/gpu-tests.log; the evidence parts follow even when a test fails (the
exit status says so).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from safemon.bench.timing import (
    median_kernel_ms,  # the project's kernel timer (launch latency hidden)
)
from safemon.dims import Dims
from safemon.evidence.bounds import lower_bound_percent
from safemon.evidence.campaign import run_input_campaign
from safemon.evidence.inkernel import run_inkernel_campaign
from safemon.kernels.catalog import (
    Variant,
    auto_split,
    auto_tile,
    checked_variants,
    make_variant,
)

DANGEROUS = ("operand_a", "operand_b", "accumulator")
SEED = 15


#: Labels of the checked variants to run (None: all of `checked_variants`); set by --only.
ONLY: set[str] | None = None
#: Suffix of the store files' names ("" or "_TAG"); set by --tag.
TAG = ""


def chosen_checked(mode: str, tile: str) -> list[Variant]:
    from safemon.evidence.campaign import variant_label

    return [v for v in checked_variants(mode, tile) if ONLY is None or variant_label(v) in ONLY]


def variants(tile: str, mode: str) -> list[Variant]:
    """The unprotected kernel and ES-M (the baselines), then the checked variants."""
    return [make_variant(None, None, mode, tile), make_variant("ones", "M", mode, tile),
            *chosen_checked(mode, tile)]


def campaign_variants() -> list[Variant]:
    """The campaigns' variants at 80³ (small, fma): with --only just those chosen (the
    baselines' campaigns are in the store already), else the baselines too."""
    return chosen_checked("fma", "small") if ONLY is not None else variants("small", "fma")


def store_dir(out: Path) -> Path:
    from safemon.commands._common import current_device_name
    from safemon.evidence.store import device_slug

    d = out / "store" / device_slug(current_device_name() or "unknown GPU")
    d.mkdir(parents=True, exist_ok=True)
    return d


def checked_only(results: list[Any]) -> list[Any]:
    """The results of the checked variants (the store keeps the ES-only ones of the catalog's run)."""
    return [r for r in results if r.variant.rmt != "none" or r.variant.abft]


def inkernel(out: Path, sites: dict[str, int]) -> None:
    from safemon.commands._common import current_device_name
    from safemon.evidence.inkernel_schema import inkernel_evidence
    from safemon.evidence.store import write_evidence

    rows = []
    results: dict[str, list[Any]] = {scope: [] for scope in sites}
    for v in campaign_variants():
        for scope, n in sites.items():
            t0 = time.perf_counter()
            r = run_inkernel_campaign(v, Dims(80, 80, 80), n, seed=SEED, scope=scope,
                                      targets=DANGEROUS)
            results[scope].append(r)
            eff = r.effect_counts()
            both = sum(eff[t]["both"] for t in eff)
            c_only = sum(eff[t]["c_only"] for t in eff)
            per = {t: {"dangerous": eff[t]["both"] + eff[t]["c_only"], "detected": eff[t]["both"],
                       "lb95": lower_bound_percent(eff[t]["both"], eff[t]["both"] + eff[t]["c_only"])
                       if eff[t]["both"] + eff[t]["c_only"] else None} for t in eff}
            rec = {"variant": v.name, "scope": scope, "sites": n, "effects": eff,
                   "dangerous": both + c_only, "detected": both,
                   "dc_percent": 100.0 * both / max(1, both + c_only),
                   "dc_lb95_percent": lower_bound_percent(both, both + c_only),
                   "per_target": per, "below_tolerance": r.below_tolerance(),
                   "seconds": time.perf_counter() - t0}
            rows.append(rec)
            print(f"inkernel {v.name:34s} {scope:9s} DC {rec['dc_percent']:7.3f} % "
                  f"LB95 {rec['dc_lb95_percent']:7.3f} % ({both}/{both + c_only}) "
                  f"below_tol {rec['below_tolerance']}", flush=True)
            (out / "inkernel.json").write_text(json.dumps(rows, indent=1))
    device = current_device_name() or "unknown GPU"
    for scope, rs in results.items():
        ev = inkernel_evidence(checked_only(rs), device=device)
        write_evidence(ev, store_dir(out) / f"inkernel_80x80x80_fma_{scope}_checked{TAG}.json")


def inputs(out: Path) -> None:
    from safemon.commands._common import current_device_name
    from safemon.evidence.store import dc_evidence, write_evidence

    rows = []
    results = []
    for v in campaign_variants():
        r = run_input_campaign(v, Dims(80, 80, 80), backend="cupy", seed=SEED)
        results.append(r)
        rec: dict[str, Any] = {"variant": v.name, "faults": r.injections, "seconds": r.seconds}
        rec.update({k: int(np.count_nonzero(r.verdicts == code))
                    for k, code in (("neither", 0), ("es_only", 1), ("c_only", 2), ("both", 3))})
        rec["dc_percent"] = 100.0 * rec["both"] / max(1, rec["both"] + rec["c_only"])
        rec["dc_lb95_percent"] = lower_bound_percent(rec["both"], rec["both"] + rec["c_only"])
        rows.append(rec)
        print(f"input {v.name:34s} DC {rec['dc_percent']:7.3f} % LB95 {rec['dc_lb95_percent']:7.3f} %"
              f" (both {rec['both']}, c_only {rec['c_only']})", flush=True)
        (out / "input.json").write_text(json.dumps(rows, indent=1))
    ev = dc_evidence(checked_only(results), device=current_device_name() or "unknown GPU",
                     backend="cupy", seed=SEED)
    write_evidence(ev, store_dir(out) / f"dc_80x80x80_fma_cupy_checked{TAG}.json")


def store_bench(out: Path, reps: int) -> None:
    """`safemon bench`'s measurement (kernels alone, spin-hidden launch, unprotected and
    cuBLAS in the same run) of ES-M and the checked variants at 80³, 4096³, 64×4096×4096."""
    from safemon.bench.overhead import bench_markdown, run_bench
    from safemon.dims import parse_dims_list
    from safemon.evidence.campaign import variant_label
    from safemon.evidence.store import write_evidence

    labels = {"ones/M"} | {variant_label(v) for v in chosen_checked("fma", "small")}
    ev = run_bench(dims_list=parse_dims_list("80,4096,64x4096x4096"), modes=("fma",),
                   variant_filter=lambda v: variant_label(v) in labels, repeats=reps * 10,
                   ecc=False, progress=lambda t: print(f"store-bench: {t}", flush=True))
    stamp = "".join(ch for ch in ev.date if ch.isdigit() or ch in "TZ")
    write_evidence(ev, store_dir(out) / f"bench_{stamp}_checked{TAG}.json")
    (out / "bench_store.md").write_text(bench_markdown(ev) + "\n")
    print(bench_markdown(ev), flush=True)




def bench(out: Path, reps: int) -> None:
    import cupy as cp

    from safemon.kernels.checked import launch_checked

    rows = []
    for m, n, k in [(4096, 4096, 4096), (64, 4096, 4096)]:
        rng = np.random.default_rng(0)
        a = cp.asarray(rng.standard_normal((m, k), dtype=np.float32))
        b = cp.asarray(rng.standard_normal((k, n), dtype=np.float32))
        tile = auto_tile(m, n, k)
        split = auto_split(m, n, k, tile)
        base = None
        for v0 in variants(tile.name, "fma"):
            v = make_variant(v0.checksum, v0.level, "fma", tile, split, rmt=v0.rmt, abft=v0.abft_kind)
            # The live path: status block, MMM kernel (fused ABFT), split-K reduction, and for
            # ABFT the checksum vectors.

            def run(v: Variant = v, a: Any = a, b: Any = b) -> None:
                launch_checked(a, b, v, a_on_device=False, b_on_device=False)

            ms = median_kernel_ms(cp, run, reps, 3)
            base = ms if base is None else base
            rows.append({"variant": v.name, "dims": f"{m}x{n}x{k}", "median_ms": ms,
                         "ratio": ms / base, "reps": reps})
            print(f"bench {m}x{n}x{k} {v.name:40s} {ms:9.3f} ms  x{ms / base:5.2f}", flush=True)
            (out / "bench.json").write_text(json.dumps(rows, indent=1))


GPU_TESTS = ("tests/kernels/test_gpu_abft.py", "tests/kernels/test_gpu_rmt.py",
             "tests/evidence/test_commands.py::test_bench_times_the_rmt_and_abft_variants_by_their_labels")


def gpu_tests(out: Path, paths: list[str]) -> int:
    import subprocess

    with open(out / "gpu-tests.log", "w") as log:
        rc = subprocess.run([sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-rfE",
                             "-p", "no:cacheprovider", *paths], stdout=log,
                            stderr=subprocess.STDOUT, check=False).returncode
    print(f"gpu tests: exit {rc}; " + (out / "gpu-tests.log").read_text().splitlines()[-1],
          flush=True)
    return rc


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("out", type=Path)
    p.add_argument("--sites", type=int, default=20000)
    p.add_argument("--reps", type=int, default=15)
    p.add_argument("--parts", default="tests,bench,store-bench,inkernel,input")
    p.add_argument("--only", default=None, help="comma list of checked-variant labels")
    p.add_argument("--tag", default="", help="suffix of the store files' names")
    p.add_argument("--tests", default=",".join(GPU_TESTS), help="comma list of GPU test paths")
    args = p.parse_args()
    global ONLY, TAG
    ONLY = None if args.only is None else {x.strip() for x in args.only.split(",") if x.strip()}
    TAG = f"_{args.tag}" if args.tag else ""
    args.out.mkdir(parents=True, exist_ok=True)
    parts = args.parts.split(",")
    t0 = time.perf_counter()
    rc = gpu_tests(args.out, args.tests.split(",")) if "tests" in parts else 0
    if "bench" in parts:
        bench(args.out, args.reps)
    if "store-bench" in parts:
        store_bench(args.out, args.reps)
    if "inkernel" in parts:
        inkernel(args.out, {"transient": args.sites, "thread": args.sites // 2,
                            "block": args.sites // 4})
    if "input" in parts:
        inputs(args.out)
    print(f"evidence-rmt: {time.perf_counter() - t0:.1f} s", flush=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
