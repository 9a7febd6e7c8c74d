"""Where the API time goes, and what other tiles would give (issue 14; device machine).

`python3 scripts/speed_explore.py profile`: cProfile of repeated calls (80³, device arrays):
safemon.matmul, protected_matmul ones/F and the same with an ECC-protected B; the top
functions by own time.
`python3 scripts/speed_explore.py tiles`: kernel-only CUDA-event medians of the inference
shapes for each tile with its automatic split, unprotected fma (what a tile change would buy).
`python3 scripts/speed_explore.py sweep`: the same for candidate skinny-M tiles (not in the
catalog) at several splits, next to cupy.matmul's kernel, to choose tiles and split rules.
`python3 scripts/speed_explore.py choose`: small, wide and large with their splits per shape
and variant kind (unprotected, a middle-loop fold, a fold at every MAC), auto_tile's pick
marked with `*`: the data behind `auto_tile`.
`python3 scripts/speed_explore.py sweep_async`: candidate tiles between `wide` and `large`
with asynchronous copies, at several splits, next to cupy.matmul's kernel.
`python3 scripts/speed_explore.py splits [S,S,...] [MxNxK,...]`: the automatic tile of each
of `SPLIT_SHAPES` (or the shapes given) at each split given (default: powers of two from 1
to 64), next to cupy.matmul's kernel: the data behind `auto_split`. The variant is
unprotected fma, or `SPLIT_SPEC` (`checksum/level/mode[/rmt]`, e.g. `ones/T/fma`,
`none/none/fma/warp`).
"""

from __future__ import annotations

import cProfile
import os
import pstats
import sys

import cupy as cp
import numpy as np

import safemon
from safemon.bench.overhead import variant_launcher
from safemon.bench.timing import median_kernel_ms
from safemon.ecc import ProtectedArray
from safemon.kernels.catalog import TILES, TileConfig, auto_split, make_variant


def profile() -> None:
    rng = np.random.default_rng(0)
    a = cp.asarray(rng.standard_normal((80, 80), dtype=np.float32))
    b = cp.asarray(rng.standard_normal((80, 80), dtype=np.float32))
    pb = ProtectedArray(b, name="w")
    calls = {
        "matmul": lambda: safemon.matmul(a, b, mode="fma"),
        "ones/F": lambda: safemon.protected_matmul(a, b, checksum="ones", level="F", mode="fma"),
        "ones/F ECC": lambda: safemon.protected_matmul(a, pb, checksum="ones", level="F", mode="fma"),
        "cupy.matmul+sync": lambda: (cp.matmul(a, b), cp.cuda.get_current_stream().synchronize()),
    }
    for name, fn in calls.items():
        for _ in range(50):
            fn()
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(500):
            fn()
        prof.disable()
        print(f"===== {name}: 500 calls")
        pstats.Stats(prof).sort_stats("tottime").print_stats(14)


def tiles() -> None:
    rng = np.random.default_rng(0)
    for m, n, k in [(1, 4096, 4096), (64, 4096, 4096), (256, 1024, 4096), (1024, 1024, 1024)]:
        a = cp.asarray(rng.standard_normal((m, k), dtype=np.float32))
        b = cp.asarray(rng.standard_normal((k, n), dtype=np.float32))
        for name, tile in TILES.items():
            for split in sorted({1, auto_split(m, n, k, tile)}):
                v = make_variant(None, None, "fma", tile, split)
                us = median_kernel_ms(cp, variant_launcher(cp, v, a, b), 30, 5) * 1e3
                print(f"{m}x{n}x{k} {name:6s} split {split:3d} ({v.slices(k):3d} slices): {us:9.1f} us")


#: Candidate tiles for the sweep (each fits the RMT build: BM·BK and BK·BN divide by 2·threads).
CANDIDATES = [
    TileConfig("r4n128k32", 4, 128, 32, 4, 4),
    TileConfig("r8n128k32", 8, 128, 32, 4, 4),
    TileConfig("r8n256k32", 8, 256, 32, 4, 4),
    TileConfig("r16n128k16", 16, 128, 16, 4, 4),
    TileConfig("r16n256k16", 16, 256, 16, 4, 8),
    TileConfig("r32n128k16", 32, 128, 16, 4, 8),
    TileConfig("r64n128k8", 64, 128, 8, 8, 8),
    TileConfig("r64n128k16", 64, 128, 16, 8, 8),
]
SWEEP_SHAPES = [(1, 4096, 4096), (8, 4096, 4096), (32, 4096, 4096), (64, 4096, 4096),
                (256, 1024, 4096), (1, 1024, 4096), (1024, 1024, 1024)]


