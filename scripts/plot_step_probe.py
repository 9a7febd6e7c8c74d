"""Plot scripts/channel_step_probe.py outputs: p50 of each order, alone and three at once,
without and with MPS, as grouped bars (one PNG).

usage: python3 scripts/plot_step_probe.py NOMPS.txt MPS.txt OUT.png [--title TEXT]
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

ROW = re.compile(r"^\s+(\d+) process\(es\)\s+(.+?)\s+([\d.]+)\s+([\d.]+)\s*$")


def read(path: Path) -> dict[tuple[int, str], float]:
    """{(processes, order): p50 µs} of one probe output, `: queue` rows left out."""
    out: dict[tuple[int, str], float] = {}
    for line in path.read_text().splitlines():
        m = ROW.match(line)
        if m and not m.group(2).endswith(": queue"):
            out[(int(m.group(1)), m.group(2))] = float(m.group(3))
    if not out:
        raise SystemExit(f"{path}: no probe rows found")
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("nomps", type=Path)
    ap.add_argument("mps", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--title", default="A channel's device step at 80³ (p50)")
    args = ap.parse_args()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = {"no MPS": read(args.nomps), "MPS": read(args.mps)}
    orders = list(dict.fromkeys(o for _, o in runs["no MPS"]))
    groups = [(mode, p) for mode in runs for p in (1, 3)]
    fig, ax = plt.subplots(figsize=(9, 4.2))
    width = 0.8 / len(orders)
    for i, order in enumerate(orders):
        xs = [g + i * width for g in range(len(groups))]
        ax.bar(xs, [runs[mode].get((p, order), 0.0) for mode, p in groups], width, label=order)
    ax.set_xticks([g + 0.4 - width / 2 for g in range(len(groups))])
    ax.set_xticklabels([f"{p} process{'es' if p > 1 else ''}, {mode}" for mode, p in groups])
    ax.set_ylabel("µs per step (p50)")
    ax.set_title(args.title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(args.out, dpi=120)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
