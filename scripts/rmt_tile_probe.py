"""Which block tile should intra-warp RMT run on? A device-machine probe (issue 15).

    python3 scripts/rmt_tile_probe.py [--shapes 4096x4096x4096,...] [--rounds 5] [--json OUT]

Intra-warp RMT runs every logical thread in two lanes, so a `large` block (256 logical
threads) launches 512 threads. At 128 registers per thread only one such block fits an SM,
where the unprotected `large` kernel keeps two: while one block waits at a barrier or on its
k-tile loads, the other computes. This probe times, with CUDA events in interleaved rounds
(medians of the per-round medians), the unprotected kernel and `unprotected/rmt-warp` on
candidate tiles, cuBLAS (`cupy.matmul`) in the same run, and checks on every candidate that
RMT's C and ES are the unprotected kernel's bit for bit (same K-slices) and that its status
block stays clear. Candidates are tiles of the catalog, `auto` (the tile `safemon.matmul` picks at the shape) or
`NAME:BMxBNxBK/TMxTN` specs (a trailing `a`: k-tiles copied asynchronously, as `wide`; `ak`:
from Aᵀ, as `large`; then `m1` or `m2`: that lane map, `TileConfig.lane_map`; then `o1`: MAC
order 1, `TileConfig.mac_order`). Any candidate
may end in `@N` (N K-slices) or `@own` (the split
`auto_split` gives that tile, as it would if `auto_tile` picked it); without either it cuts K
as the automatic variant does, so that its C can be compared with the automatic one's.
`--variant ones/T` (CHECKSUM/LEVEL) times a protected variant instead of the unprotected one;
C is compared with the first candidate's wherever the K-slices agree.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from datetime import UTC, datetime
from pathlib import Path

import cupy as cp
import numpy as np

from safemon.bench.overhead import variant_launcher
from safemon.bench.timing import kernel_samples_ms
from safemon.kernels.catalog import (
    NAMED_TILES,
    TileConfig,
    auto_split,
    auto_tile,
    make_variant,
    slice_bounds,
    variant_with_tile,
)

DEFAULT_TILES = "auto,large,h64:64x128x8/8x8,v64:128x64x8/8x8,q64:64x64x8/8x8,h64k16:64x128x16/8x8,large16:128x128x16/8x8"


def parse_tile(text: str) -> TileConfig:
    """A catalog name, or `NAME:BMxBNxBK/TMxTN`, then `a` for asynchronous copies, `k` (after
    `a`) for copies from Aᵀ, `m1` or `m2` for that lane map and `o1` for MAC order 1."""
    if text in NAMED_TILES:
        return NAMED_TILES[text]
    m = re.fullmatch(r"(\w+):(\d+)x(\d+)x(\d+)/(\d+)x(\d+)(a?)(k?)(?:m([012]))?(o1)?", text)
    if m is None:
        raise SystemExit(f"not a tile: {text!r} (a catalog name or NAME:BMxBNxBK/TMxTN[a[k]][mL][o1])")
    name, *dims, asynchronous, kmajor, lane_map, order = m.groups()
    bm, bn, bk, tm, tn = map(int, dims)
    return TileConfig(name, bm=bm, bn=bn, bk=bk, tm=tm, tn=tn, async_copy=asynchronous == "a",
                      a_kmajor=kmajor == "k", lane_map=int(lane_map or 0),
                      mac_order=1 if order else 0)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default="4096x4096x4096,2048x2048x2048,256x1024x4096,64x4096x4096")
    ap.add_argument("--tiles", default=DEFAULT_TILES)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--no-rmt", action="store_true", help="time the unprotected kernels only")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--mode", choices=("fma", "exact"), default="fma",
                    help="the arithmetic mode of every kernel timed (default fma)")
    ap.add_argument("--variant", default="unprotected",
                    help="CHECKSUM/LEVEL (e.g. ones/T) or 'unprotected' (default)")
    args = ap.parse_args()
    checksum, level = (None, None) if args.variant == "unprotected" else args.variant.split("/")
    names = args.tiles.split(",")
    rng = np.random.default_rng(0)
    dev = cp.cuda.runtime.getDeviceProperties(0)["name"]
    dev = dev.decode() if isinstance(dev, bytes) else dev
    report: dict = {"device": dev, "variant": args.variant, "mode": args.mode, "date": datetime.now(UTC).isoformat(timespec="seconds"),
                    "rounds": args.rounds, "repeats": args.repeats, "shapes": {}}
    print(f"# {report['device']}, {report['date']}; {args.variant} {args.mode} kernel µs, medians of "
          f"{args.rounds} interleaved rounds")
    for shape in args.shapes.split(","):
        m, n, k = map(int, shape.split("x"))
        a = cp.asarray(rng.standard_normal((m, k), dtype=np.float32))
        b = cp.asarray(rng.standard_normal((k, n), dtype=np.float32))
        auto_t = auto_tile(m, n, k, level)
        auto = make_variant(checksum, level, args.mode, auto_t, auto_split(m, n, k, auto_t))
        cases: dict[str, object] = {"cuBLAS": lambda a=a, b=b: cp.matmul(a, b)}
        checks: dict[str, str] = {}
        # "auto": the tile safemon.matmul picks at this shape (the unprotected kernel users run).
        first_c: dict[tuple, np.ndarray] = {}  # slice bounds -> the first candidate's C there
        picked: list[tuple[TileConfig, str]] = []
        for spec in names:
            tile_text, _, split_text = spec.partition("@")
            picked.append((auto.tile if tile_text == "auto" else parse_tile(tile_text), split_text))
        for t, split_text in dict.fromkeys(picked):
            if split_text == "own":
                split = auto_split(m, n, k, t)
            elif split_text:
                split = int(split_text)
            else:  # the split that cuts K as the automatic variant does (same C)
                split = variant_with_tile(auto, t, k).split
            for rmt in ("none",) if args.no_rmt else ("none", "warp"):
                v = make_variant(checksum, level, args.mode, t, split, rmt=rmt)
                try:
                    run = variant_launcher(cp, v, a, b)
                    c, _es = run()
                    cp.cuda.Device().synchronize()
                except Exception as exc:  # a tile that does not build or launch: say so, go on
                    checks[f"{t.describe()} {rmt}"] = f"failed: {type(exc).__name__}: {exc}"
                    continue
                cases[f"{t.describe()} split {split} {rmt}"] = run
                if rmt == "none":
                    ref_c = cp.asnumpy(c)
                    bounds = tuple(slice_bounds(k, t.bk, v.slices(k)))
                    if bounds in first_c:
                        same = np.array_equal(first_c[bounds].view(np.uint32), ref_c.view(np.uint32))
                        checks[f"{t.describe()} split {split} C vs first at these slices"] = (
                            "C equal" if same else "MISMATCH")
                    else:
                        first_c[bounds] = ref_c
                else:
                    # C only: RMT never changes it (ES is compared by the GPU tests).
                    same = np.array_equal(cp.asnumpy(c).view(np.uint32), ref_c.view(np.uint32))
                    checks[f"{t.describe()} rmt-warp"] = "C equal" if same else "MISMATCH"
        samples: dict[str, list[float]] = {name: [] for name in cases}
        for _ in range(args.rounds):
            for name, fn in cases.items():
                samples[name].append(float(np.median(kernel_samples_ms(cp, fn, args.repeats, 2))))
        med = {name: float(np.median(v)) * 1000 for name, v in samples.items()}
        auto_us = med.get(f"{auto.tile.describe()} split {auto.split} none")
        print(f"\n## {shape}  (cuBLAS {med['cuBLAS']:.1f} µs)")
        best_plain = min(v for kname, v in med.items() if kname.endswith(" none"))
        for name, us in med.items():
            line = f"  {name:42s} {us:9.1f} µs  {med['cuBLAS'] / us:5.2f}× cuBLAS"
            if name.endswith(" warp"):
                plain_name = name[: -len("warp")] + "none"
                if plain_name in med:
                    line += f"  rmt/same-tile {us / med[plain_name]:.2f}×"
                line += f"  rmt/best-unprotected {us / best_plain:.2f}×"
                if auto_us:
                    line += f"  rmt/auto-unprotected {us / auto_us:.2f}×"
            print(line)
        for name, verdict in checks.items():
            print(f"  check {name}: {verdict}")
        report["shapes"][shape] = {"median_us": med, "checks": checks, "best_unprotected_us": best_plain,
                                   "auto_tile": auto.tile.describe(), "auto_unprotected_us": auto_us,
                                   "rounds_ms": samples}
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    bad = [c for s in report["shapes"].values() for c in s["checks"].values() if c != "C equal"]
    return 1 if any(c == "MISMATCH" for c in bad) else 0


if __name__ == "__main__":
    sys.exit(main())