def _splits_around(m: int, n: int, k: int, tile: TileConfig) -> list[int]:
    """The automatic split of the shape and tile, half and twice it."""
    auto = auto_split(m, n, k, tile)
    return sorted({max(1, auto // 2), auto, min(64, auto * 2)})


def _time_tiles(shape: tuple[int, int, int], tiles: list[TileConfig], a: object, b: object,
                top: int) -> None:
    """Print cupy.matmul's kernel and the `top` fastest (tile, split) of `tiles` at `shape`."""
    m, n, k = shape
    blas = median_kernel_ms(cp, lambda: cp.matmul(a, b), 30, 5) * 1e3
    print(f"{m}x{n}x{k} cupy.matmul kernel {blas:8.1f} us")
    rows = []
    for tile in tiles:
        for split in _splits_around(m, n, k, tile):
            v = make_variant(None, None, "fma", tile, split)
            us = median_kernel_ms(cp, variant_launcher(cp, v, a, b), 30, 5) * 1e3
            rows.append((us, tile.describe(), split, v.slices(k), split == auto_split(m, n, k, tile)))
    for us, desc, split, slices, auto in sorted(rows)[:top]:
        print(f"  {desc:24s} split {split:3d} ({slices:3d} slices){' auto' if auto else '     '}"
              f": {us:8.1f} us  ({blas / us:.2f}x cuBLAS)")
    sys.stdout.flush()


def _inputs(rng: np.random.Generator, m: int, n: int, k: int) -> tuple[object, object]:
    return (cp.asarray(rng.standard_normal((m, k), dtype=np.float32)),
            cp.asarray(rng.standard_normal((k, n), dtype=np.float32)))


def sweep() -> None:
    rng = np.random.default_rng(0)
    for m, n, k in SWEEP_SHAPES:
        a, b = _inputs(rng, m, n, k)
        fits = [t for t in CANDIDATES if t.bm <= max(8, 4 * m) and 8 * t.bm >= m]
        _time_tiles((m, n, k), [*TILES.values(), *fits], a, b, 8)


#: Shapes for `choose`: row counts around the tile boundaries, inference widths, squares.
CHOOSE_SHAPES = [(16, 4096, 4096), (32, 4096, 4096), (64, 4096, 4096), (128, 4096, 4096),
                 (256, 4096, 4096), (512, 4096, 4096), (256, 1024, 4096), (64, 1024, 1024),
                 (512, 512, 512), (1024, 1024, 1024), (2048, 2048, 2048), (2048, 4096, 1024),
                 (4096, 4096, 4096)]
CHOOSE_SPECS = [(None, None, "fma"), ("ones", "M", "fma"), ("ones", "I", "exact")]


def choose() -> None:
    """Kernel medians of small, wide and large (each with its automatic split) per shape and
    variant kind, the tile auto_tile picks marked: the data behind the tile rule."""
    from safemon.kernels.catalog import auto_tile

    rng = np.random.default_rng(0)
    for m, n, k in CHOOSE_SHAPES:
        a = cp.asarray(rng.standard_normal((m, k), dtype=np.float32))
        b = cp.asarray(rng.standard_normal((k, n), dtype=np.float32))
        blas = median_kernel_ms(cp, lambda a=a, b=b: cp.matmul(a, b), 20, 3) * 1e3
        print(f"{m}x{n}x{k} cupy.matmul kernel {blas:8.1f} us")
        for spec in CHOOSE_SPECS:
            cells = []
            for name in ("small", "wide", "large"):
                tile = TILES[name]
                v = make_variant(*spec, tile, auto_split(m, n, k, tile))
                us = median_kernel_ms(cp, variant_launcher(cp, v, a, b), 20, 3) * 1e3
                mark = "*" if auto_tile(m, n, k, v.level) == tile else " "
                cells.append(f"{name}{mark}/{v.slices(k):<2d} {us:8.1f}")
            label = "unprotected" if spec[0] is None else f"{spec[0]}/{spec[1]}"
            print(f"  {label + '/' + spec[2]:18s} " + "   ".join(cells), flush=True)


#: Candidates for `sweep_async`: tiles between `wide` and `large`, copied asynchronously.
ASYNC_CANDIDATES = [
    TileConfig("wide", 32, 128, 8, 4, 8, async_copy=True),
    TileConfig("r32n128k16a", 32, 128, 16, 4, 8, async_copy=True),
    TileConfig("r64n128k8a", 64, 128, 8, 8, 8, async_copy=True),
    TileConfig("r64n128k16a", 64, 128, 16, 8, 8, async_copy=True),
    TileConfig("r32n256k8a", 32, 256, 8, 4, 8, async_copy=True),
    TileConfig("r64n256k8a", 64, 256, 8, 8, 8, async_copy=True),
    TileConfig("large", 128, 128, 8, 8, 8),
]
ASYNC_SHAPES = [(32, 4096, 4096), (64, 4096, 4096), (128, 4096, 4096), (256, 1024, 4096),
                (256, 4096, 4096), (64, 1024, 1024)]


def sweep_async() -> None:
    """Unprotected fma kernel medians of `ASYNC_CANDIDATES` at `ASYNC_SHAPES`, each with its
    automatic split and half and twice it, against cupy.matmul's kernel in the same run
    (builds compiled in parallel first)."""
    from safemon.kernels.precompile import precompile

    print(f"compiled {precompile(make_variant(None, None, 'fma', t) for t in ASYNC_CANDIDATES)}"
          " builds", flush=True)
    rng = np.random.default_rng(0)
    for m, n, k in ASYNC_SHAPES:
        a, b = _inputs(rng, m, n, k)
        _time_tiles((m, n, k), ASYNC_CANDIDATES, a, b, 10)


#: Shapes for `splits`: batch rows against inference weights, and squares that split.
SPLIT_SHAPES = [(1, 4096, 4096), (4, 4096, 4096), (8, 4096, 4096), (1, 1024, 4096),
                (1, 4096, 1024), (1, 11008, 4096), (1, 4096, 11008), (16, 4096, 4096),
                (64, 4096, 4096), (256, 1024, 4096), (1024, 1024, 1024)]


def splits() -> None:
    """Kernel medians of `SPLIT_SPEC`'s variant (default unprotected fma) on each shape's
    automatic tile at each split (argv[2], default 1, 2, 4, ..., 64; the automatic one marked,
    and timed too when not listed), against cupy.matmul's kernel in the same run. Shapes:
    argv[3] or `SPLIT_SHAPES`."""
    from safemon.kernels.catalog import auto_tile

    wanted = [int(v) for v in sys.argv[2].split(",")] if len(sys.argv) > 2 else [1, 2, 4, 8, 16, 32, 64]
    shapes = ([tuple(int(v) for v in s.split("x")) for s in sys.argv[3].split(",")]
              if len(sys.argv) > 3 else SPLIT_SHAPES)
    checksum, level, mode, *rmt = os.environ.get("SPLIT_SPEC", "none/none/fma").split("/")
    spec = (None if checksum == "none" else checksum, None if level == "none" else level, mode)
    print(f"# {'/'.join(x or 'unprotected' for x in spec[:2])}/{mode} rmt={rmt[0] if rmt else 'none'}")
    rng = np.random.default_rng(0)
    for m, n, k in shapes:
        a, b = _inputs(rng, m, n, k)
        tile = auto_tile(m, n, k, spec[1])
        auto = auto_split(m, n, k, tile)
        blas = median_kernel_ms(cp, lambda a=a, b=b: cp.matmul(a, b), 30, 5) * 1e3
        cells = []
        for split in sorted({*wanted, auto}):
            v = make_variant(*spec, tile, split, rmt=rmt[0] if rmt else "none")
            us = median_kernel_ms(cp, variant_launcher(cp, v, a, b), 30, 5) * 1e3
            cells.append(f"{split}{'*' if split == auto else ''}:{us:.1f}")
        print(f"{m}x{n}x{k} {tile.name} cuBLAS {blas:.1f} us | " + " ".join(cells), flush=True)


if __name__ == "__main__":
    {"profile": profile, "tiles": tiles, "sweep": sweep, "choose": choose,
     "sweep_async": sweep_async, "splits": splits}[sys.argv[1]]()
