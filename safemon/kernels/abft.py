"""ABFT: Huang–Abraham row and column checksums of every C tile, with a float32 rounding bound.

The one ABFT of safemon (docs/RMT.md, "ABFT"). For a variant with `abft=True` the GPU backend
queues `cuda/abft.cu` with the MMM kernel (its checksum products beside the kernel on a side
stream for products of at least `ABFT_OVERLAP_MIN_MACS`, else after it; the verify kernel
after both on the kernel's stream); it writes status words 6–7
(`checked.STATUS_ABFT`, `STATUS_ABFT_TILE`). `abft_check` is its NumPy mirror, used by the
reference backend and by the daemon's per-request check of 1oo1D results.

Rule. With the variant's tiling (BM×BN tiles, gx = ⌈N/BN⌉, gy = ⌈M/BM⌉), tile (by, bx) passes
when every column sum and every row sum of its part of C matches the checksum product:

    | Σ_{r∈R} Ĉ[r,c] − Σ_k (Σ_{r∈R} A[r,k]) B[k,c] | ≤ tol_col(by, c)   for c in the tile,
    | Σ_{c∈Q} Ĉ[r,c] − Σ_k A[r,k] (Σ_{c∈Q} B[k,c]) | ≤ tol_row(r, bx)   for r in the tile,

R the tile's rows, Q its columns, every sum in float64.

Tolerance (a rigorous bound, so a healthy kernel never fails the check). Each Ĉ[r,c] is a
float32 dot product of length K, summed by the kernel in one of its orders: per K-slice a
recursive sum of rounded products (``exact``) or of fused multiply-adds (``fma``), then the
S slices added in order. A slice holds at most k_S = `catalog.slice_k_max` k (K when S = 1;
padded steps multiply by an exact zero and round nothing), so every product takes part in at
most k_S + S roundings: its own (exact mode) or its fma, the later ones of its slice, and the
additions of the slices. So (Higham, *Accuracy and Stability of Numerical Algorithms*, §3.1,
with u = 2⁻²⁴, γ_n = nu/(1 − nu))

    |Ĉ[r,c] − Σ_k A[r,k]B[k,c]| ≤ γ_{k_S+S} Σ_k |A[r,k]||B[k,c]| + (K+S)·2⁻¹⁵⁰,

the last term covering products that underflow (ftz is off; subnormal additions are exact).
Summed over the tile's `n` rows (columns), the float32 part is γ_{k_S+S}·P with P =
Σ_k (Σ_{r∈R}|A[r,k]|)|B[k,c]|. The float64 sums of the check add at most
γ⁽⁶⁴⁾_{n+K+7}·(P + Σ|Ĉ|) (u = 2⁻⁵³; the 7 covers the device's warp reduction). Hence

    tol = γ_{k_S+S}·P + γ⁽⁶⁴⁾_{n+K+7}·(P + Σ|Ĉ|) + n·K·S·2⁻¹⁴⁹.

Until 2026-11-24 the first term was γ_{K+S}·P for every split: also a bound, but about S
times looser than need be for a product split S ways (64×4096×4096 on `wide64` is split 8: k_S +
S = 520 against K + S = 4104).

A non-finite sum of C fails outright, and so does a comparison that is not true (NaN):
ABFT never vouches for a non-finite C. An error δ in one element of C is detected when |δ| exceeds the tolerance of
its row or of its column minus the rounding error already present there; smaller errors are
"below tolerance" (the campaigns count them apart, with their relative size).

The device sums in a different order than NumPy, so the two decisions can differ only for a
residual within float64 rounding of the tolerance, far below any float32 effect.

Two kinds (`Variant.abft_kind`, `catalog.ABFT_KINDS`):
- "full" (name suffix "/abft"): both rules above. The column rule needs (Σ_{r∈R} A[r,:])·B,
  a pass over all of B on every call (67 MB at 64×4096×4096).
- "rows" (suffix "/abft-rows"): the row rule alone. Its checksum vectors of B, the tile-row
  sums b_sum[k, bx] = Σ_{c∈Q} B[k,c] and b_abs (the same of |B|), depend on B alone: for an
  ECC-protected weight (`safemon.ecc.ProtectedArray`) they are computed once, from the
  verified weight, and kept until the weight is rewritten (`ProtectedArray.derived`), so a
  call reads A, the vectors and C, never B. For any other B they are computed on each call
  (`safemon_abft_b_vectors`, the column kernel's own sums). What it gives up: the column
  rule's view of the same error. A single wrong element is in one row sum and one column
  sum, so it is detected when it exceeds either tolerance with "full", only the row's with
  "rows"; several errors in one tile row that cancel in the row sum (within its tolerance)
  pass "rows" and fail "full" when a column sum sees them. The in-kernel campaigns measure
  what that costs (docs/RMT.md). The vectors themselves live in device memory without
  safemon's ECC: a flip in them makes a healthy product fail (a fault, never a wrong
  release), or masks an error only together with a second, coincident fault in the product.
"""

