"""The evidence plot of the determinism audit: block/warp orderings and their Kendall tau.

Left column: for one MMM variant and for the float-atomic contrast, the start rank of each
block (warp) against its index, a few runs overlaid, alone and under load. Right: Kendall tau
of every run against the first, per variant and condition. Needs matplotlib (test extra).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from safemon.audit.determinism import kendall_tau

__all__ = ["plot_orderings"]

SHOWN_RUNS = 3


def plot_orderings(doc: dict[str, Any], arrays: dict[str, Any], path: Path) -> None:
    """Write the figure (module docstring) to `path` (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    first = _build(doc["variants"][0])
    fig, axes = plt.subplots(2, 2, figsize=(13, 8.5))
    for row, (key, what) in enumerate(((first, "block"), ("atomic_sum", "warp"))):
        ax = axes[row][0]
        for cond, marker in (("alone", "."), ("load", "x")):
            ranks = arrays[f"{key}|{cond}"]
            for i in range(min(SHOWN_RUNS, len(ranks))):
                ax.plot(np.arange(ranks.shape[1]), ranks[i], marker, ms=2, alpha=0.6,
                        label=f"{cond} run {i}")
        ax.set_xlabel(f"{what} index (launch order)")
        ax.set_ylabel("start rank" if what == "block" else "atomic arrival rank")
        ax.set_title(f"{key}: {what} orderings", fontsize=10)
        ax.legend(fontsize=7, markerscale=4)
    ax = axes[0][1]
    names = [_build(v) for v in doc["variants"]] + ["atomic_sum"]
    for j, name in enumerate(names):
        for cond, dx, color in (("alone", -0.15, "tab:blue"), ("load", 0.15, "tab:red")):
            ranks = arrays[f"{name}|{cond}"]
            taus = [kendall_tau(ranks[0], r) for r in ranks[1:]]
            ax.plot(np.full(len(taus), j + dx), taus, "o", ms=3, color=color, alpha=0.5,
                    label=cond if j == 0 else None)
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names, rotation=75, fontsize=6)
    ax.set_ylabel("Kendall tau vs run 0")
    ax.set_title("orderings differ run to run (tau < 1)", fontsize=10)
    ax.legend(fontsize=7)
    ax = axes[1][1]
    ax.axis("off")
    lines = _summary_lines(doc)
    ax.text(0.0, 1.0, "\n".join(lines), va="top", family="monospace", fontsize=7.5)
    dev = doc["device"]["name"]
    fig.suptitle(f"safemon audit determinism — {dev}, {doc['date']}, "
                 f"{doc['size']}³ MMM, {doc['repeats']} runs per condition", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _build(row: dict[str, Any]) -> str:
    """A report row's build label (`determinism_run.build_label`); reports written before
    the label existed name the variant only."""
    return str(row.get("build", row["variant"]))


def _summary_lines(doc: dict[str, Any]) -> list[str]:
    lines = [f"{'build':40s} differing C/ES (max)"]
    for v in doc["variants"]:
        lines.append(f"{_build(v):40s} {v['differing_max']}")
    c = doc["contrasts"]
    for cond in ("alone", "load"):
        lines.append(f"atomic float sum ({cond}): {c['atomic_sum'][cond]['distinct_results']} "
                     f"distinct results of {c['atomic_sum'][cond]['runs']}")
        lines.append(f"cupy.sum ({cond}): {c['cupy_sum'][cond]['distinct_results']} distinct; "
                     f"cuBLAS matmul: {c['cublas_matmul'][cond]['distinct_results']} distinct")
    return lines
