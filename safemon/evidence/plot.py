"""The DC-vs-overhead trade-off plot (the seed's Figure 7) and its data points.

One point per variant at one size: x = overhead (protected / unprotected median, same
tiling, from the benchmark), y = the selection DC in percent (`safemon.evidence.coverage`: the
minimum of the input-flip and three in-kernel 95 % lower bounds) when in-kernel evidence is
given, else the input-flip DC(ES); variants lacking in-kernel evidence are then left out.
Horizontal lines mark the IEC 61508-2 bands. Rendered with matplotlib's Agg backend into a
PNG file; no display is needed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from safemon.evidence.coverage import variant_coverage
from safemon.evidence.inkernel_schema import InKernelRecord
from safemon.evidence.select import BANDS
from safemon.evidence.store import BenchRow, DcRecord

__all__ = ["TradeoffPoint", "plot_tradeoff", "tradeoff_points"]


@dataclass(frozen=True)
class TradeoffPoint:
    label: str
    name: str
    overhead: float
    dc_percent: float


def tradeoff_points(
    dims: str,
    dc: Mapping[tuple[str, str], DcRecord],
    bench: Mapping[tuple[str, str], BenchRow],
    inkernel: Mapping[tuple[str, str, str], InKernelRecord] | None = None,
    *,
    mode: str | None = None,
) -> list[TradeoffPoint]:
    """Points for every protected variant with DC and overhead evidence at `dims` (and, when
    `inkernel` is given, all three in-kernel campaigns: y is then the selection DC)."""
    from safemon.evidence.select import has_check

    out = []
    for (name, d), rec in sorted(dc.items()):
        row = bench.get((name, d))
        if d != dims or row is None or not has_check(rec):
            continue
        if mode is not None and rec.mode != mode:
            continue
        y: float | None = rec.dc_percent
        if inkernel is not None:
            y = variant_coverage(name, dims, dc, inkernel).selection_dc
        if y is not None:
            out.append(TradeoffPoint(rec.variant, name, row.overhead, y))
    return out


def plot_tradeoff(
    points: Sequence[TradeoffPoint], path: Path | str, *, title: str,
    ylabel: str = "DC(ES) %: single-bit input faults detected",
) -> Path:
    """Write the trade-off scatter plot as a PNG; returns the path.

    Raises:
        ValueError: no points.
        ImportError: matplotlib is not installed (`pip install 'safemon[plot]'`).
    """
    if not points:
        raise ValueError("no variant has both DC and overhead evidence; nothing to plot")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # Points crowd near 100 % and near 1×: number them on the plot and name them in a key
    # beside it (sorted by overhead), and zoom the DC axis when every point is high.
    pts = sorted(points, key=lambda p: (p.overhead, -p.dc_percent, p.label))
    fig, (ax, key) = plt.subplots(1, 2, figsize=(11, 5.5), dpi=120,
                                  gridspec_kw={"width_ratios": [3, 1.15]})
    try:
        xs = [p.overhead for p in pts]
        ys = [p.dc_percent for p in pts]
        ax.scatter(xs, ys, s=28, color="tab:blue", zorder=3)
        for i, p in enumerate(pts, start=1):
            dy = (4, -10, 10, -4)[i % 4]
            ax.annotate(str(i), (p.overhead, p.dc_percent), textcoords="offset points",
                        xytext=(3, dy), fontsize=7)
        low = 0.0 if min(ys) < 90.0 else max(0.0, float(int(min(ys))) - 0.5)
        for band, level in BANDS.items():
            if level >= low:
                ax.axhline(level, color="grey", linewidth=0.8, linestyle="--", zorder=1)
                ax.text(max(xs), level, f" {band} ({level:g} %)", va="bottom", ha="right",
                        fontsize=7, color="grey")
        if max(xs) / min(xs) > 20:
            ax.set_xscale("log")
        ax.set_xlabel("overhead: protected / unprotected time (same shape and K-slices)")
        ax.set_ylabel(ylabel)
        ax.set_ylim(low, 100.0 + (100.0 - low) * 0.04)
        ax.set_title(title, fontsize=9)
        ax.grid(True, linewidth=0.3)
        key.axis("off")
        lines = [f"{i:>2}  {p.label:<14} {p.overhead:6.2f}×  {p.dc_percent:7.3f} %"
                 for i, p in enumerate(pts, start=1)]
        key.text(0.0, 1.0, "\n".join(lines), va="top", ha="left", family="monospace",
                 fontsize=7, transform=key.transAxes)
        fig.tight_layout()
        out = Path(path)
        out.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(out, format="png")
    finally:
        plt.close(fig)
    return out