from __future__ import annotations

import functools
import itertools
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from safemon.kernels.catalog import TileConfig, Variant
from safemon.kernels.compiler import KernelBuild

__all__ = [
    "ABFT_OVERLAP_MIN_MACS",
    "ABFT_SOURCE",
    "AbftPending",
    "AbftPlan",
    "AbftResult",
    "AbftWeightVectors",
    "abft_build",
    "abft_campaign_reference",
    "abft_check",
    "abft_k_slices",
    "abft_passes",
    "abft_side_stream",
    "abft_tolerances",
    "abft_weight_vectors",
    "abft_work",
    "begin_abft",
    "finish_abft",
    "gamma",
    "launch_abft",
    "launch_abft_checksums",
    "launch_abft_verify",
    "plan_abft",
    "verify_instance",
]

ABFT_SOURCE = Path(__file__).parent / "cuda" / "abft.cu"
U32_F = 2.0**-24
U64_F = 2.0**-53
#: Extra float64 roundings of the device's sums (abft.cu's header): a sum of C takes at most
#: ⌈n/8⌉ + 7 (columns: eight parts) or ⌈BN/32⌉ + 5 (rows: five shuffle levels), a checksum
#: product k-per-slice, then ⌈S/8⌉ − 1 + min(7, S − 1) (columns) or at most S − 1 (rows:
#: ⌈S/P⌉ − 1 + min(P − 1, S − 1) with P ≤ 8 parts; the row-only verify: 32 lanes, then five
#: shuffle levels, a tree over S terms) adding its S slices (`abft_k_slices` keeps the total
#: ≤ K + 7); all ≤ n + K + 7.
F64_EXTRA = 7
#: Threads per block of the A vectors and the verify kernels (abft.cu assumes 256 for verify).
ABFT_THREADS = 256
#: abft.cu's blocking: columns and most tile rows per column block, rows and tile columns per
#: row block, k per shared-memory stage.
ABFT_COL_THREADS = 256
ABFT_COL_Y_MAX = 16
ABFT_ROW_R = 64
ABFT_KC = 32
#: The verify kernels abft.cu instantiates, (rows per warp, 32-column groups), smallest first:
#: `skinny`, `small`, `wide`, `large`, and one for any other tile up to 128×256.
ABFT_VERIFY_INSTANCES = ((1, 8), (4, 1), (4, 4), (16, 4), (16, 8))
#: The row kernel's weight in `abft_k_slices`, in the column kernel's unit (outputs per thread
#: of a SIMT kernel of the same work per block): its 8 warps each run 2·NT tensor-core steps
#: per 4 k.
ABFT_ROW_WEIGHT = 4
#: Each checksum product is split over K until it has about this many blocks, divided by a
#: quarter of its weight when that is over 4 (the column kernel weighs its outputs per thread,
#: Y; the row kernel `ABFT_ROW_WEIGHT`): eight light blocks per multiprocessor of a 132-SM
#: H100, for loads enough in flight, fewer heavy ones (their partial sums cost the verify
#: kernel reads); a constant, never read from the device ...
ABFT_TARGET_BLOCKS = 1056
#: ... keeping at least this many k per slice (so that slices + k per slice stay ≤ K + 7).
ABFT_MIN_SLICE_K = 64

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]


def gamma(n: float | F64, u: float) -> Any:
    """Higham's γ_n = n·u / (1 − n·u) (valid while n·u < 1)."""
    return n * u / (1.0 - n * u)


@dataclass(frozen=True)
class AbftResult:
    """Outcome of the check of one product.

    Attributes:
        failed_tiles: sorted linear tile ids by·gx + bx whose row or column check failed.
        col_residual / col_tol: (gy, N) Σ Ĉ − expected (signed) of each tile column and its
            bound; the column passes when |residual| ≤ tol.
        row_residual / row_tol: (M, gx) the same for each tile row.
    """

    failed_tiles: tuple[int, ...]
    col_residual: F64
    col_tol: F64
    row_residual: F64
    row_tol: F64

    @property
    def ok(self) -> bool:
        return not self.failed_tiles


