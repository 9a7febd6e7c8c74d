"""The variant catalog: which checksums, levels, modes and tile configurations exist.

A `Variant` is the frozen, hashable description of one protected kernel build. It is
recorded with every result, so two results can only be compared bit-for-bit when their
variants are equal. `docs/SIGNATURES.md` states the rules each variant implements.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Literal

__all__ = [
    "ABFT_KINDS",
    "ABFT_SUFFIXES",
    "CHECKSUMS",
    "CHECKSUM_WORDS",
    "COMBINATIONS",
    "IN_KERNEL_CHECKS",
    "LEVELS",
    "MAX_SPLIT",
    "MODES",
    "M_LEVEL_SCHEDULES",
    "PAPER_LEVELS",
    "RMT_KINDS",
    "RMT_WARP_TILES",
    "SPLIT_MIN_SLICE_K",
    "SPLIT_TARGET_BLOCKS",
    "SPLIT_TARGET_THREADS",
    "STANDARD_COMBINATIONS",
    "STRONG_LEVELS",
    "TILES",
    "TileConfig",
    "Variant",
    "auto_split",
    "auto_tile",
    "checked_variants",
    "make_variant",
    "rmt_warp_variant",
    "split_check_suffix",
    "standard_variants",
    "variant_for_shape",
    "variant_from_name",
    "variant_with_tile",
]

Checksum = Literal["xor", "twos", "ones", "fletcher", "crc32c"]
Mode = Literal["exact", "fma"]

CHECKSUMS: tuple[str, ...] = ("xor", "twos", "ones", "fletcher", "crc32c")
#: Number of uint32 ES words one checksum occupies.
CHECKSUM_WORDS: dict[str, int] = {"xor": 1, "twos": 1, "ones": 1, "fletcher": 2, "crc32c": 1}
#: The seed paper's levels (Algorithm 1: outer loop over k, middle over the B-tile columns j,
#: inner over the A-tile rows i): I folds a[i], b[j], acc[i][j] at every MAC; M folds once per
#: middle step (acc[TM-1][j], the accumulator its inner loop wrote last); E folds once per outer
#: step (acc[TM-1][TN-1], the accumulator of the step's last MAC).
PAPER_LEVELS: tuple[str, ...] = ("I", "M", "E")
#: safemon's stronger folds, named for what they fold: F the operand fragments a[0..TM-1] and
#: b[0..TN-1] at every k step; T the whole accumulator tile at the end of every k-tile.
#: (Evidence schema 1 called these M and E; see docs/SIGNATURES.md.)
STRONG_LEVELS: tuple[str, ...] = ("F", "T")
#: Every single-checksum level, in ES word order.
LEVELS: tuple[str, ...] = PAPER_LEVELS + STRONG_LEVELS
#: The level name recorded for a combination X_Y (X at I, Y at M).
COMBINED_LEVEL = "I+M"
MODES: tuple[str, ...] = ("exact", "fma")
#: Redundant multithreading (docs/RMT.md): "none"; "warp" (every logical thread runs in two
#: lanes of one warp, which compare their accumulators through a warp shuffle before the store);
#: "block" (every block tile runs in two blocks of one grid, which compare their C tiles
#: through global memory before the result counts as released).
RMT_KINDS: tuple[str, ...] = ("none", "warp", "block")
#: ABFT checks (docs/RMT.md, "ABFT"): none; "full", the row and column checksums of every C
#: tile (name suffix "/abft"); "rows", the row checksums only, on B's tile-row sums, which a
#: registered weight computes once (name suffix "/abft-rows"; `safemon.kernels.abft`).
ABFT_KINDS: tuple[str, ...] = ("none", "full", "rows")
ABFT_SUFFIXES: dict[str, str] = {"full": "abft", "rows": "abft-rows"}
#: Every ordered pair of distinct checksums is a valid combination `X_Y`.
COMBINATIONS: tuple[str, ...] = tuple(
    f"{x}_{y}" for x in CHECKSUMS for y in CHECKSUMS if x != y
)
#: The combinations of the seed paper's evaluation; part of `standard_variants()`.
STANDARD_COMBINATIONS: tuple[str, ...] = ("xor_fletcher", "ones_fletcher", "twos_fletcher")


#: Thread rows × columns a warp runs under each non-trivial lane map (`TileConfig.lane_map`).
LANE_MAP_WARPS: dict[int, tuple[int, int]] = {1: (2, 16), 2: (4, 8)}


@dataclass(frozen=True)
class TileConfig:
    """A 2-D register tiling: BM×BN block tile in shared memory, BK-wide k-tiles, TM×TN per thread.

    Thread `t` of a block owns rows `ty*TM .. ty*TM+TM-1` and columns `tx*TN .. tx*TN+TN-1`
    of the block tile, with `ty = t // (BN // TN)` and `tx = t % (BN // TN)`. `t` is the
    logical thread (ES row); `lane_map` says which launched thread runs it.
    """

    name: str
    bm: int
    bn: int
    bk: int
    tm: int
    tn: int
    #: Copy k-tiles into shared memory asynchronously (`cp.async`, mmm.cu's TILE_ASYNC): an
    #: implementation choice of the kernel that changes neither C nor ES, hence not part of a
    #: tile's identity (equality, hash) either.
    async_copy: bool = field(default=False, compare=False)
    #: With asynchronous copies, read A transposed (mmm.cu's A_KMAJOR): the host passes Aᵀ
    #: (K×M, made by transpose.cu on the same stream), whose k-tiles are BK rows of BM
    #: consecutive words, copied 16 bytes at a time straight into the transposed shared tile
    #: instead of one word per copy. Like `async_copy`, it changes neither C nor ES and is not
    #: part of the tile's identity. Builds that copy through registers (a fold at every MAC on
    #: a TN = 8 tile, the injection build) read A as it is (`Variant.reads_a_transposed`).
    a_kmajor: bool = field(default=False, compare=False)
    #: Which launched thread runs which logical thread `t` (mmm.cu's LANE_MAP): 0, a warp runs
    #: consecutive `t`; 1, a warp runs two thread rows of 16 threads, lane bit 0 picking the row;
    #: 2, four rows of 8. The logical threads, their sub-tiles and their ES rows are the same
    #: under every map, so C and ES are too (an implementation choice, not part of the tile's
    #: identity). Under 1 and 2 neighbouring lanes share fragment addresses, so a warp's
    #: 16-byte fragment reads take fewer shared-memory wavefronts (`large` at 4096³: 487 M →
    #: 352 M). Intra-warp RMT builds keep map 0 (their replica lanes already share every
    #: address).
    lane_map: int = field(default=0, compare=False)
    #: The order of one k step's independent MACs (mmm.cu's MAC_ORDER): 0, Algorithm 1's
    #: (columns outer, rows inner, each MAC's folds after it); 1, rows outer with columns in
    #: serpentine order (rows alternate direction). Each accumulator changes once per k step,
    #: so C is the same; level M's folds follow the MACs of the last row, which then runs
    #: forward, and level E's the step, so ES is the same too: an implementation choice, not
    #: part of the tile's identity. A tile with order 1 runs it, and its lane map, only in
    #: builds without a fold at every MAC (level I; `Variant.kernel_schedule`).
    mac_order: int = field(default=0, compare=False)

    def __post_init__(self) -> None:
        for attr in ("bm", "bn", "bk", "tm", "tn"):
            if getattr(self, attr) <= 0:
                raise ValueError(f"tile {self.name!r}: {attr} must be positive")
        if self.bm % self.tm or self.bn % self.tn:
            raise ValueError(f"tile {self.name!r}: BM must divide by TM and BN by TN")
        if (self.bm * self.bk) % self.threads or (self.bk * self.bn) % self.threads:
            raise ValueError(f"tile {self.name!r}: tile loads must split evenly over threads")
        if self.tm % 4 or self.tn % 4:
            # The kernels read register fragments from shared memory as float4.
            raise ValueError(f"tile {self.name!r}: TM and TN must be multiples of 4")
        if self.mac_order not in (0, 1):
            raise ValueError(f"tile {self.name!r}: mac_order must be 0 or 1")
        if self.lane_map not in LANE_MAP_WARPS and self.lane_map != 0:
            raise ValueError(f"tile {self.name!r}: lane_map must be 0, 1 or 2")
        if self.lane_map:
            rows, cols = LANE_MAP_WARPS[self.lane_map]
            if (self.bn // self.tn) % cols or (self.bm // self.tm) % rows:
                raise ValueError(
                    f"tile {self.name!r}: lane_map {self.lane_map} runs warps of {rows}×{cols} "
                    f"threads, which must tile its {self.bm // self.tm}×{self.bn // self.tn}")

    @property
    def threads(self) -> int:
        """Threads per block."""
        return (self.bm // self.tm) * (self.bn // self.tn)

    def grid(self, m: int, n: int) -> tuple[int, int]:
        """(blocks along N, blocks along M) for an M×N output."""
        return (-(-n // self.bn), -(-m // self.bm))

    def total_threads(self, m: int, n: int) -> int:
        """Number of launched threads, i.e. rows of the ES array, for an M×N output."""
        gx, gy = self.grid(m, n)
        return gx * gy * self.threads

    def k_padded(self, k: int) -> int:
        """K rounded up to a whole number of k-tiles (the padded k steps every thread runs)."""
        return -(-k // self.bk) * self.bk

    def describe(self) -> str:
        return f"{self.name}:{self.bm}x{self.bn}x{self.bk}/{self.tm}x{self.tn}"


TILES: dict[str, TileConfig] = {
    # Small matrices (the seed's 20²..80²): many blocks even for tiny outputs.
    "small": TileConfig("small", bm=32, bn=32, bk=8, tm=4, tn=4),
    # Throughput: 256 threads, 8×8 register tile per thread. Asynchronous copies from a
    # transposed A, the transpose included: at 512×4096×4096 to 4096³ 1.02-1.07× faster
    # unprotected and 1.07-1.15× with ones' complement folds at M or T than copying through
    # registers, but 0.96-0.97× unprotected and twos/M at 1024³ (split 4; the transpose costs
    # more than it gains there: evidence/h100-2026-11-24-kmajor/, call 3); with the one-word
    # copies of A that `wide` uses it was 0.88-0.92× as fast.
    # MAC order 1 with lane map 1 except at level I (`Variant.kernel_schedule`): same C and
    # ES, unprotected 1.04-1.07x faster, twos/T 1.03-1.06x, ones/T 1.01-1.03x, twos/M and
    # xor/M 1.01-1.04x, ones/E 1.04-1.08x, ones/M 1.00-1.01x, crc32c/T and ones/F 0.97-0.99x
    # at 1024³-4096³ (evidence/h100-2026-11-25-lanemap/).
    "large": TileConfig("large", bm=128, bn=128, bk=8, tm=8, tn=8, async_copy=True,
                        a_kmajor=True, lane_map=1, mac_order=1),
    # Flat outputs (few rows, many columns, like the seed's L91 18×230400): little row padding.
    # Asynchronous copies: 1.10-1.44× faster on the H100 (evidence/h100-2026-11-23-async/).
    # Lane map 1 (`TileConfig.lane_map`) on `wide` and `wide64`: same C and ES, 1.01-1.11x faster
    # with fma at 16-128 rows (0.98-1.01x exact); on `large` alone it was 0.98x unprotected
    # and 1.02-1.03x at level T (it pays there with MAC order 1, above); on `small` and `skinny`
    # 0.97-1.03x, so those keep map 0 (evidence/h100-2026-11-25-lanemap/).
    "wide": TileConfig("wide", bm=32, bn=128, bk=8, tm=4, tn=8, async_copy=True, lane_map=1),
    # `wide`'s register tile with 64 rows (256 threads): where `wide` would run an even number
    # of its 32-row tiles, each block reads B once for twice the rows
    # (evidence/h100-2026-11-24-wide64/: 1.12× faster at 64×4096×4096 and 256×1024×4096).
    "wide64": TileConfig("wide64", bm=64, bn=128, bk=8, tm=4, tn=8, async_copy=True,
                         lane_map=1),
    # Inference rows (batch 1..8 against a weight matrix, issue 14): 8 rows pad a single row
    # 8-fold instead of 32-fold (the fastest of the candidates measured in
    # evidence/h100-2026-11-22-speed2/sweep.txt). 16-wide k-tiles copied asynchronously, two
    # stages deep, beat the earlier 32-wide ones loaded through registers by 1.11-1.28× at
    # 1 and 8×4096×4096 (evidence/h100-2026-11-23-async/; 32-wide stages do not fit static
    # shared memory).
    "skinny": TileConfig("skinny", bm=8, bn=256, bk=16, tm=4, tn=4, async_copy=True),
    # Intra-warp RMT where the others run `large` (`RMT_WARP_TILES`): half of large's rows and
    # 16-wide k-tiles. An RMT block launches two lanes per logical thread, so a `large` block
    # is 512 threads and only one fits an SM at 128 registers; this tile's 256 fit two, which
    # keep the SM busy while the other waits at a barrier (scripts/rmt_tile_probe.py,
    # evidence/h100-2026-11-24-rmt-tile/: rmt-warp 1.73× the unprotected `large` kernel at
    # 4096³ on it against 2.26× on `large`). Never picked without RMT: unprotected it is
    # 0.82× as fast as `large` at 4096³.
    "half": TileConfig("half", bm=64, bn=128, bk=16, tm=8, tn=8),
}

#: Schedules that run faster than their tile's own in fma builds whose only fold is one
#: checksum at level M, by (tile name, checksum): (lane map, MAC order)
#: (`Variant.kernel_schedule`). Same C and ES under every schedule. Measured on the H100
#: against `large`'s (1, 1), same bits (evidence/h100-2026-11-25-stop48/, calls 1-3): twos/M
#: and xor/M 1.04-1.07x faster with lane map 0 at 1024³-4096³ (three or four rounds); ones/M
#: 0.97-0.99x with map 0 alone, 1.00-1.03x with map 0 and order 0 (two rounds, 1024³ and
#: 4096³). Other fma levels and checksums measured 0.98-1.02x under map 0 and keep the tile's
#: schedule; exact mode was timed for twos/M alone (1.01-1.02x) and keeps it too.
M_LEVEL_SCHEDULES: dict[tuple[str, str], tuple[int, int]] = {
    ("large", "twos"): (0, 1),
    ("large", "xor"): (0, 1),
    ("large", "ones"): (0, 0),
}

#: Tiles that intra-warp RMT runs instead of the automatic choice (`variant_for_shape`): the
#: 256-thread tiles, which RMT would double to one 512-thread block per SM.
RMT_WARP_TILES: dict[str, str] = {"large": "half", "wide64": "wide"}

#: Outputs with at most this many elements use the "small" tile when `tile=None`.
AUTO_SMALL_MAX_ELEMENTS = 256 * 256
#: Outputs of at most `skinny`'s BM rows and at least this many columns use "skinny".
AUTO_SKINNY_MIN_N = 256
#: `large` needs at least this many rows (fewer pad its 128-row tile by half or more) and
#: this many blocks before any split.
AUTO_LARGE_MIN_ROWS = 128
AUTO_LARGE_MIN_BLOCKS = 32
#: Outputs between `wide`'s and `large`'s use `wide` (split over K) from this K on, `small`
#: below it (short products fill the GPU better with small's many blocks).
AUTO_WIDE_MIN_K = 1024
#: `wide64` reading Aᵀ (`TileConfig.a_kmajor`): the same tile, hence the same C and ES, with
#: A's k-tiles copied 8 bytes at a time from a transposed A instead of one word per copy, the
#: transpose (transpose.cu) paid with every call. `auto_tile` picks it where M fills whole
#: 64-row tiles and the output spans at least `AUTO_WIDE64_AT_MIN_TILES` tiles, which read
#: each k-tile of A often enough to repay the transpose. Measured on the H100, transpose
#: included (evidence/h100-2026-11-25-lanes/, call 10): unprotected 1.03× at 64×4096×4096
#: and 256×1024×4096 (32 tiles), 1.07–1.08× at 64×11008×4096 and 64×4096×11008; ones/T
#: 1.02–1.07×; twos/M 0.99–1.03×; but 0.95× at 64×1024×4096 (8 tiles), 0.87–0.89× at 2 to 8
#: tiles of shorter products, and 0.98× at 40 rows, which pad the tile.
WIDE64_READS_AT = replace(TILES["wide64"], a_kmajor=True)
AUTO_WIDE64_AT_MIN_TILES = 32
#: Level T folds every accumulator of a thread once per k-tile: TM·TN words per BK k steps, so
#: its cost per MAC is 1/BK words, and the ones' complement fold takes about one integer
#: instruction per word. Where `auto_tile` picks `large` or `wide64` (reading Aᵀ or not), a
#: variant that folds at T runs the same tile with 16-wide k-tiles (`t_level_variant`): half
#: the folds, on the same K-slices, hence the same C as every other variant at the shape; ES
#: folds each accumulator after every 16 k steps instead of every 8 (docs/SIGNATURES.md,
#: "Thread decomposition"). Measured on the H100, kernel time (evidence/h100-2026-11-25-ktile/): ones/T
#: 1.14x faster at 4096³ and 2048³, 1.07x at 1024³ (`large`), 1.06-1.07x at 64 and 256 rows
#: (`wide64`); twos/T 1.03-1.11x. Other levels fold at every k step, where the k-tile width
#: changes neither ES nor the fold count, and the unprotected kernel on `large` was 0.95x as
#: fast with 16-wide k-tiles (two stages, 44 bytes of spills), so they keep the catalog's.
#: Level M keeps `large` although a 16×8 register tile (128×256 block) halves its folds per
#: MAC (ones/M 1.00-1.04x, fletcher/M 1.05-1.12x, crc32c/M 1.15-1.16x faster with fma): M
#: folds acc[TM-1][j], one row of the thread's accumulators, so a taller tile sees one row in
#: 16 instead of one in 8, and in-kernel DC fell from 17/42 to 11/41 (transient) and from 30/60 to 24/60
#: (block-permanent) dangerous faults at 128x4096x1000 (evidence/h100-2026-11-25-stop46/).
T_LEVEL_K_TILES: dict[str, tuple[str, int]] = {"large": ("large_k16", 16),
                                               "wide64": ("wide64_k16", 16)}


def t_level_tile(tile: TileConfig) -> TileConfig:
    """The tile a level-T variant runs where the automatic choice is `tile`
    (`T_LEVEL_K_TILES`; the same copies, lane map and MAC order, another name and k-tile
    width), or `tile` itself."""
    if tile.name not in T_LEVEL_K_TILES:
        return tile
    name, bk = T_LEVEL_K_TILES[tile.name]
    return replace(tile, name=name, bk=bk)


#: The tiles of level T as the kernels build them (`t_level_tile` of each tile it replaces).
T_LEVEL_BUILDS: tuple[TileConfig, ...] = tuple(
    t_level_tile(t) for t in (TILES["large"], TILES["wide64"], WIDE64_READS_AT))
#: Every tile as the kernels build it: the catalog's, `wide64` reading Aᵀ (equal to
#: `TILES["wide64"]`, another build) and level T's. What warms up, audits or tests "every
#: tile" iterates this.
TILE_BUILDS: tuple[TileConfig, ...] = (*TILES.values(), WIDE64_READS_AT, *T_LEVEL_BUILDS)
#: Every tile by the name `Variant.name` gives it: the catalog's and level T's, so that a
#: variant's name always parses back (`variant_from_name`). Channels name catalog tiles only
#: (`VariantConfig.tile`); level T's are picked by `tile=None`.
NAMED_TILES: dict[str, TileConfig] = {
    **TILES, **{t.name: t for t in (t_level_tile(TILES[n]) for n in T_LEVEL_K_TILES)}}


def auto_tile_builds(level: str | None) -> tuple[TileConfig, ...]:
    """The tile builds `tile=None` can give a variant folding at `level` (None: unprotected):
    `TILE_BUILDS`, less level T's unless `level` is "T"."""
    return TILE_BUILDS if level == "T" else tuple(t for t in TILE_BUILDS if t not in T_LEVEL_BUILDS)


