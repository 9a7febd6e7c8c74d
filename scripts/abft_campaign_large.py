"""In-kernel campaigns of the ABFT variants at an inference shape on its own tile (issue 15):
the committed campaigns run at 80³ on `small`; this runs them where the overhead target is.

usage: python3 scripts/abft_campaign_large.py OUT.json [--dims 64x4096x4096] [--tile wide64]
           [--sites 5000] [--seed 15] [--variants unprotected/abft,unprotected/abft-rows,...]

For each variant (fma, the tile, no split: the injection build runs one K-slice) and scope
(transient: `--sites`, thread-permanent: half, block-permanent: a quarter) it samples sites on
operand A, operand B and the accumulator (`sample_sites`), runs them (`run_injections`) against
the NumPy reference's golden C and ES, computed once per ES variant (the slow part: a CPU
emulation of the kernel's order), and writes DC, its one-sided 95 % lower bound and the
below-tolerance count with its largest relative error, as `scripts/evidence-rmt.py` does.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from safemon.dims import parse_dims
from safemon.evidence.bounds import lower_bound_percent
from safemon.evidence.campaign import parse_variants, variant_label
from safemon.evidence.inkernel import InKernelResult, inputs_for, sample_sites
from safemon.faults.launch import run_injections
from safemon.kernels.reference import reference_matmul

DANGEROUS = ("operand_a", "operand_b", "accumulator")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--dims", default="64x4096x4096")
    ap.add_argument("--tile", default="wide64")
    ap.add_argument("--sites", type=int, default=5000)
    ap.add_argument("--seed", type=int, default=15)
    ap.add_argument("--variants", default="unprotected/abft,unprotected/abft-rows,"
                                           "ones/M/abft,ones/M/abft-rows")
    args = ap.parse_args()
    dims = parse_dims(args.dims)
    a, b = inputs_for(dims, args.seed)
    golden: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    rows_out = []
    for v in parse_variants(args.variants, "fma", args.tile):
        es_key = f"{v.checksum}/{v.level}"
        if es_key not in golden:
            t0 = time.perf_counter()
            golden[es_key] = reference_matmul(a, b, v)
            print(f"reference {es_key}: {time.perf_counter() - t0:.1f} s", flush=True)
        gc, ges = golden[es_key]
        for scope, n in (("transient", args.sites), ("thread", args.sites // 2),
                         ("block", args.sites // 4)):
            t0 = time.perf_counter()
            sites = sample_sites(v, dims, n, seed=args.seed, targets=DANGEROUS, scope=scope)
            errs = np.zeros(sites.shape[0], dtype=np.float32)
            verdicts = run_injections(a, b, v, gc, ges, sites, rel_errors=errs)
            r = InKernelResult(v, dims, scope, args.seed, sites, verdicts,
                               time.perf_counter() - t0, errs)
            eff = r.effect_counts()
            both = sum(e["both"] for e in eff.values())
            c_only = sum(e["c_only"] for e in eff.values())
            rec = {"variant": v.name, "label": variant_label(v), "dims": args.dims,
                   "scope": scope, "sites": n, "seed": args.seed, "effects": eff,
                   "dangerous": both + c_only, "detected": both,
                   "dc_percent": 100.0 * both / max(1, both + c_only),
                   "dc_lb95_percent": lower_bound_percent(both, both + c_only),
                   "below_tolerance": r.below_tolerance(), "seconds": r.seconds}
            rows_out.append(rec)
            print(f"{v.name:40s} {scope:9s} DC {rec['dc_percent']:7.3f} % LB95 "
                  f"{rec['dc_lb95_percent']:7.3f} % ({both}/{both + c_only}) below_tol "
                  f"{rec['below_tolerance']} {r.seconds:.1f} s", flush=True)
            args.out.write_text(json.dumps(rows_out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