def abft_tolerances(
    a: F32, b: F32, c_abs_col: F64, c_abs_row: F64, tile: TileConfig, slices: int,
    k_slice: int | None = None,
) -> tuple[F64, F64]:
    """(col_tol (gy, N), row_tol (M, gx)) of the module docstring, for given Σ|Ĉ| sums;
    `k_slice` the most k of a slice (None: K, which bounds it for any slicing)."""
    m, k = a.shape
    n = b.shape[1]
    gx, gy = tile.grid(m, n)
    a_abs = _tile_sums(np.abs(a.astype(np.float64)), tile.bm, gy, axis=0)  # (gy, K)
    b_abs = _tile_sums(np.abs(b.astype(np.float64)), tile.bn, gx, axis=1)  # (K, gx)
    p_col = a_abs @ np.abs(b.astype(np.float64))
    p_row = np.abs(a.astype(np.float64)) @ b_abs
    rows = np.minimum(m - np.arange(gy) * tile.bm, tile.bm).astype(np.float64)[:, None]
    cols = np.minimum(n - np.arange(gx) * tile.bn, tile.bn).astype(np.float64)[None, :]
    g32 = gamma(float((k if k_slice is None else k_slice) + slices), U32_F)
    tiny = k * slices * 2.0**-149
    col_tol = g32 * p_col + gamma(rows + k + F64_EXTRA, U64_F) * (p_col + c_abs_col) + rows * tiny
    row_tol = g32 * p_row + gamma(cols + k + F64_EXTRA, U64_F) * (p_row + c_abs_row) + cols * tiny
    return col_tol, row_tol


