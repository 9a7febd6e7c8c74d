"""Where the two copies of inter-block RMT ran: the share of block tiles whose copies shared
an SM (docs/RMT.md, "Sphere of replication"), measured with the self-test build that records
each block's %smid.

usage: python scripts/rmt_block_sm.py [--runs N] [--out FILE.json]

For each shape (split 1: the self-test build walks the whole of K) it launches the
unprotected inter-block RMT build N times and counts, per run, the tiles whose copy 0 and
copy 1 reported the same SM. A pair on one SM is a pair that a fault of that SM reaches
twice: the campaigns' block-permanent model (one copy hit) does not hold for it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from safemon.kernels.catalog import make_variant

SHAPES = [(80, 80, 80, "small"), (300, 260, 70, "small"), (1024, 1024, 1024, "small"),
          (64, 4096, 4096, "wide"), (1, 4096, 4096, "skinny"), (4096, 4096, 4096, "large")]


def main() -> int:
    import cupy as cp

    from safemon.kernels.gpu import gpu_matmul_recording_sm

    p = argparse.ArgumentParser()
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args()
    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    rows = []
    for m, n, k, tile in SHAPES:
        v = make_variant(None, None, "fma", tile, rmt="block")
        rng = np.random.default_rng(0)
        a = cp.asarray(rng.standard_normal((m, k), dtype=np.float32))
        b = cp.asarray(rng.standard_normal((k, n), dtype=np.float32))
        gx, gy = v.tile.grid(m, n)
        tiles = gx * gy
        same = []
        for _ in range(args.runs):
            _, _, sm = gpu_matmul_recording_sm(a, b, v)
            got = cp.asnumpy(sm)
            same.append(int(np.count_nonzero(got[:tiles] == got[tiles:])))
        row = {"shape": f"{m}x{n}x{k}", "tile": tile, "tiles": tiles, "runs": args.runs,
               "sms": sms, "pairs": tiles * args.runs, "same_sm": int(sum(same)),
               "same_sm_share": sum(same) / (tiles * args.runs),
               "same_sm_per_run_max": max(same)}
        rows.append(row)
        print(f"{row['shape']:>16s} {tile:6s} tiles {tiles:5d}  pairs on one SM "
              f"{row['same_sm']:6d} of {row['pairs']:7d} ({100 * row['same_sm_share']:.2f} %)",
              flush=True)
    if args.out is not None:
        args.out.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
