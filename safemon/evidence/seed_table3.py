"""The seed paper's GPU column of Table 3, and our Table 3 beside it with the differences.

`SEED_GPU_DC` holds the GPU values of Table 3 of Fernández et al. 2022 (Jetson Xavier NX,
CUTLASS-derived kernel), in percent, for the seed's six DC sizes in the order of
`SEED_DC_DIMS` (20², 40², 80², L1, L2, L3). Only the GPU columns are copied; the sequential
and AVX columns of the seed come from another paper and are not compared here. The seed
omits combinations "that reach 100 % in all cases"; those it lists are included.

`table3_vs_seed` renders our input-flip DC(ES) for the paper's levels (I, M, E and the
combinations) next to the seed's value and the difference (ours − seed), and lists the F and T
levels, which the seed has no counterpart for, below.
"""

from __future__ import annotations

from collections.abc import Iterable

from safemon.dims import SEED_DC_DIMS
from safemon.evidence.store import DcRecord

__all__ = ["SEED_GPU_DC", "table3_vs_seed"]

#: Seed Table 3, GPU columns, percent, sizes in SEED_DC_DIMS order (our variant labels).
SEED_GPU_DC: dict[str, tuple[float, ...]] = {
    "xor/E": (10.0, 10.0, 12.5, 6.6, 12.4, 12.1),
    "xor/M": (50.0, 50.0, 50.0, 52.5, 0.9, 6.3),
    "xor/I": (50.0, 50.0, 50.0, 52.5, 0.9, 6.3),
    "ones/E": (10.0, 10.0, 12.5, 6.6, 12.4, 12.1),
    "ones/M": (62.5, 62.5, 62.5, 63.9, 25.7, 30.0),
    "ones/I": (100.0, 100.0, 100.0, 100.0, 100.0, 100.0),
    "twos/E": (10.0, 10.0, 12.5, 6.6, 12.4, 12.1),
    "twos/M": (61.7, 61.7, 61.7, 63.2, 24.1, 28.5),
    "twos/I": (95.7, 95.7, 95.7, 95.9, 91.5, 92.0),
    "fletcher/E": (10.0, 10.0, 12.5, 6.6, 12.4, 12.1),
    "fletcher/M": (62.5, 62.5, 62.5, 63.9, 25.7, 30.0),
    "fletcher/I": (100.0, 100.0, 100.0, 100.0, 100.0, 100.0),
    "crc32c/E": (10.0, 10.0, 12.5, 6.6, 12.4, 12.1),
    "crc32c/M": (62.5, 62.5, 62.5, 63.9, 25.7, 30.0),
    "crc32c/I": (100.0, 100.0, 100.0, 100.0, 100.0, 100.0),
    "xor_fletcher": (90.6, 90.6, 90.6, 91.0, 81.4, 82.5),
    "ones_fletcher": (96.3, 95.6, 95.6, 95.5, 90.7, 91.3),
    "twos_fletcher": (96.3, 95.6, 95.6, 95.5, 90.7, 91.3),
}


def table3_vs_seed(records: Iterable[DcRecord], *, flag_over: float = 5.0) -> str:
    """Markdown: per variant and seed size, our DC(ES), the seed's GPU value and ours − seed.

    Differences whose magnitude exceeds `flag_over` points are marked with "**". Sizes or
    variants without a record of ours show "—".
    """
    dims = [d.key for d in SEED_DC_DIMS.values()]
    names = list(SEED_DC_DIMS)
    ours: dict[tuple[str, str], float] = {}
    for r in records:
        ours[(r.variant, r.dims)] = r.dc_percent
    head = "| variant | " + " | ".join(f"{n} ours | {n} seed | Δ" for n in names) + " |"
    lines = [head, "|---|" + "---:|---:|---:|" * len(names)]
    for label, seed in SEED_GPU_DC.items():
        cells = []
        for d, s in zip(dims, seed, strict=True):
            o = ours.get((label, d))
            if o is None:
                cells.append(f"— | {s:.1f} | —")
                continue
            delta = o - s
            mark = "**" if abs(delta) > flag_over else ""
            cells.append(f"{o:.1f} | {s:.1f} | {mark}{delta:+.1f}{mark}")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    extra = sorted({lab for lab, _ in ours if lab.split("/")[-1] in ("F", "T")})
    if extra:
        lines += ["", "safemon's stronger levels (no seed counterpart):", "",
                  "| variant | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names)]
        for lab in extra:
            vals = [f"{ours[(lab, d)]:.1f}" if (lab, d) in ours else "—" for d in dims]
            lines.append(f"| {lab} | " + " | ".join(vals) + " |")
    return "\n".join(lines)