def abft_check(a: F32, b: F32, c: npt.NDArray[Any], tile: TileConfig, slices: int = 1,
               kind: str = "full", k_slice: int | None = None) -> AbftResult:
    """The ABFT rule on the host (float64), as abft.cu applies it on the device.

    Args:
        a: (M, K) float32; b: (K, N) float32; c: (M, N) float32, the product to check.
        tile: the tiling whose tiles are checked (the variant's; any tiling gives a valid check).
        slices: the K-slices S the product was computed in (enters γ_{k_S+S}).
        kind: "full" (rows and columns) or "rows" (the row rule alone: the result's column
            residuals are then 0 and their tolerances +inf, so no column ever fails).
        k_slice: k_S, the most k of any of the product's slices (`catalog.slice_k_max` of
            the tiling that computed C, which may differ from `tile`); None takes K, a bound
            for any slicing.

    Raises:
        ValueError: shapes that do not chain, slices < 1, k_slice outside 1..K, or an
            unknown kind.
    """
    m, k = a.shape
    if b.shape[0] != k or c.shape != (m, b.shape[1]) or slices < 1:
        raise ValueError(f"abft_check: shapes {a.shape}·{b.shape} → {c.shape}, slices {slices}")
    if kind not in ("full", "rows"):
        raise ValueError(f"abft_check: kind must be 'full' or 'rows', not {kind!r}")
    if k_slice is not None and not 1 <= k_slice <= max(1, k):
        raise ValueError(f"abft_check: k_slice must lie in 1..{k}, not {k_slice}")
    n = b.shape[1]
    gx, gy = tile.grid(m, n)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        c64 = c.astype(np.float64)
        col_got = _tile_sums(c64, tile.bm, gy, axis=0)  # (gy, N)
        row_got = _tile_sums(c64, tile.bn, gx, axis=1)  # (M, gx)
        col_exp = _tile_sums(a64, tile.bm, gy, axis=0) @ b64
        row_exp = a64 @ _tile_sums(b64, tile.bn, gx, axis=1)
        c_abs = np.abs(c64)
        col_tol, row_tol = abft_tolerances(
            a, b, _tile_sums(c_abs, tile.bm, gy, axis=0), _tile_sums(c_abs, tile.bn, gx, axis=1),
            tile, slices, k_slice)
        col_res, row_res = col_got - col_exp, row_got - row_exp
        if kind == "rows":  # no column rule: nothing to compare, nothing that can fail
            col_res, col_tol = np.zeros_like(col_res), np.full_like(col_tol, np.inf)
            col_got = np.zeros_like(col_got)
        # A non-finite sum fails outright (its Σ|Ĉ| would make the tolerance infinite too).
        col_bad = ~(np.isfinite(col_got) & (np.abs(col_res) <= col_tol))
        row_bad = ~(np.isfinite(row_got) & (np.abs(row_res) <= row_tol))
    bad = np.zeros((gy, gx), dtype=bool)
    by, cc = np.nonzero(col_bad)
    bad[by, cc // tile.bn] = True
    rr, bx = np.nonzero(row_bad)
    bad[rr // tile.bm, bx] = True
    failed = tuple(int(i) for i in np.flatnonzero(bad.reshape(-1)))
    return AbftResult(failed, col_res, col_tol, row_res, row_tol)


def abft_passes(a: F32, b: F32, c: npt.NDArray[Any], variant: Variant) -> bool:
    """True when `c` passes the full `abft_check` (rows and columns, whatever the variant's
    own kind: on the host B is at hand, so the stronger rule costs nothing extra) for C = a·b
    computed by `variant` (its tile, and its K-slices in the rounding bound). The daemon's
    per-request check of 1oo1D results. False, never an exception, for a `c` of the wrong
    shape (a channel's result that cannot be this product)."""
    if c.ndim != 2 or c.shape != (a.shape[0], b.shape[1]) or a.shape[1] != b.shape[0]:
        return False
    k = a.shape[1]
    return abft_check(a, b, c, variant.tile, variant.slices(k), "full",
                      variant.longest_slice(k)).ok


def abft_campaign_reference(a: F32, b: F32, golden_c: F32, tile: TileConfig,
                            kind: str = "full") -> F64:
    """The golden residuals and tolerances the injection build's ABFT model reads (mmm.cu,
    `abft_verdict`): col_res, col_tol (gy·N each), row_res, row_tol (M·gx each), concatenated.
    For kind "rows" the column tolerances are +inf, so the model's column rule never fails.

    Raises:
        ValueError: the golden product fails its own check (it cannot be a golden run).
    """
    r = abft_check(a, b, golden_c, tile, 1, kind)
    if not r.ok:
        raise ValueError(f"the golden product fails ABFT in tiles {r.failed_tiles[:5]}")
    return np.ascontiguousarray(np.concatenate(
        [r.col_residual.ravel(), r.col_tol.ravel(), r.row_residual.ravel(), r.row_tol.ravel()]))


def _tile_sums(x: F64, size: int, tiles: int, axis: int) -> F64:
    """Sums of `x` over consecutive groups of `size` rows (axis 0) or columns (axis 1)."""
    if axis == 0:
        pad = np.zeros((tiles * size, x.shape[1]), dtype=np.float64)
        pad[: x.shape[0]] = x
        rows: F64 = pad.reshape(tiles, size, -1).sum(axis=1)
        return rows
    pad = np.zeros((x.shape[0], tiles * size), dtype=np.float64)
    pad[:, : x.shape[1]] = x
    cols: F64 = pad.reshape(x.shape[0], tiles, size).sum(axis=2)
    return cols


def abft_build() -> KernelBuild:
    """The compilation of abft.cu (one build for every shape and tile)."""
    return KernelBuild.make(ABFT_SOURCE, None, ("--fmad=true",))


def abft_k_slices(blocks: int, k: int, weight: int = 1) -> tuple[int, int]:
    """(slices, k per slice) of a checksum product whose grid has `blocks` blocks per K-slice,
    each of `weight` (`ABFT_TARGET_BLOCKS`): a pure function of the shape (abft.cu adds the
    slices in a fixed order, so the decision does not depend on the device)."""
    target = max(264, ABFT_TARGET_BLOCKS // max(1, weight // 4))
    want = max(1, min(-(-target // max(blocks, 1)), k // ABFT_MIN_SLICE_K))
    per = -(-k // want)
    per = -(-per // ABFT_KC) * ABFT_KC  # whole shared-memory stages
    return -(-k // per), per


def verify_instance(tile: TileConfig) -> tuple[int, int]:
    """(RW, CG) of the verify kernel abft.cu instantiates for `tile`: the fewest rows per warp
    (a tile row in 8) and 32-column groups that cover it.

    Raises:
        ValueError: a tile taller than 128 rows or wider than 256 columns (no instance).
    """
    need_rw, need_cg = -(-tile.bm // 8), -(-tile.bn // 32)
    for rw, cg in ABFT_VERIFY_INSTANCES:
        if rw >= need_rw and cg >= need_cg:
            return rw, cg
    raise ValueError(f"abft.cu has no verify kernel for a {tile.bm}×{tile.bn} tile "
                     f"(at most 128×256)")


#: Products of at least this many multiply-adds (M·N·K) run the checksum products on a side
#: stream beside the MMM kernel (`checked.launch_checked`); smaller ones queue them after it.
#: Never part of a result: where the products run changes no sum. (H100,
#: evidence/h100-2026-11-24-overlap/: 4096³ 1.09× against 1.11×; its call 1, with the side
#: stream at every shape, measured 64×4096×4096 to 1×4096×4096 10–20 % slower than one stream.)
ABFT_OVERLAP_MIN_MACS = 2**33


@dataclass(frozen=True)
class AbftWeightVectors:
    """B's tile-row sums for the row rule, computed once for a weight (`abft_weight_vectors`):
    b_sum / b_abs, CuPy float64 of K·gx, element k·gx + bx = Σ_{c∈tile bx} B[k,c] / |B[k,c]|,
    for a (K, N) B and tiles BN wide."""

    b_sum: Any
    b_abs: Any
    k: int
    n: int
    bn: int


def abft_weight_vectors(b: Any, tile: TileConfig) -> AbftWeightVectors:
    """Queue abft.cu's `safemon_abft_b_vectors` over the CuPy float32 B (K, N) on the current
    stream and return its vectors for `tile`'s width (the column kernel's sums of the same
    B, bit for bit). No waiting: use the vectors on this stream, or after a synchronisation.

    Raises:
        ValueError: B not 2-D, or a tile width that is not a multiple of 32 dividing 256.
    """
    from safemon.kernels.compiler import import_cupy
    from safemon.kernels.gpu import function_for

    if b.ndim != 2:
        raise ValueError(f"abft_weight_vectors: B must be (K, N), not of shape {b.shape}")
    _check_tile_width(tile)
    k, n = (int(d) for d in b.shape)
    gx = -(-n // tile.bn)
    both = import_cupy().empty(2 * gx * k, dtype="float64")
    b_sum, b_abs = both[: gx * k], both[gx * k:]
    function_for(("abft",), abft_build, "safemon_abft_b_vectors")(
        (-(-n // ABFT_COL_THREADS), -(-k // ABFT_KC), 1), (ABFT_COL_THREADS, 1, 1),
        (b, b_sum, b_abs, np.int32(n), np.int32(k), np.int32(tile.bn), np.int32(gx)))
    return AbftWeightVectors(b_sum, b_abs, k, n, tile.bn)


def _check_tile_width(tile: TileConfig) -> None:
    """abft.cu sums whole tiles of B's rows per 256-column block, in parts of 32 columns."""
    if ABFT_COL_THREADS % tile.bn or tile.bn % 32:
        raise ValueError(f"abft.cu needs a tile width that is a multiple of 32 dividing "
                         f"{ABFT_COL_THREADS}, not {tile.bn}")


@dataclass(frozen=True)
class AbftPlan:
    """The launch of abft.cu for one (M, K)·(K, N) product (`plan_abft`): the variant's tile
    and grid, the check's kind, the kernel instances and grids, the K-slices, and the float64
    work buffer (one allocation, by `abft_work` or by `plan_abft` itself, on the stream
    current then; cut into the A and B checksum vectors and the column and row products;
    "rows" has no A vectors and no column products, and takes B's vectors from
    `AbftWeightVectors` when given, `b_given`)."""

    kind: str
    b_given: bool
    k_slice: int
    m: int
    n: int
    k: int
    tile: TileConfig
    gx: int
    gy: int
    slices: int
    work: Any
    a_sum: Any
    a_abs: Any
    b_sum: Any
    b_abs: Any
    col_part: Any
    row_part: Any
    col_y: int
    col_grid: tuple[int, int]
    col_slices: int
    col_per: int
    row_nt: int
    row_grid: tuple[int, int]
    row_slices: int
    row_per: int


@functools.lru_cache(maxsize=256)
def _abft_layout(m: int, n: int, k: int, variant: Variant, b_given: bool = False
                 ) -> tuple[Any, ...]:
    """Grids, instances, K-slices and the six work-buffer lengths of the check (pure, and
    cached: a checked call's host time before and between its launches is on its critical
    path at the inference shapes). "rows" has no A vectors and no column products (their
    lengths 0, col_slices 0), nor B's vectors when `b_given`."""
    t = variant.tile
    gx, gy = t.grid(m, n)
    _check_tile_width(t)
    col_y = min(ABFT_COL_Y_MAX, 1 << (gy - 1).bit_length())  # the instance: Y ≥ gy, ≤ 16
    col_grid = (-(-n // ABFT_COL_THREADS), -(-gy // col_y))
    # n-tiles of 8 per warp: the instance. One row block (M ≤ 64) takes one n-tile per warp,
    # so that its tile columns spread over gx / 8 blocks (64×4096×4096: 4 blocks per K-slice,
    # not 1); the products are the same, each (row, tile column) in the same k order.
    row_nt = 1 if gx <= 8 or m <= ABFT_ROW_R else 2 if gx <= 16 else 4
    row_grid = (-(-m // ABFT_ROW_R), -(-gx // (8 * row_nt)))
    col_slices, col_per = abft_k_slices(col_grid[0] * col_grid[1], k, col_y)
    row_slices, row_per = abft_k_slices(row_grid[0] * row_grid[1], k, ABFT_ROW_WEIGHT)
    if variant.abft_kind == "rows":
        col_slices = 0
        b_len = 0 if b_given else gx * k
        sizes = (0, 0, b_len, b_len, 0, 2 * row_slices * m * gx)
    else:
        sizes = (gy * k, gy * k, gx * k, gx * k, 2 * col_slices * gy * n, 2 * row_slices * m * gx)
    return (gx, gy, col_y, col_grid, col_slices, col_per, row_nt, row_grid, row_slices,
            row_per, sizes, tuple(int(c) for c in np.cumsum([0, *sizes])))


def abft_work(m: int, n: int, k: int, variant: Variant, *, b_given: bool = False) -> Any:
    """The check's float64 work buffer for an (M, K)·(K, N) product, allocated on the current
    stream (one `cupy.empty`: cheap enough to come before the MMM kernel's launch, which
    `launch_checked` needs for the side stream; `plan_abft(work=...)` cuts it). `b_given`:
    a "rows" check given B's vectors (`AbftWeightVectors`) needs no room for them.

    Raises:
        ValueError: a tile whose width does not divide the column kernel's 256 columns.
    """
    from safemon.kernels.compiler import import_cupy

    cuts = _abft_layout(m, n, k, variant, b_given)[-1]
    return import_cupy().empty(max(1, cuts[-1]), dtype="float64")


def plan_abft(m: int, n: int, k: int, variant: Variant, *, work: Any = None,
              weights: AbftWeightVectors | None = None) -> AbftPlan:
    """Plan the check of an (M, K)·(K, N) product of `variant`: its kernel instances and
    grids, and the work buffer `work` (from `abft_work`; None allocates it now, on the
    current stream) cut into its six parts. `weights`: B's vectors for a "rows" check
    (ignored by "full", which forms them from its own pass over B). Queues nothing.

    Raises:
        ValueError: a tile whose width does not divide the column kernel's 256 columns, a
            work buffer of the wrong size, or `weights` of another B shape or tile width.
    """
    rows = variant.abft_kind == "rows"
    b_given = rows and weights is not None
    (gx, gy, col_y, col_grid, col_slices, col_per, row_nt, row_grid, row_slices, row_per,
     _sizes, cuts) = _abft_layout(m, n, k, variant, b_given)
    if work is None:
        work = abft_work(m, n, k, variant, b_given=b_given)
    if work.size != max(1, cuts[-1]):
        raise ValueError(f"work buffer of {work.size} doubles, the plan needs {cuts[-1]}")
    # Views of the parts the check uses only (None for an empty one; the whole buffer when it
    # is the only part): each CuPy view costs host time on the call's critical path.
    used = [hi > lo for lo, hi in itertools.pairwise(cuts)]
    whole = sum(used) == 1
    a_sum, a_abs, b_sum, b_abs, col_part, row_part = (
        (work if whole else work[lo:hi]) if u else None
        for u, (lo, hi) in zip(used, itertools.pairwise(cuts), strict=True))
    if b_given:
        assert weights is not None
        if (weights.k, weights.n, weights.bn) != (k, n, variant.tile.bn):
            raise ValueError(f"B's ABFT vectors are for a ({weights.k}, {weights.n}) B and "
                             f"{weights.bn}-wide tiles, the product needs ({k}, {n}) and "
                             f"{variant.tile.bn}")
        b_sum, b_abs = weights.b_sum, weights.b_abs
    return AbftPlan(variant.abft_kind, b_given, variant.longest_slice(k), m, n, k,
                    variant.tile, gx, gy, variant.slices(k), work, a_sum, a_abs, b_sum, b_abs, col_part, row_part,
                    col_y, col_grid, col_slices, col_per, row_nt, row_grid, row_slices, row_per)


class _SideStreams(threading.local):
    """This thread's side stream per device, for the checksum products."""

    def __init__(self) -> None:
        self.by_device: dict[int, Any] = {}


_side_streams = _SideStreams()


def abft_side_stream() -> Any:
    """This thread's non-blocking CuPy stream on the current device for the checksum products.
    One per thread, so that callers in different threads (stream channels) never order
    their products after one another's."""
    from safemon.kernels.compiler import import_cupy

    cp = import_cupy()
    dev = cp.cuda.Device().id
    side = _side_streams.by_device.get(dev)
    if side is None:
        side = _side_streams.by_device[dev] = cp.cuda.Stream(non_blocking=True)
    return side


def launch_abft_checksums(a: Any, b: Any, plan: AbftPlan, *, after: Any = None) -> Any:
    """Queue the checksum products of abft.cu over the CuPy float32 A (M, K) and B (K, N) into
    `plan`'s buffer: the A vectors, the column products (which also form B's vectors) and
    the row products. They read only A and B.

    `after`: None queues them on the current stream and returns None. Otherwise a CUDA event
    recorded on the current stream once A and B are ready *and after the plan's work buffer
    was allocated* (`abft_work`): the memory pool hands a freed block out again in its
    stream's order only, so a buffer allocated later could be one the current stream still
    writes after the event (a split-K kernel's partial products), and the side stream knows
    nothing of that order. The products then run on this thread's side stream
    (`abft_side_stream`) after the event, beside whatever the current stream queues
    meanwhile; the returned event marks their end, for `launch_abft_verify`. Should a launch
    fail, the current stream is made to wait for what the side stream already queued (which
    writes the work buffer) before the error propagates. No waiting.
    """
    from safemon.kernels.compiler import import_cupy
    from safemon.kernels.gpu import function_for

    if after is None:
        _queue_checksums(function_for, plan, a, b)
        return None
    cp = import_cupy()
    caller = cp.cuda.get_current_stream()
    side = abft_side_stream()
    with side:
        side.wait_event(after)
        try:
            _queue_checksums(function_for, plan, a, b)
        except BaseException:
            failed = cp.cuda.Event(block=False, disable_timing=True)
            failed.record(side)
            caller.wait_event(failed)
            raise
        done = cp.cuda.Event(block=False, disable_timing=True)
        done.record(side)
    return done


def _queue_checksums(function_for: Any, p: AbftPlan, a: Any, b: Any) -> None:
    """The checksum kernels of `launch_abft_checksums`, on the current stream: "full" the A
    vectors, the column products (with B's vectors) and the row products; "rows" B's
    vectors unless given, then the row products."""
    i32 = np.int32
    if p.kind == "rows":
        if not p.b_given:
            function_for(("abft",), abft_build, "safemon_abft_b_vectors")(
                (-(-p.n // ABFT_COL_THREADS), -(-p.k // ABFT_KC), 1), (ABFT_COL_THREADS, 1, 1),
                (b, p.b_sum, p.b_abs, i32(p.n), i32(p.k), i32(p.tile.bn), i32(p.gx)))
        _queue_rows(function_for, p, a)
        return
    function_for(("abft",), abft_build, "safemon_abft_a_vectors")(
        (-(-p.k // ABFT_THREADS), p.gy, 1), (ABFT_THREADS, 1, 1),
        (a, p.a_sum, p.a_abs, i32(p.m), i32(p.k), i32(p.tile.bm)))
    function_for(("abft",), abft_build, f"safemon_abft_cols_{p.col_y}")(
        (*p.col_grid, p.col_slices), (ABFT_COL_THREADS, 1, 1),
        (b, p.a_sum, p.a_abs, p.col_part, p.b_sum, p.b_abs, i32(p.n), i32(p.k),
         i32(p.tile.bn), i32(p.gx), i32(p.gy), i32(p.col_per)))
    _queue_rows(function_for, p, a)


def _queue_rows(function_for: Any, p: AbftPlan, a: Any) -> None:
    """The row checksum products (both kinds), on the current stream."""
    i32 = np.int32
    function_for(("abft",), abft_build, f"safemon_abft_rows_{p.row_nt}")(
        (*p.row_grid, p.row_slices), (256, 1, 1),
        (a, p.b_sum, p.b_abs, p.row_part, i32(p.m), i32(p.k), i32(p.gx), i32(p.row_per)))


def launch_abft_verify(c: Any, plan: AbftPlan, status_ptr: int, *, after: Any = None) -> None:
    """Queue abft.cu's verify kernel over C (M, N) and `plan`'s products on the current
    stream (a block per tile, or for "rows" a warp per row and tile column), after the event
    `after` (the side stream's products) when given; a failure sets words 6–7 of the status
    block at `status_ptr`. No waiting."""
    from safemon.kernels.compiler import import_cupy
    from safemon.kernels.gpu import function_for

    cp = import_cupy()
    p = plan
    if after is not None:
        cp.cuda.get_current_stream().wait_event(after)
    i32 = np.int32
    if p.kind == "rows":  # a warp per (row, tile column), eight per block
        function_for(("abft",), abft_build, "safemon_abft_verify_rows")(
            (-(-p.m * p.gx // 8), 1, 1), (ABFT_THREADS, 1, 1),
            (c, p.row_part, np.uintp(status_ptr), i32(p.m), i32(p.n), i32(p.k), i32(p.tile.bm),
             i32(p.tile.bn), i32(p.gx), i32(p.slices), i32(p.row_slices),
             i32(p.k_slice + p.slices)))
        return
    rw, cg = verify_instance(p.tile)
    function_for(("abft",), abft_build, f"safemon_abft_verify_{rw}_{cg}")(
        (p.gx * p.gy, 1, 1), (ABFT_THREADS, 1, 1),
        (c, p.col_part, p.row_part, np.uintp(status_ptr), i32(p.m), i32(p.n), i32(p.k),
         i32(p.tile.bm), i32(p.tile.bn), i32(p.gx), i32(p.gy), i32(p.slices),
         i32(p.col_slices), i32(p.row_slices), i32(p.k_slice + p.slices)))


@dataclass(frozen=True)
class AbftPending:
    """What `begin_abft` set up before the MMM kernel's launch, for `finish_abft`: the
    product's shape and variant, and for the side stream the work buffer and the event the
    checksum products wait for (both None when they run after the kernel on its stream), and
    B's vectors for a "rows" check when the caller has them."""

    m: int
    n: int
    k: int
    variant: Variant
    work: Any
    ready: Any
    weights: AbftWeightVectors | None = None


def begin_abft(m: int, n: int, k: int, variant: Variant, *, side: bool | None = None,
               weights: AbftWeightVectors | None = None) -> AbftPending:
    """Call just before queuing the MMM kernel of a checked (M, K)·(K, N) product, once A and
    B (and B's ECC check) are queued on the current stream. `side` None: the checksum
    products go on the side stream from `ABFT_OVERLAP_MIN_MACS` multiply-adds on (read at
    each call); True / False forces it. For the side stream this allocates the work buffer
    and then records the event (`launch_abft_checksums` says why in that order); nothing
    else, so that the kernel's launch is not held back. `weights`: B's vectors for a "rows"
    check (`abft_weight_vectors`, e.g. a weight's `ProtectedArray.derived` copy), ready
    on this stream; None computes them with the check ("full" ignores them)."""
    from safemon.kernels.compiler import import_cupy

    weights = weights if variant.abft_kind == "rows" else None
    if not (m * n * k >= ABFT_OVERLAP_MIN_MACS if side is None else side):
        return AbftPending(m, n, k, variant, None, None, weights)
    work = abft_work(m, n, k, variant, b_given=weights is not None)
    ready = import_cupy().cuda.Event(block=False, disable_timing=True)
    ready.record()
    return AbftPending(m, n, k, variant, work, ready, weights)


def finish_abft(pending: AbftPending, a: Any, b: Any, c: Any, status_ptr: int) -> None:
    """Call after queuing the MMM kernel (and its split-K reduction) that writes C: queues the
    checksum products (on the side stream when `begin_abft` chose it, else here) and the
    verify kernel on the current stream after them; a failure sets words 6–7 of the status
    block at `status_ptr`. No waiting."""
    p = pending
    plan = plan_abft(p.m, p.n, p.k, p.variant, work=p.work, weights=p.weights)
    done = launch_abft_checksums(a, b, plan, after=p.ready)
    launch_abft_verify(c, plan, status_ptr, after=done)


def launch_abft(a: Any, b: Any, c: Any, variant: Variant, status_ptr: int) -> None:
    """Queue the whole of abft.cu over the CuPy float32 arrays A (M, K), B (K, N), C (M, N) on
    the current stream, after whatever produced C; a failure sets words 6–7 of the status
    block at `status_ptr`. No waiting. (`checked.launch_checked` may instead run the
    checksum products beside the MMM kernel: `begin_abft` / `finish_abft`, which also take a
    weight's B vectors.)"""
    plan = plan_abft(a.shape[0], b.shape[1], a.shape[1], variant)
    launch_abft_checksums(a, b, plan)
    launch_abft_verify(c, plan, status_ptr)

