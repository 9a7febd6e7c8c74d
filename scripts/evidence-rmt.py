"""Issue 15 evidence in one device call: in-kernel and input campaigns and overheads of the
RMT and ABFT variants beside the unprotected kernel and ES-M (one JSON file per part).

usage: python scripts/evidence-rmt.py OUTDIR [--sites N] [--quick]
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
from safemon.evidence.bounds import lower_bound_percent
from safemon.evidence.campaign import run_input_campaign
from safemon.dims import Dims
from safemon.evidence.inkernel import run_inkernel_campaign
from safemon.kernels.catalog import Variant, auto_split, auto_tile, make_variant

DANGEROUS = ("operand_a", "operand_b", "accumulator")


def variants(tile: str, mode: str) -> list[Variant]:
    specs: list[tuple[str | None, str | None, str, bool]] = [
        (None, None, "none", False), ("ones", "M", "none", False),
        (None, None, "warp", False), ("ones", "M", "warp", False),
        (None, None, "none", True), ("ones", "M", "none", True), ("ones", "M", "warp", True),
    ]
    return [make_variant(c, lv, mode, tile, rmt=r, abft=ab) for c, lv, r, ab in specs]


def inkernel(out: Path, sites: dict[str, int]) -> None:
    rows = []
    for v in variants("small", "fma"):
        for scope, n in sites.items():
            t0 = time.perf_counter()
            r = run_inkernel_campaign(v, Dims(80, 80, 80), n, seed=15, scope=scope,
                                      targets=DANGEROUS)
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


def inputs(out: Path) -> None:
    rows = []
    for v in variants("small", "fma"):
        r = run_input_campaign(v, Dims(80, 80, 80), backend="cupy", seed=15)
        rec: dict[str, Any] = {"variant": v.name, "faults": r.injections, "seconds": r.seconds}
        rec.update({k: int(np.count_nonzero(r.verdicts == code))
                    for k, code in (("neither", 0), ("es_only", 1), ("c_only", 2), ("both", 3))})
        rec["dc_percent"] = 100.0 * rec["both"] / max(1, rec["both"] + rec["c_only"])
        rec["dc_lb95_percent"] = lower_bound_percent(rec["both"], rec["both"] + rec["c_only"])
        rows.append(rec)
        print(f"input {v.name:34s} DC {rec['dc_percent']:7.3f} % LB95 {rec['dc_lb95_percent']:7.3f} %"
              f" (both {rec['both']}, c_only {rec['c_only']})", flush=True)
        (out / "input.json").write_text(json.dumps(rows, indent=1))




def bench(out: Path, reps: int) -> None:
    import cupy as cp

    from safemon.kernels.checked import launch_checked

    rows = []
    for m, n, k in [(4096, 4096, 4096), (64, 4096, 4096)]:
        rng = np.random.default_rng(0)
        a = cp.asarray(rng.standard_normal((m, k), dtype=np.float32))
        b = cp.asarray(rng.standard_normal((k, n), dtype=np.float32))
        tile = auto_tile(m, n)
        split = auto_split(m, n, k, tile)
        base = None
        for v0 in variants(tile.name, "fma"):
            v = make_variant(v0.checksum, v0.level, "fma", tile, split, rmt=v0.rmt, abft=v0.abft)

            def run(v: Variant = v, a: Any = a, b: Any = b) -> None:
                launch_checked(a, b, v, a_on_device=False, b_on_device=False)

            ms = median_kernel_ms(cp, run, reps, 3)
            base = ms if base is None else base
            rows.append({"variant": v.name, "dims": f"{m}x{n}x{k}", "median_ms": ms,
                         "ratio": ms / base, "reps": reps})
            print(f"bench {m}x{n}x{k} {v.name:40s} {ms:9.3f} ms  x{ms / base:5.2f}", flush=True)
            (out / "bench.json").write_text(json.dumps(rows, indent=1))


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("out", type=Path)
    p.add_argument("--sites", type=int, default=20000)
    p.add_argument("--reps", type=int, default=15)
    p.add_argument("--parts", default="inkernel,input,bench")
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    parts = args.parts.split(",")
    t0 = time.perf_counter()
    if "bench" in parts:
        bench(args.out, args.reps)
    if "inkernel" in parts:
        inkernel(args.out, {"transient": args.sites, "thread": args.sites // 2,
                            "block": args.sites // 4})
    if "input" in parts:
        inputs(args.out)
    print(f"evidence-rmt: {time.perf_counter() - t0:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
