"""Launch the injection build of the protected-MMM kernel (`SAFEMON_INJECT=1`) in batches.

The injection build takes an array of `Injection` structs (mmm.cu) and runs one injected copy
of the whole product per blockIdx.z. Each copy compares its ES words and C entries with the
golden arrays on the device and ORs a verdict word: bit 0 ES differs, bit 1 C differs, bit 2
the RMT replicas disagreed (RMT builds only; `RMT_DETECTED`; an inter-block RMT launch also
carries both copies' C per injection, so its batches are capped by memory). With
C == nullptr the kernel stores nothing else, so a launch costs only the reachable blocks' work
(blocks a fault cannot reach return at once).

This module is the only place that knows the struct layout; the campaigns build rows with
`injection_rows` and call `run_injections`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from safemon.errors import SafemonError
from safemon.kernels.catalog import Variant

__all__ = [
    "ABFT_DETECTED",
    "MAX_Z",
    "RMT_DETECTED",
    "TARGETS",
    "GoldenMismatchError",
    "injection_rows",
    "input_verdicts_gpu",
    "run_injections",
]

#: `Injection.target` codes of mmm.cu.
TARGETS: dict[str, int] = {
    "none": 0,
    "operand_a": 1,
    "operand_b": 2,
    "accumulator": 3,
    "es_word": 4,
    "input_a": 5,
    "input_b": 6,
}
#: `Injection.scope` codes of mmm.cu.
SCOPES: dict[str, int] = {"transient": 0, "thread": 1, "block": 2}
#: int32 fields of one Injection, in struct order.
FIELDS = ("target", "thread", "block", "kstep", "index", "bit", "scope", "copy")
#: Verdict bit of an RMT build: the replica pair's comparison failed (the tile is poisoned).
RMT_DETECTED = np.uint32(4)
#: Verdict bit of an ABFT variant: the ABFT check of the stored C would fail.
ABFT_DETECTED = np.uint32(8)
#: gridDim.z limit of CUDA: injections per launch.
MAX_Z = 65535
#: Device memory for the copies' C tiles of one inter-block RMT launch (2·M·N float32 per
#: injection); launches of such variants hold at most this many bytes' worth of injections.
RMT_BLOCK_BUF_BYTES = 1 << 30

I32 = npt.NDArray[np.int32]
U32 = npt.NDArray[np.uint32]
U8 = npt.NDArray[np.uint8]


class GoldenMismatchError(SafemonError):
    """The device's fault-free run differs from the NumPy golden run.

    A campaign on such a device would measure a different computation than the reference's
    (or a faulty device), so it is refused.
    """


def injection_rows(
    n: int,
    *,
    target: int | npt.ArrayLike,
    index: int | npt.ArrayLike = 0,
    bit: int | npt.ArrayLike = 0,
    thread: int | npt.ArrayLike = -1,
    block: int | npt.ArrayLike = -1,
    kstep: int | npt.ArrayLike = -1,
    scope: int | npt.ArrayLike = 0,
    copy: int | npt.ArrayLike = -1,
) -> I32:
    """An (n, 8) int32 array of Injection structs; each field a scalar or an (n,) array.

    `copy` picks the RMT replica the fault hits (0 or 1; -1 both); builds without RMT
    ignore it (every fault hits the one copy there is).
    """
    rows = np.empty((n, len(FIELDS)), dtype=np.int32)
    values = {"target": target, "thread": thread, "block": block, "kstep": kstep,
              "index": index, "bit": bit, "scope": scope, "copy": copy}
    for col, name in enumerate(FIELDS):
        rows[:, col] = np.broadcast_to(np.asarray(values[name], dtype=np.int64), (n,))
    bits = rows[:, FIELDS.index("bit")]
    if n and (bits.min() < 0 or bits.max() > 31):
        raise ValueError("injection bit must lie in 0..31")
    return rows


def run_injections(
    a: npt.NDArray[np.float32],
    b: npt.NDArray[np.float32],
    variant: Variant,
    golden_c: npt.NDArray[np.float32],
    golden_es: U32,
    rows: I32,
    *,
    progress: Callable[[int], None] | None = None,
    batch: int | None = None,
    rel_errors: npt.NDArray[np.float32] | None = None,
) -> U32:
    """Run every injection of `rows` (n, 8) and return the (n,) uint32 verdict words.

    Args:
        a, b: clean inputs (M, K), (K, N) float32 on the host.
        golden_c, golden_es: the NumPy reference's C (M, N) and ES (threads, words).
        batch: injections per launch (≤ 65,535; None: as many as allowed).
        rel_errors: for an ABFT variant, an (n,) float32 array filled with each injection's
            largest |ΔC| / max(|C|, 2⁻¹²⁶) over the stored C (0 when C is unchanged).

    Raises:
        BackendUnavailableError: no CuPy or no device.
        GoldenMismatchError: the fault-free injection run (target 0) disagrees with golden.
        ValueError: bad `rows` shape or batch.
    """
    from safemon.kernels.compiler import import_cupy
    from safemon.kernels.gpu import kernel_for, rmt_block_buffers, rmt_block_shapes

    cp = import_cupy()
    if rows.ndim != 2 or rows.shape[1] != len(FIELDS):
        raise ValueError(f"injection rows must have shape (n, {len(FIELDS)}), not {rows.shape}")
    m, k = a.shape
    n = b.shape[1]
    # Inter-block RMT keeps both copies' C per injection (rmt_buf); launches are capped so
    # that it stays within RMT_BLOCK_BUF_BYTES.
    z_max = (MAX_Z if variant.rmt != "block"
             else max(1, min(MAX_Z, RMT_BLOCK_BUF_BYTES // (8 * m * n))))
    z = z_max if batch is None else batch
    if not 0 < z <= MAX_Z:
        raise ValueError(f"batch must lie in 1..{MAX_Z}, got {batch}")
    z = min(z, z_max)
    t = variant.tile
    gx, gy = t.grid(m, n)
    kernel = kernel_for(variant, inject=True)
    a_d, b_d = cp.asarray(a), cp.asarray(b)
    gc_d = cp.asarray(golden_c)
    ges_d = cp.asarray(np.ascontiguousarray(golden_es, dtype=np.uint32))
    null = np.uintp(0)  # C and ES: the campaign mode stores nothing
    abft_ref: Any = None
    if variant.abft:
        from safemon.kernels.abft import abft_campaign_reference

        abft_ref = cp.asarray(abft_campaign_reference(a, b, golden_c, t, variant.abft_kind))
    errs: list[Any] = []

    def launch(chunk: I32) -> Any:
        inj_d = cp.asarray(np.ascontiguousarray(chunk))
        out = cp.zeros(chunk.shape[0], dtype=cp.uint32)
        args: tuple[Any, ...] = (a_d, b_d, null, null, np.int32(m), np.int32(n), np.int32(k),
                                 inj_d, out, ges_d, gc_d)
        if abft_ref is not None:
            err = cp.zeros(chunk.shape[0], dtype=cp.uint32)
            errs.append(err)
            args += (abft_ref, err)
        rmt = rmt_block_shapes(variant, m, n, chunk.shape[0], inject=True)
        if rmt is not None:
            args += rmt_block_buffers(rmt)
        kernel((gx, gy * variant.grid_copies, chunk.shape[0]), (variant.block_threads, 1, 1),
               args)
        return out

    clean = int(launch(injection_rows(1, target=TARGETS["none"])).get()[0])
    if clean:
        raise GoldenMismatchError(
            f"{variant.name} on this device differs from the NumPy reference without any fault "
            f"(verdict {clean:#x}: bit 0 ES, bit 1 C); the campaign would not measure this kernel"
        )
    verdicts = np.empty(rows.shape[0], dtype=np.uint32)
    pending: list[tuple[int, int, Any]] = []
    for lo in range(0, rows.shape[0], z):
        hi = min(lo + z, rows.shape[0])
        pending.append((lo, hi, launch(rows[lo:hi])))
        if len(pending) > 2:  # keep the GPU fed while the host collects older batches
            plo, phi, out = pending.pop(0)
            verdicts[plo:phi] = out.get()
            if progress is not None:
                progress(phi - plo)
    for plo, phi, out in pending:
        verdicts[plo:phi] = out.get()
        if progress is not None:
            progress(phi - plo)
    if rel_errors is not None and errs:
        rel_errors[:] = np.concatenate([e.get() for e in errs[1:]]).view(np.float32)
    return verdicts


def input_verdicts_gpu(
    a: npt.NDArray[np.float32],
    b: npt.NDArray[np.float32],
    variant: Variant,
    golden_c: npt.NDArray[np.float32],
    golden_es: U32,
    progress: Callable[[int], None] | None,
    batch: int | None,
) -> U8:
    """Verdict bytes of the exhaustive input campaign in fault order (see `campaign`); for
    RMT and ABFT variants bit 0 also carries their checks' detections."""
    m, k = a.shape
    n = b.shape[1]
    a_bits, b_bits = 32 * m * k, 32 * k * n
    fa = np.arange(a_bits, dtype=np.int64)
    fb = np.arange(b_bits, dtype=np.int64)
    rows = np.concatenate([
        injection_rows(a_bits, target=TARGETS["input_a"], index=fa // 32, bit=fa % 32),
        injection_rows(b_bits, target=TARGETS["input_b"], index=fb // 32, bit=fb % 32),
    ])
    v = run_injections(a, b, variant, golden_c, golden_es, rows, progress=progress, batch=batch)
    # ES_DIFFERS of the verdict byte means "flagged": by ES, or by the RMT / ABFT checks.
    flagged = (v & (np.uint32(1) | RMT_DETECTED | ABFT_DETECTED)) != 0
    out: U8 = ((v & np.uint32(2)) | flagged.astype(np.uint32)).astype(np.uint8)
    return out
