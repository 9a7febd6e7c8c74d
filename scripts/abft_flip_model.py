"""Which single-bit flips of a stored C the ABFT check flags, on the host (issue 15).

usage: python3 scripts/abft_flip_model.py OUT.json [--dims 64x4096x4096] [--tile wide64]
           [--split 8] [--flips 20000] [--seed 15]

The model: one bit of one element of C flipped after the kernel (uniform over elements and the
32 bits). The golden C is the NumPy reference of the variant (fma, the tile and split: the
split is what sets k_S); its row and column residuals and tolerances come from
`abft_check` (the mirror of abft.cu's decision). A flip changes one row sum and one column sum
by δ, so it is flagged when |residual + δ| exceeds either tolerance ("full") or the row's
("rows"); the tolerances' Σ|Ĉ| term is the golden one, as in the injection build's model. Each
kind is judged with the tolerance of the longest slice (k_S + S roundings, the rule since
2026-11-24) and with the earlier K + S. Written: the fraction flagged, and among the flips left
unflagged the largest |δ| relative to the element and to the median |C|.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from safemon.dims import parse_dims
from safemon.evidence.inkernel import inputs_for
from safemon.kernels.abft import abft_check
from safemon.kernels.catalog import make_variant
from safemon.kernels.reference import reference_matmul


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--dims", default="64x4096x4096")
    ap.add_argument("--tile", default="wide64")
    ap.add_argument("--split", type=int, default=8)
    ap.add_argument("--flips", type=int, default=20000)
    ap.add_argument("--seed", type=int, default=15)
    args = ap.parse_args()
    d = parse_dims(args.dims)
    v = make_variant(None, None, "fma", args.tile, args.split)
    a, b = inputs_for(d, args.seed)
    t0 = time.perf_counter()
    c, _ = reference_matmul(a, b, v)
    print(f"reference {v.name}: {time.perf_counter() - t0:.1f} s", flush=True)
    s = v.slices(d.k)
    k_s = v.longest_slice(d.k)
    rng = np.random.default_rng(args.seed)
    i = rng.integers(0, d.m, args.flips)
    j = rng.integers(0, d.n, args.flips)
    bit = rng.integers(0, 32, args.flips).astype(np.uint32)
    bad = (c[i, j].view(np.uint32) ^ (np.uint32(1) << bit)).view(np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        delta = bad.astype(np.float64) - c[i, j].astype(np.float64)
    finite = np.isfinite(delta)
    med = float(np.median(np.abs(c)))
    out = {"variant": v.name, "dims": args.dims, "slices": s, "k_slice": k_s,
           "flips": args.flips, "seed": args.seed, "median_abs_c": med,
           "non_finite_flips": int((~finite).sum()), "rules": []}
    bx, by = j // v.tile.bn, i // v.tile.bm
    for label, k_slice in (("k_S + S", k_s), ("K + S (before)", None)):
        r = abft_check(a, b, c, v.tile, s, "full", k_slice)
        assert r.ok, "the golden product fails its own check"
        row_hit = ~(np.abs(r.row_residual[i, bx] + delta) <= r.row_tol[i, bx])
        col_hit = ~(np.abs(r.col_residual[by, j] + delta) <= r.col_tol[by, j])
        for kind, hit in (("full", row_hit | col_hit), ("rows", row_hit)):
            hit = hit | ~finite
            miss = ~hit
            rel = np.abs(delta[miss]) / np.maximum(np.abs(c[i, j][miss]).astype(np.float64), 2.0**-126)
            rec = {"rule": label, "kind": kind, "roundings": (k_s if k_slice else d.k) + s,
                   "flagged_percent": 100.0 * hit.mean(),
                   "median_row_tol_over_median_c": float(np.median(r.row_tol)) / med,
                   "median_col_tol_over_median_c": float(np.median(r.col_tol)) / med,
                   "max_missed_rel_error": float(rel.max()) if rel.size else 0.0,
                   "max_missed_abs_error_over_median_c":
                       float(np.abs(delta[miss]).max()) / med if rel.size else 0.0}
            out["rules"].append(rec)
            print(f"{label:15s} {kind:4s} flagged {rec['flagged_percent']:6.2f} %  missed: max "
                  f"|δ|/|C| {rec['max_missed_rel_error']:.3g}, max |δ|/median|C| "
                  f"{rec['max_missed_abs_error_over_median_c']:.3g}", flush=True)
    args.out.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