def auto_tile(m: int, n: int, k: int, level: str | None = None) -> TileConfig:
    """The tile `tile=None` picks for an (M, K)·(K, N) product: a pure function of the shape
    and the variant's level, so replicas agree.

    In order: `skinny` for at most 8 rows and at least `AUTO_SKINNY_MIN_N` columns; `small`
    for outputs of at most `AUTO_SMALL_MAX_ELEMENTS`; `wide` for flat ones (at most 32
    rows); `large` from `AUTO_LARGE_MIN_ROWS` rows when its grid has at least
    `AUTO_LARGE_MIN_BLOCKS` blocks; else, when K ≥ `AUTO_WIDE_MIN_K` and the level folds
    nothing at every MAC, `wide64` if M spans an even number of `wide`'s 32-row tiles (the
    same tile reading Aᵀ, `WIDE64_READS_AT`, where M is a multiple of 64 and the output spans
    at least `AUTO_WIDE64_AT_MIN_TILES` tiles) and `wide` if odd; else `small` (the split then
    fills the GPU).

    `level` is the variant's level ("I", "M", "I+M", ...; None unprotected). A fold at every
    MAC (I) keeps `wide` on register staging (mmm.cu), where `small` measured as fast or
    faster. Measured on the H100 (evidence/h100-2026-11-23-async/choose/choose.txt), against the
    previous rule (large only from 264 blocks, else small): unprotected 64×4096×4096 1.22×,
    256×4096×4096 1.39×, 2048³ 1.60× faster; level I at 2048³ 1.05× slower.
    """
    if m <= TILES["skinny"].bm and n >= AUTO_SKINNY_MIN_N:
        return TILES["skinny"]
    if m * n <= AUTO_SMALL_MAX_ELEMENTS:
        return TILES["small"]
    if m <= TILES["wide"].bm:
        return TILES["wide"]
    gx, gy = TILES["large"].grid(m, n)
    if m >= AUTO_LARGE_MIN_ROWS and gx * gy >= AUTO_LARGE_MIN_BLOCKS:
        return TILES["large"]
    every_mac = level is not None and "I" in level.split("+")
    if k >= AUTO_WIDE_MIN_K and not every_mac:
        # `wide64` where it pads M no more than `wide` does (an even number of 32-row tiles),
        # reading Aᵀ where that pays (`WIDE64_READS_AT`).
        if -(-m // TILES["wide"].bm) % 2:
            return TILES["wide"]
        t = TILES["wide64"]
        gx, gy = t.grid(m, n)
        return WIDE64_READS_AT if m % t.bm == 0 and gx * gy >= AUTO_WIDE64_AT_MIN_TILES else t
    return TILES["small"]


#: Split-K: a product whose grid holds fewer threads than this is split over K until it holds
#: about this many (512 per multiprocessor of a 132-SM H100: two blocks of the 256-thread
#: tiles, four of the 128-thread `skinny`, which its 128 registers and 34 KiB of shared memory
#: per block allow: one full wave either way). A constant, never read from the device, so that
#: replicas on different devices pick the same decomposition.
#:
#: `skinny` had half this target (256 blocks) until 2026-11-24, from the sweep of its
#: register-staged 32-wide version (evidence/h100-2026-11-22-speed2/sweep.txt). With its
#: asynchronous copies B streams best with the whole wave resident: on the H100 the full
#: target made ones/T 1.24× faster at 1×11008×4096, 1.21× at 1×14336×4096, 1.09–1.10× at
#: 1×8192×8192 and 1×5120×5120, 1.00× at 1×4096×4096 and 0.96–0.98× at 8×4096×4096, and the
#: unprotected kernel alike. At four of those shapes it made a fold at every MAC (ones/I)
#: 0.90–0.93× as fast, and intra-warp RMT, whose blocks are twice as wide, 0.88–0.97×, and
#: 0.40× at 1×5120×5120 (evidence/h100-2026-11-24-split/).
SPLIT_TARGET_THREADS = 132 * 512
#: The first split rule's target in `large` blocks (SPLIT_TARGET_THREADS / 256).
SPLIT_TARGET_BLOCKS = 264
#: Every K-slice of an automatic split keeps at least this many k steps (16 k-tiles of BK = 8).
#: Halving it was measured on 2026-11-24: ones/T 1.07–1.26× faster at batch-1 shapes with K of
#: 512 to 1024 and 1.22× at 32×1024×512, but it would also split the seed's 160³ in two, whose
#: C the evidence compares across versions; not changed (evidence/h100-2026-11-24-split/).
SPLIT_MIN_SLICE_K = 128
#: The largest split factor a variant may ask for.
MAX_SPLIT = 64


def auto_split(m: int, n: int, k: int, tile: TileConfig) -> int:
    """The split factor `split=None` picks: a pure function of the shape and the tile.

    With `want = SPLIT_TARGET_THREADS // THREADS` blocks: 1 when the output grid already has
    `want` blocks or K is short; else `want // blocks`, rounded down so that the grid never
    exceeds the target (a grid just over one wave runs its last blocks almost alone), and
    keeping at least `SPLIT_MIN_SLICE_K` k steps (whole k-tiles) per slice; returned as the
    number of slices that factor launches (`k_slices`), which can be fewer.
    """
    gx, gy = tile.grid(m, n)
    blocks = gx * gy
    want = max(1, SPLIT_TARGET_THREADS // tile.threads)
    if blocks <= 0 or k <= 0 or blocks >= want:
        return 1  # empty shapes are rejected later by validation
    ktiles = -(-k // tile.bk)
    min_tiles = max(1, -(-SPLIT_MIN_SLICE_K // tile.bk))
    # The slices that split launches (k_slices), so that the variant names what runs: at
    # 1×5120×5120 the target allows 26, whose slices of 13 k-tiles are 25.
    return k_slices(k, tile.bk, max(1, min(want // blocks, ktiles // min_tiles, MAX_SPLIT)))


def k_slices(k: int, bk: int, split: int) -> int:
    """Number of K-slices (`gridDim.z`) for a requested `split`: no slice is left empty.

    The kernel gives slice z the k-tiles `[z·T, min(kt, (z+1)·T))` with `kt = ⌈K/BK⌉` and
    `T = ⌈kt / gridDim.z⌉` (docs/SIGNATURES.md, "Split-K"). With `gridDim.z = ⌈kt / ⌈kt/s⌉⌉`,
    `s = min(split, kt)`, every slice holds at least one k-tile.
    """
    kt = -(-k // bk)
    s = max(1, min(split, kt))
    per = -(-kt // s)
    return -(-kt // per)


def slice_bounds(k: int, bk: int, slices: int) -> list[tuple[int, int]]:
    """The K range `[begin, end)` (unpadded, clipped to K) of each of `slices` slices, in z order."""
    kt = -(-k // bk)
    per = -(-kt // slices)
    return [(z * per * bk, min(k, (z + 1) * per * bk)) for z in range(slices)]


def slice_k_max(k: int, bk: int, slices: int) -> int:
    """The most k of any of the `slices` K-slices (`slice_bounds`): the longest chain of
    multiply-adds behind one partial sum of C, which bounds its roundings (ABFT's tolerance,
    `safemon.kernels.abft`)."""
    return max(hi - lo for lo, hi in slice_bounds(k, bk, slices))


@dataclass(frozen=True)
class Variant:
    """One kernel build: the checksum(s), where they fold, the arithmetic mode and the tiling.

    `checksum` is None for the unprotected kernel. For a combination `X_Y`, `level` is "I+M".
    `split` is the requested split-K factor (1: no split); the number of K-slices actually
    launched for a given K is `slices(k)`. `rmt` is the redundant-multithreading kind
    (`RMT_KINDS`); it never changes C or ES, only how many lanes compute them and the check
    made before the store. `abft_kind` (`ABFT_KINDS`) adds the checksum check of
    `safemon.kernels.abft` after the kernel (C and ES unchanged); `abft` says whether there is
    one.
    """

    checksum: str | None
    level: str | None
    mode: str
    tile: TileConfig
    split: int = 1
    rmt: str = "none"
    abft_kind: str = "none"

    @property
    def abft(self) -> bool:
        """True when an ABFT check (of either kind) follows the kernel."""
        return self.abft_kind != "none"

    @property
    def copies(self) -> int:
        """Replicas of each logical thread inside one block (2 with intra-warp RMT, else 1)."""
        return 2 if self.rmt == "warp" else 1

    @property
    def grid_copies(self) -> int:
        """Copies of each block tile in the grid (2 with inter-block RMT, else 1): the launch
        grid is (gx, grid_copies · gy, slices)."""
        return 2 if self.rmt == "block" else 1

    @property
    def replicas(self) -> int:
        """Replicas of each logical thread, of either RMT kind (what a fault campaign draws
        from: 2 with any RMT, else 1)."""
        return self.copies * self.grid_copies

    @property
    def block_threads(self) -> int:
        """Threads launched per block: the tile's logical threads times `copies`."""
        return self.tile.threads * self.copies

    def slices(self, k: int) -> int:
        """K-slices (`gridDim.z`) of a product with inner dimension `k`."""
        return k_slices(k, self.tile.bk, self.split)

    def longest_slice(self, k: int) -> int:
        """The most k of any of those slices (`slice_k_max`): ABFT's rounding count."""
        return slice_k_max(k, self.tile.bk, self.slices(k))

    def es_threads(self, m: int, n: int, k: int) -> int:
        """Rows of the ES array: launched threads over all K-slices."""
        return self.tile.total_threads(m, n) * self.slices(k)

    @property
    def reads_a_transposed(self) -> bool:
        """True when the production build of this variant reads Aᵀ (K×M) instead of A
        (`TileConfig.a_kmajor`): its tile copies k-tiles asynchronously from a transposed A,
        and no fold at every MAC on a TN = 8 tile sends it back to register copies (mmm.cu's
        ASYNC_COPY rule, which refuses to compile A_KMAJOR without it). The fault-injection
        build never does (`gpu.build_for`)."""
        t = self.tile
        every_mac = any(level == "I" for _, level in self.parts)
        return t.a_kmajor and t.async_copy and not (t.tn >= 8 and every_mac)

    @property
    def kernel_schedule(self) -> tuple[int, int]:
        """(lane map, MAC order) of this variant's production build (mmm.cu's LANE_MAP and
        MAC_ORDER; `TileConfig.lane_map`, `TileConfig.mac_order`). Neither changes C or ES.
        A tile with a MAC order runs it, and its lane map, only where no level folds at every
        MAC (I: mmm.cu keeps Algorithm 1's order there). Intra-warp RMT builds run map 0 and
        order 0: their replica lanes share every address already, and neither was measured
        there. A build in fma mode whose only fold is one checksum at level M, without RMT,
        on a tile that is the catalog's own (`TILES`: the same dimensions, copies and
        schedule), runs `M_LEVEL_SCHEDULES` where that names its (tile, checksum); a tile
        given another schedule (`dataclasses.replace`, as the schedule tests do) runs that
        one."""
        t = self.tile
        if self.rmt == "warp" or (t.mac_order and any(level == "I" for _, level in self.parts)):
            return (0, 0)
        if self.level == "M" and self.mode == "fma" and self.rmt == "none":
            chosen = M_LEVEL_SCHEDULES.get((t.name, str(self.checksum)))
            own = TILES.get(t.name)
            # The catalog's own tile: equality leaves the copy and schedule fields out.
            if (chosen is not None and own is not None and t == own
                    and (t.async_copy, t.a_kmajor, t.lane_map, t.mac_order)
                    == (own.async_copy, own.a_kmajor, own.lane_map, own.mac_order)):
                return chosen
        return (t.lane_map, t.mac_order)

    @property
    def is_combination(self) -> bool:
        return self.checksum is not None and "_" in self.checksum

    @property
    def parts(self) -> tuple[tuple[str, str], ...]:
        """The (checksum, level) pairs in ES word order."""
        if self.checksum is None or self.level is None:
            return ()
        if self.is_combination:
            x, y = self.checksum.split("_")
            return ((x, "I"), (y, "M"))
        return ((self.checksum, self.level),)

    @property
    def words(self) -> int:
        """ES words per thread."""
        return sum(CHECKSUM_WORDS[c] for c, _ in self.parts)

    @property
    def name(self) -> str:
        """Short stable name, e.g. `ones/I/exact/small` or `unprotected/fma/large`."""
        suffix = f"/split{self.split}" if self.split > 1 else ""
        if self.rmt != "none":
            suffix += f"/rmt-{self.rmt}"
        if self.abft:
            suffix += "/" + ABFT_SUFFIXES[self.abft_kind]
        if self.checksum is None:
            return f"unprotected/{self.mode}/{self.tile.name}{suffix}"
        return f"{self.checksum}/{self.level}/{self.mode}/{self.tile.name}{suffix}"

    def as_dict(self) -> dict[str, object]:
        """JSON form; `split` appears only when it is not 1, `rmt` only when it is not
        "none" and `abft` only with a check (True for "full", "rows" for the row check), so
        older files stay valid."""
        t = self.tile
        out: dict[str, object] = {
            "checksum": self.checksum,
            "level": self.level,
            "mode": self.mode,
            "tile": {"name": t.name, "bm": t.bm, "bn": t.bn, "bk": t.bk, "tm": t.tm, "tn": t.tn},
            "words": self.words,
        }
        if self.split > 1:
            out["split"] = self.split
        if self.rmt != "none":
            out["rmt"] = self.rmt
        if self.abft:
            out["abft"] = True if self.abft_kind == "full" else self.abft_kind
        return out


def make_variant(
    checksum: str | None, level: str | None, mode: str, tile: TileConfig | str, split: int = 1,
    rmt: str = "none",
    abft: bool | str = False,
) -> Variant:
    """Validate the parts and build a `Variant`.

    Raises:
        ValueError: unknown checksum, level, mode or tile name, a level that does not
            fit the checksum (a combination `X_Y` takes level "I" or "I+M"), or a split
            outside 1..MAX_SPLIT, an unknown `rmt` kind, or an `abft` that is neither a bool
            (False: none, True: "full") nor one of `ABFT_KINDS`.
        TypeError: `tile` is neither a name nor a `TileConfig`.
    """
    if isinstance(split, bool) or not isinstance(split, int) or not 1 <= split <= MAX_SPLIT:
        raise ValueError(f"split must be an integer in 1..{MAX_SPLIT}, not {split!r}")
    if isinstance(tile, str):
        if tile not in NAMED_TILES:
            raise ValueError(f"unknown tile {tile!r}; known: {', '.join(NAMED_TILES)}")
        tile = NAMED_TILES[tile]
    elif not isinstance(tile, TileConfig):
        raise TypeError(f"tile must be a name or a TileConfig, not {type(tile).__name__}")
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; known: {', '.join(MODES)}")
    if rmt not in RMT_KINDS:
        raise ValueError(f"unknown rmt kind {rmt!r}; known: {', '.join(RMT_KINDS)}")
    kind = abft_kind_of(abft)
    if checksum is None:
        return Variant(None, None, mode, tile, split, rmt, kind)
    if checksum in COMBINATIONS:
        if level not in ("I", COMBINED_LEVEL):
            raise ValueError(
                f"combination {checksum!r} folds its first checksum at I and its second at M; "
                f"level must be 'I' or 'I+M', not {level!r}"
            )
        return Variant(checksum, COMBINED_LEVEL, mode, tile, split, rmt, kind)
    if checksum not in CHECKSUMS:
        raise ValueError(
            f"unknown checksum {checksum!r}; known: {', '.join(CHECKSUMS)} "
            f"or a combination X_Y of two of them"
        )
    if level not in LEVELS:
        raise ValueError(f"unknown level {level!r}; known: {', '.join(LEVELS)}")
    return Variant(checksum, level, mode, tile, split, rmt, kind)


def abft_kind_of(abft: bool | str) -> str:
    """The `ABFT_KINDS` entry an `abft` argument names: False → "none", True → "full", or the
    kind itself.

    Raises:
        ValueError: anything else.
    """
    if isinstance(abft, bool):
        return "full" if abft else "none"
    if isinstance(abft, str) and abft in ABFT_KINDS:
        return abft
    raise ValueError(f"abft must be a bool or one of {', '.join(ABFT_KINDS)}, not {abft!r}")


@lru_cache(maxsize=4096)
def variant_with_tile(base: Variant, tile: str | TileConfig, k: int) -> Variant:
    """`base` (an automatic choice for inner dimension `k`) on another `tile` (a catalog name
    or a `TileConfig`), with the K-split
    that gives the same slice bounds (`slice_bounds`), so that both compute the same C bit for
    bit: C depends on how K is cut into slices and on nothing else of the tiling.

    Diverse channels (one tile each, `VariantConfig.tile`) are voted on C alone
    (`safemon.patterns.voter`); their own automatic splits differ per tile (64×4096×4096:
    `small` 4, `wide` and `large` 8), and such channels disagreed on every request. Where no
    split of `tile` reproduces the bounds (a k-tile width that does not divide them), the
    base's split is kept: such channels can disagree, and docs/SIGNATURES.md says so.
    """
    t = NAMED_TILES[tile] if isinstance(tile, str) else tile
    if t == base.tile:
        return base
    want = slice_bounds(k, base.tile.bk, base.slices(k))
    for split in range(1, MAX_SPLIT + 1):
        if slice_bounds(k, t.bk, k_slices(k, t.bk, split)) == want:
            return make_variant(base.checksum, base.level, base.mode, t, split, base.rmt,
                                base.abft_kind)
    return make_variant(base.checksum, base.level, base.mode, t, base.split, base.rmt,
                        base.abft_kind)


@lru_cache(maxsize=4096)
def variant_for_shape(
    m: int, n: int, k: int, checksum: str | None, level: str | None, mode: str,
    tile: TileConfig | str | None, split: int | None, rmt: str = "none",
    abft: bool | str = False,
) -> Variant:
    """The variant an (M, K)·(K, N) product runs: `tile` None picks `auto_tile` (by the
    variant's own level), `split` None `auto_split`. A pure function, cached, so one shape
    and choice always gets the same `Variant` object (the CuPy backend caches its launch plans
    per variant object) and a call pays one look-up, not two `make_variant` validations and
    the tile and split arithmetic. Errors are raised, never cached. The API
    (`safemon.kernels.api`) and the channels (`VariantConfig.to_variant`) both use it.

    Intra-warp RMT (`rmt="warp"`) with `tile` None runs `rmt_warp_variant` of the choice:
    `half` for `large`, `wide` for `wide64`, on the same K-slices (else the choice itself), so
    C is always the C of the same call without RMT. Likewise a level-T variant without RMT
    runs `t_level_variant` of the choice (16-wide k-tiles on `large` and `wide64`).
    """
    # Validate first (with a placeholder tile when choosing one): auto_tile needs the variant's
    # own level, which is None for an unprotected variant whatever `level` says.
    chosen = make_variant(checksum, level, mode, TILES["small"] if tile is None else tile,
                          rmt=rmt, abft=abft)
    if tile is None:
        chosen = make_variant(checksum, level, mode, auto_tile(m, n, k, chosen.level), rmt=rmt,
                              abft=abft)
    picked = make_variant(checksum, level, mode, chosen.tile,
                          auto_split(m, n, k, chosen.tile) if split is None else split, rmt, abft)
    if tile is None and rmt == "warp":
        return rmt_warp_variant(picked, k)
    return t_level_variant(picked, k) if tile is None else picked


def t_level_variant(base: Variant, k: int) -> Variant:
    """The variant a level-T `base` (an automatic choice for inner dimension `k`, without
    RMT) runs: `base` on `t_level_tile(base.tile)` where that tile's k-tiles cut K
    into `base`'s K-slices (`variant_with_tile`; always so without a split), else `base`.
    C is therefore always `base`'s C; any other `base` is returned as it is."""
    if base.level != "T" or base.rmt != "none":
        return base
    tile = t_level_tile(base.tile)
    if tile is base.tile:
        return base
    # Uncached: `variant_with_tile`'s cache key cannot tell `wide64` from `WIDE64_READS_AT`
    # (equal tiles, other builds), and the build must stay the base's.
    return _if_same_slices(variant_with_tile.__wrapped__(base, tile, k), base, k)


def rmt_warp_variant(base: Variant, k: int) -> Variant:
    """The variant intra-warp RMT runs for `base`, an automatic choice for inner dimension `k`:
    `base` on `RMT_WARP_TILES[base.tile]` where there is one and its k-tiles cut K into
    `base`'s K-slices (`variant_with_tile`; always so without a split), else `base`. C is
    therefore always `base`'s C."""
    if base.tile.name not in RMT_WARP_TILES:
        return base
    return _if_same_slices(variant_with_tile(base, RMT_WARP_TILES[base.tile.name], k), base, k)


def _if_same_slices(moved: Variant, base: Variant, k: int) -> Variant:
    """`moved` where it cuts K into `base`'s K-slices (so computes `base`'s C), else `base`."""
    same = slice_bounds(k, moved.tile.bk, moved.slices(k)) == slice_bounds(
        k, base.tile.bk, base.slices(k))
    return moved if same else base


def standard_variants(
    mode: str = "exact", tile: TileConfig | str = "small", split: int = 1
) -> list[Variant]:
    """The evaluated catalog: 5 checksums × 5 levels (I, M, E, F, T), then the seed's three
    combinations (X at I, Y at the paper's M)."""
    out = [make_variant(c, lv, mode, tile, split) for c in CHECKSUMS for lv in LEVELS]
    out += [make_variant(c, "I", mode, tile, split) for c in STANDARD_COMBINATIONS]
    return out


#: The in-kernel check variants (docs/RMT.md) that `safemon bench`, `safemon dc` and
#: `safemon select` evaluate beside the ES-only catalog: (checksum, level, rmt, abft kind) for
#: intra-warp RMT and ABFT alone, each with ES-M, and all three together; then inter-block
#: RMT alone and with ES-M; then the row-only ABFT alone and with ES-M.
IN_KERNEL_CHECKS: tuple[tuple[str | None, str | None, str, str], ...] = (
    (None, None, "warp", "none"),
    (None, None, "none", "full"),
    ("ones", "M", "warp", "none"),
    ("ones", "M", "none", "full"),
    ("ones", "M", "warp", "full"),
    (None, None, "block", "none"),
    ("ones", "M", "block", "none"),
    (None, None, "none", "rows"),
    ("ones", "M", "none", "rows"),
)


def checked_variants(
    mode: str = "exact", tile: TileConfig | str = "small", split: int = 1
) -> list[Variant]:
    """The `IN_KERNEL_CHECKS` variants at one mode, tile and split."""
    return [make_variant(c, lv, mode, tile, split, rmt=r, abft=ab) for c, lv, r, ab in IN_KERNEL_CHECKS]


def split_check_suffix(text: str) -> tuple[str, str, str]:
    """Split the check suffixes off a "/"-separated name or label: ("ones/M/rmt-warp/abft")
    → ("ones/M", "warp", "full"), ("unprotected/abft-rows") → ("unprotected", "none",
    "rows"). The suffixes are those `Variant.name` appends, in its order (`/rmt-<kind>`
    before `/abft` or `/abft-rows`); the third part is an `ABFT_KINDS` entry.

    Raises:
        ValueError: an unknown RMT kind.
    """
    parts = text.split("/")
    abft = "none"
    for kind, suffix in ABFT_SUFFIXES.items():
        if parts and parts[-1] == suffix:
            abft = kind
            parts = parts[:-1]
            break
    rmt = "none"
    if parts and parts[-1].startswith("rmt-"):
        rmt = parts.pop().removeprefix("rmt-")
        if rmt not in RMT_KINDS or rmt == "none":
            raise ValueError(f"unknown rmt kind {rmt!r} in {text!r}; known: warp, block")
    return "/".join(parts), rmt, abft


def variant_from_name(name: str) -> Variant:
    """The variant whose `Variant.name` is `name` (the inverse of `name`).

    Raises:
        ValueError: a name `Variant.name` cannot produce (unknown parts, wrong part count).
    """
    base, rmt, abft = split_check_suffix(name)
    parts = base.split("/")
    split = 1
    if parts and parts[-1].startswith("split") and parts[-1][5:].isdigit():
        split = int(parts.pop()[5:])
    if parts[:1] == ["unprotected"] and len(parts) == 3:
        v = make_variant(None, None, parts[1], parts[2], split, rmt, abft)
    elif len(parts) == 4:
        v = make_variant(parts[0], parts[1], parts[2], parts[3], split, rmt, abft)
    else:
        raise ValueError(f"not a variant name: {name!r} (e.g. ones/I/exact/small)")
    if v.name != name:
        raise ValueError(f"not a variant name: {name!r} (the variant is named {v.name!r})")
    return v
