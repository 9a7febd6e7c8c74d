"""Bit-exhaustive input campaigns: every single-bit flip of every element of A and of B.

The seed paper's method (section 4.3): run once without a fault and keep the ES array as the
golden value; then, for each of the 32·(M·K + K·N) single-bit flips of an input element, one
at a time, run again and call the fault *detected* when the ES array differs from golden.
Each fault gets a verdict byte: bit 0 (`ES_DIFFERS`) the ES array differs, bit 1
(`C_DIFFERS`) the product C differs (bit for bit). Faults are numbered A first, then B:
fault ``f < 32·M·K`` flips bit ``f % 32`` of ``A.flat[f // 32]``; fault ``f ≥ 32·M·K`` flips bit
``f' % 32`` of ``B.flat[f' // 32]`` with ``f' = f − 32·M·K``.

Golden C and ES always come from the NumPy reference (never from the GPU under test).

Backends:

* ``numpy`` — incremental. An element of A row r is read only by the threads of block row
  r // BM (one block-row strip), an element of B column c only by block column c // BN. So a
  flip is evaluated on that strip alone, with the same thread decomposition (the strip is
  zero-padded to whole BM rows / BN columns exactly as the full run pads the matrix edge).
  Many flipped copies of one strip are stacked into one reference call (copies along M for
  A, along N for B): each copy occupies whole block tiles, so no thread sees two copies.
* ``cupy`` — the injection build of the kernel (`SAFEMON_INJECT=1`): one launch runs up to
  65,535 injected copies, one per blockIdx.z, each comparing its ES and C with the golden
  arrays on the device and writing one verdict word.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from safemon.dims import Dims
from safemon.kernels.backend import Backend
from safemon.kernels.catalog import (
    ABFT_SUFFIXES,
    CHECKSUMS,
    COMBINATIONS,
    TileConfig,
    Variant,
    auto_tile,
    checked_variants,
    make_variant,
    split_check_suffix,
    standard_variants,
    t_level_variant,
)
from safemon.kernels.reference import reference_matmul

__all__ = [
    "C_DIFFERS",
    "ES_DIFFERS",
    "CampaignResult",
    "brute_force_verdict",
    "campaign_variants",
    "describe_fault",
    "inputs_for",
    "parse_variants",
    "run_input_campaign",
    "variant_label",
]

ES_DIFFERS = 1
C_DIFFERS = 2

F32 = npt.NDArray[np.float32]
U32 = npt.NDArray[np.uint32]
U8 = npt.NDArray[np.uint8]

#: A callback told how many more faults were evaluated (drives the progress bar).
Progress = Callable[[int], None]

#: Float32 elements of the stacked accumulator per reference call on the NumPy backend:
#: large enough to amortise Python overhead, small enough to stay in cache-friendly sizes.
CPU_BATCH_ELEMENTS = 1 << 19


@dataclass(frozen=True)
class CampaignResult:
    """The outcome of one exhaustive input campaign of one variant at one size.

    Attributes:
        variant: the kernel variant (checksum, level, mode, tile).
        dims: the matrix sizes.
        verdicts: (injections,) uint8, one byte per fault in fault order (module docstring),
            bit 0 = ES differs from golden, bit 1 = C differs from golden.
        backend: "numpy" or "cupy".
        seed: the seed of the random-normal inputs.
        seconds: wall-clock time of the campaign (golden run included).
    """

    variant: Variant
    dims: Dims
    verdicts: U8
    backend: str
    seed: int
    seconds: float

    @property
    def injections(self) -> int:
        return int(self.verdicts.size)

    @property
    def detected_es(self) -> int:
        """Faults whose ES array differs from golden (the seed's "detected")."""
        return int(np.count_nonzero(self.verdicts & ES_DIFFERS))

    @property
    def visible_c(self) -> int:
        """Faults that change C."""
        return int(np.count_nonzero(self.verdicts & C_DIFFERS))

    @property
    def latent(self) -> int:
        """Detected by ES while C is unchanged (faults the ES exposes before they matter)."""
        return int(np.count_nonzero(self.verdicts == ES_DIFFERS))

    @property
    def escapes(self) -> int:
        """C changed and the ES did not: silent data corruption past the diagnostic."""
        return int(np.count_nonzero(self.verdicts == C_DIFFERS))

    def percent(self, count: int) -> float:
        return 100.0 * count / self.injections if self.injections else 0.0

    @property
    def dc_percent(self) -> float:
        """DC(ES) in percent: detected / injected."""
        return self.percent(self.detected_es)


def variant_label(v: Variant) -> str:
    """The seed's short name: "ones/I", "xor_fletcher" (no mode or tile), with the in-kernel
    checks appended as `Variant.name` appends them: "ones/M/rmt-warp/abft", "unprotected/abft",
    "unprotected/abft-rows", "unprotected/rmt-block"."""
    base = "unprotected" if v.checksum is None else (
        v.checksum if v.is_combination else f"{v.checksum}/{v.level}")
    rmt = f"/rmt-{v.rmt}" if v.rmt != "none" else ""
    return base + rmt + (f"/{ABFT_SUFFIXES[v.abft_kind]}" if v.abft else "")


def parse_variants(text: str, mode: str, tile: TileConfig | str) -> list[Variant]:
    """Parse a comma-separated variant list: "ones/I", "xor/E", "ones_fletcher", "standard",
    "checked", each label optionally followed by the in-kernel checks "/rmt-warp" (or
    "/rmt-block") and "/abft" (or "/abft-rows") in that order ("ones/M/abft",
    "unprotected/abft-rows", "unprotected/rmt-block"; docs/RMT.md).

    "standard" expands to `catalog.standard_variants(mode, tile)`, "checked" to
    `catalog.checked_variants(mode, tile)` (RMT and ABFT alone and with ES-M).

    Raises:
        ValueError: an unknown checksum, level, mode, tile or check, or an empty list.
    """
    out: list[Variant] = []
    for part in text.split(","):
        p = part.strip()
        if not p:
            continue
        if p in ("standard", "checked"):
            out.extend((standard_variants if p == "standard" else checked_variants)(mode, tile))
            continue
        base, rmt, abft = split_check_suffix(p)
        checksum, _, level = base.partition("/")
        if base == "unprotected" and (rmt != "none" or abft != "none"):
            out.append(make_variant(None, None, mode, tile, rmt=rmt, abft=abft))
        elif checksum in COMBINATIONS:
            out.append(make_variant(checksum, level or "I+M", mode, tile, rmt=rmt, abft=abft))
        elif checksum in CHECKSUMS:
            if not level:
                raise ValueError(f"variant {p!r} needs a level: {checksum}/I, {checksum}/M or {checksum}/E")
            out.append(make_variant(checksum, level, mode, tile, rmt=rmt, abft=abft))
        else:
            raise ValueError(
                f"unknown variant {p!r}: use CHECKSUM/LEVEL (e.g. ones/I), a combination X_Y "
                f"(e.g. xor_fletcher), either with /rmt-warp or /rmt-block and/or /abft or "
                f"/abft-rows, unprotected/rmt-warp, unprotected/rmt-block, unprotected/abft, "
                f"unprotected/abft-rows, 'standard' or 'checked'"
            )
    if not out:
        raise ValueError(f"no variant in {text!r}")
    return out


def inputs_for(dims: Dims, seed: int) -> tuple[F32, F32]:
    """The campaign inputs: A (M, K) and B (K, N), float32 standard normal from `seed`."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((dims.m, dims.k), dtype=np.float32)
    b = rng.standard_normal((dims.k, dims.n), dtype=np.float32)
    return a, b


def describe_fault(dims: Dims, fault: int) -> tuple[str, int, int, int]:
    """(matrix "A"|"B", row, column, bit) of fault number `fault`.

    Raises:
        ValueError: `fault` outside [0, dims.input_bits).
    """
    if not 0 <= fault < dims.input_bits:
        raise ValueError(f"fault {fault} outside 0..{dims.input_bits - 1} for {dims.key}")
    a_faults = 32 * dims.m * dims.k
    if fault < a_faults:
        elem, bit = divmod(fault, 32)
        return "A", elem // dims.k, elem % dims.k, bit
    elem, bit = divmod(fault - a_faults, 32)
    return "B", elem // dims.n, elem % dims.n, bit


def _flip(x: F32, flat: int, bit: int) -> F32:
    y = x.copy()
    y.reshape(-1).view(np.uint32)[flat] ^= np.uint32(1 << bit)
    return y


def brute_force_verdict(
    a: F32, b: F32, variant: Variant, fault: int, golden: tuple[F32, U32] | None = None
) -> int:
    """The verdict of one fault by a full reference run with the flipped input (the oracle).

    Args:
        a, b: the clean inputs, float32 (M, K) and (K, N).
        golden: (C, ES) of the clean run; computed when None.
    """
    dims = Dims(a.shape[0], b.shape[1], a.shape[1])
    gc, ges = golden if golden is not None else reference_matmul(a, b, variant)
    which, row, col, bit = describe_fault(dims, fault)
    if which == "A":
        c, es = reference_matmul(_flip(a, row * dims.k + col, bit), b, variant)
    else:
        c, es = reference_matmul(a, _flip(b, row * dims.n + col, bit), variant)
    verdict = 0
    if not np.array_equal(es, ges):
        verdict |= ES_DIFFERS
    if not np.array_equal(c.view(np.uint32), gc.view(np.uint32)):
        verdict |= C_DIFFERS
    return verdict


def run_input_campaign(
    variant: Variant,
    dims: Dims,
    *,
    seed: int = 0,
    backend: str = "numpy",
    progress: Progress | None = None,
    batch: int | None = None,
) -> CampaignResult:
    """Run the exhaustive single-bit input campaign of `variant` at `dims`.

    Args:
        variant: the kernel variant; its tile is used as is (pick it with `auto_tile`).
        dims: matrix sizes; inputs are `inputs_for(dims, seed)`.
        backend: "numpy" (incremental reference) or "cupy" (batched injection build).
        progress: called with the number of faults just evaluated.
        batch: flipped copies per reference call / per launch (None: a size-based default).

    Raises:
        ValueError: unknown backend, a non-positive batch, or an ABFT variant on "numpy".
        BackendUnavailableError: backend "cupy" without CuPy or a device.
        SafeStateError: (cupy) the device's clean run differs from the NumPy golden run, so
            the device is not the kernel the campaign would measure.
    """
    if batch is not None and batch <= 0:
        raise ValueError(f"batch must be positive, got {batch}")
    if variant.abft and backend == "numpy":
        # The NumPy packing puts several faults in one tile; a tile-wide check cannot be
        # attributed to one of them. RMT needs nothing: an input flip reaches both replicas.
        raise ValueError(f"{variant.name}: the input campaign of an ABFT variant needs the cupy "
                         "backend (the NumPy campaign packs several faults per tile)")
    start = time.perf_counter()
    a, b = inputs_for(dims, seed)
    golden_c, golden_es = reference_matmul(a, b, variant)
    where = Backend.parse(backend)
    if not where.resolved:
        raise ValueError(f"unknown campaign backend {backend!r}; known: numpy, cupy")
    if where.on_device:
        from safemon.faults.launch import input_verdicts_gpu

        verdicts = input_verdicts_gpu(a, b, variant, golden_c, golden_es, progress, batch)
    else:
        verdicts = _cpu_verdicts(a, b, variant, golden_c, golden_es, progress, batch)
    return CampaignResult(variant, dims, verdicts, where.value, seed, time.perf_counter() - start)


def default_tile(dims: Dims) -> TileConfig:
    """The tile a campaign or a benchmark uses at `dims`: the library's own `auto_tile` (for
    variants without a fold at every MAC, so that every variant of one run shares it)."""
    return auto_tile(dims.m, dims.n, dims.k)


def campaign_variants(text: str, mode: str, tile: str, dims: Dims) -> list[Variant]:
    """The variants `safemon dc --variants TEXT --mode MODE --tile TILE` campaigns at `dims`:
    `parse_variants` on the named tile, or with "auto" on `default_tile(dims)`, where a
    variant folding at level T then runs that tile's 16-wide k-tiles as the library and
    `safemon bench` do (`catalog.t_level_variant`), so that the campaign's variant name is
    the benchmark's.

    Raises:
        ValueError: as `parse_variants`.
    """
    if tile != "auto":
        return parse_variants(text, mode, tile)
    return [t_level_variant(v, dims.k) for v in parse_variants(text, mode, default_tile(dims))]


# ---- NumPy backend ---------------------------------------------------------------------------
#
# Packing. Thread (ty, tx) of a block reads only the TM rows ty*TM.. of the block's A strip and
# the TN columns tx*TN.. of its B strip, and its ES folds only its own operands and
# accumulators. So one copy of a block-row strip can carry one fault in each of its BM/TM
# thread rows at once (and a block-column strip one per thread column): each fault is judged
# only on its own thread row's ES words and C rows, which no other fault of the copy reaches.


def _group_faults(groups: list[npt.NDArray[np.int64]]) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """(copy, group, element, bit) of every fault of a strip, bit-major within each group."""
    copy_l, group_l, elem_l, bit_l = [], [], [], []
    for g, elems in enumerate(groups):
        n = elems.size
        if n == 0:
            continue
        bits = np.repeat(np.arange(32, dtype=np.int64), n)
        copy_l.append(np.arange(32 * n, dtype=np.int64))
        group_l.append(np.full(32 * n, g, dtype=np.int64))
        elem_l.append(np.tile(elems, 32))
        bit_l.append(bits)
    return (
        np.concatenate(copy_l),
        np.concatenate(group_l),
        np.concatenate(elem_l),
        np.concatenate(bit_l),
    )


def _cpu_verdicts(
    a: F32,
    b: F32,
    variant: Variant,
    golden_c: F32,
    golden_es: U32,
    progress: Progress | None,
    batch: int | None,
) -> U8:
    t = variant.tile
    m, k = a.shape
    n = b.shape[1]
    gx, gy = t.grid(m, n)
    ty_n, tx_n = t.bm // t.tm, t.bn // t.tn
    words = variant.words
    ges = golden_es.reshape(gy, gx, ty_n, tx_n, words)
    gc_bits = golden_c.view(np.uint32)
    verdicts = np.zeros(32 * (m * k + k * n), dtype=np.uint8)
    a_faults = 32 * m * k
    one = np.uint32(1)

    # A: one block-row strip at a time; copies stacked along M, one fault per thread row.
    q_a = batch or max(1, CPU_BATCH_ELEMENTS // (t.bm * gx * t.bn))
    for by in range(gy):
        r0 = by * t.bm
        rows = min(t.bm, m - r0)
        strip = np.zeros((t.bm, k), dtype=np.float32)
        strip[:rows] = a[r0 : r0 + rows]
        g_es = ges[by]  # (gx, ty_n, tx_n, W)
        g_c = np.zeros((t.bm, n), dtype=np.uint32)
        g_c[:rows] = gc_bits[r0 : r0 + rows]
        groups = [
            np.arange(g * t.tm * k, min((g + 1) * t.tm, rows) * k, dtype=np.int64)
            for g in range(ty_n)
        ]
        copy, group, elem, bit = _group_faults(groups)
        order = np.argsort(copy, kind="stable")
        copy, group, elem, bit = copy[order], group[order], elem[order], bit[order]
        total = int(copy.max()) + 1
        for c_lo in range(0, total, q_a):
            sel = slice(*np.searchsorted(copy, [c_lo, c_lo + q_a]))
            cq, gq, eq, bq = copy[sel] - c_lo, group[sel], elem[sel], bit[sel]
            q = min(q_a, total - c_lo)
            stack = np.repeat(strip[None], q, axis=0)
            stack.view(np.uint32)[cq, eq // k, eq % k] ^= one << bq.astype(np.uint32)
            c, es = reference_matmul(stack.reshape(q * t.bm, k), b, variant)
            es_diff = (es.reshape(q, gx, ty_n, tx_n, words) != g_es).any(axis=(1, 3, 4))
            c_diff = (c.view(np.uint32).reshape(q, t.bm, n) != g_c)
            c_diff[:, rows:] = False
            c_diff_g = c_diff.reshape(q, ty_n, t.tm * n).any(axis=2)
            fault = (r0 * k + eq) * 32 + bq
            verdicts[fault] = es_diff[cq, gq] * ES_DIFFERS + c_diff_g[cq, gq] * C_DIFFERS
            if progress is not None:
                progress(int(cq.size))

    # B: one block-column strip at a time; copies side by side along N, one per thread column.
    q_b = batch or max(1, CPU_BATCH_ELEMENTS // (t.bn * gy * t.bm))
    for bx in range(gx):
        c0 = bx * t.bn
        cols = min(t.bn, n - c0)
        strip = np.zeros((k, t.bn), dtype=np.float32)
        strip[:, :cols] = b[:, c0 : c0 + cols]
        g_es = ges[:, bx]  # (gy, ty_n, tx_n, W)
        g_c = np.zeros((m, t.bn), dtype=np.uint32)
        g_c[:, :cols] = gc_bits[:, c0 : c0 + cols]
        # Local element id = kk * BN + column within the strip.
        groups = []
        for g in range(tx_n):
            cc = np.arange(g * t.tn, min((g + 1) * t.tn, cols), dtype=np.int64)
            groups.append((np.arange(k, dtype=np.int64)[:, None] * t.bn + cc[None, :]).ravel())
        copy, group, elem, bit = _group_faults(groups)
        order = np.argsort(copy, kind="stable")
        copy, group, elem, bit = copy[order], group[order], elem[order], bit[order]
        total = int(copy.max()) + 1
        for c_lo in range(0, total, q_b):
            sel = slice(*np.searchsorted(copy, [c_lo, c_lo + q_b]))
            cq, gq, eq, bq = copy[sel] - c_lo, group[sel], elem[sel], bit[sel]
            q = min(q_b, total - c_lo)
            kk, cc = eq // t.bn, eq % t.bn
            stack = np.repeat(strip[:, None, :], q, axis=1)  # (K, q, BN)
            stack.view(np.uint32)[kk, cq, cc] ^= one << bq.astype(np.uint32)
            c, es = reference_matmul(a, stack.reshape(k, q * t.bn), variant)
            es_q = es.reshape(gy, q, ty_n, tx_n, words)
            es_diff = (es_q != g_es[:, None]).any(axis=(0, 2, 4))  # (q, tx_n)
            c_diff = c.view(np.uint32).reshape(m, q, t.bn) != g_c[:, None, :]
            c_diff[:, :, cols:] = False
            c_diff_g = c_diff.reshape(m, q, tx_n, t.tn).any(axis=(0, 3))  # (q, tx_n)
            fault = a_faults + (kk * n + c0 + cc) * 32 + bq
            verdicts[fault] = es_diff[cq, gq] * ES_DIFFERS + c_diff_g[cq, gq] * C_DIFFERS
            if progress is not None:
                progress(int(cq.size))
    return verdicts
