"""The coverage/overhead frontier of every variant, from committed evidence (issue 15).

usage: python3 scripts/checked_frontier.py --store DIR --bench FILE [--bench FILE ...]
                                           [--mode fma] [--markdown F] [--plot F.png]

Joins two kinds of evidence that are measured on different shapes, and says so in its output:

- the in-kernel DC 95 % lower bounds (transient, thread-permanent, block-permanent) of each
  variant, from the `inkernel_*_{mode}_{scope}*.json` files of an evidence store (the
  campaigns run at 80×80×80 on the `small` tile; `safemon dc --inkernel`);
- the overhead over the unprotected kernel of the same tiling, from `safemon bench` JSON
  files (safemon.bench/2), at every shape they hold.

A variant is on the frontier of a shape when no other variant has both a higher (or equal)
worst in-kernel lower bound and a lower (or equal) overhead there, one of them strictly.
Printed (and written with --markdown): one table per shape, frontier rows marked, and whether
any variant reaches "every in-kernel lower bound ≥ 99 % at ≤ 1.3×" (issue 15's target for
ES-M + ABFT) there. --plot writes one panel per shape: worst lower bound against overhead,
the target region shaded.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

SCOPES = ("transient", "thread", "block")
TARGET_DC = 99.0
TARGET_OVERHEAD = 1.3
#: The plot's widest overhead (crc32c and fletcher at level I lie far beyond; the tables list them).
X_MAX = 6.0


def load_dc(store: Path, mode: str) -> tuple[dict[str, dict[str, float]], set[str]]:
    """{variant label: {scope: LB %}} from the store's in-kernel files of `mode`, the newest
    file winning per (variant, scope); and the dims the campaigns ran at."""
    dc: dict[str, dict[str, tuple[str, float]]] = {}
    dims: set[str] = set()
    for path in sorted(store.glob(f"inkernel_*_{mode}_*.json")):
        doc = json.loads(path.read_text())
        for row in doc["results"]:
            if row["mode"] != mode or row["scope"] not in SCOPES:
                continue
            dims.add(row["dims"])
            have = dc.setdefault(row["variant"], {})
            old = have.get(row["scope"])
            if old is None or doc["date"] >= old[0]:
                have[row["scope"]] = (doc["date"], float(row["dc_lower_percent"]))
    return {v: {s: lb for s, (_, lb) in by.items()} for v, by in dc.items()}, dims


def load_overheads(paths: list[Path], mode: str) -> tuple[dict[str, dict[str, float]], list[str]]:
    """{dims: {variant label: overhead}} from bench JSON files (later files win), and the
    files' device/date lines."""
    out: dict[str, dict[str, float]] = {}
    where: list[str] = []
    for path in paths:
        doc = json.loads(path.read_text())
        if doc.get("schema") != "safemon.bench/2":
            raise ValueError(f"{path}: not a safemon.bench/2 file")
        where.append(f"{path.name}: {doc['device']}, {doc['date']}")
        for row in doc["rows"]:
            if row["mode"] == mode:
                out.setdefault(row["dims"], {})[row["variant"]] = float(row["overhead"])
    return out, where


def frontier(points: dict[str, tuple[float, float]]) -> set[str]:
    """Labels of the points (worst LB, overhead) that no other point dominates."""
    on: set[str] = set()
    for name, (lb, oh) in points.items():
        if not any((lb2 >= lb and oh2 <= oh) and (lb2 > lb or oh2 < oh)
                   for other, (lb2, oh2) in points.items() if other != name):
            on.add(name)
    return on


def tables(dc: dict[str, dict[str, float]], overheads: dict[str, dict[str, float]]
           ) -> tuple[str, dict[str, Any]]:
    """The Markdown tables and, per shape, the points, the frontier and the target verdict."""
    lines: list[str] = []
    result: dict[str, Any] = {}
    for dims, by_variant in overheads.items():
        points = {v: (min(dc[v][s] for s in SCOPES), oh) for v, oh in by_variant.items()
                  if v in dc and all(s in dc[v] for s in SCOPES)}
        if not points:
            continue
        front = frontier(points)
        meets = sorted(v for v, (lb, oh) in points.items()
                       if lb >= TARGET_DC and oh <= TARGET_OVERHEAD)
        result[dims] = {"points": points, "frontier": sorted(front), "meets_target": meets}
        lines += [f"### {dims}", "",
                  "| variant | transient LB % | thread LB % | block LB % | worst LB % "
                  "| overhead | frontier |", "|---|---:|---:|---:|---:|---:|---|"]
        for v, (lb, oh) in sorted(points.items(), key=lambda kv: (kv[1][1], -kv[1][0])):
            d = dc[v]
            lines.append(f"| {v} | {d['transient']:.3f} | {d['thread']:.3f} | {d['block']:.3f} "
                         f"| {lb:.3f} | {oh:.2f}× | {'yes' if v in front else ''} |")
        verdict = (", ".join(meets) if meets else "none")
        lines += ["", f"Every in-kernel LB ≥ {TARGET_DC:g} % at ≤ {TARGET_OVERHEAD}×: {verdict}.",
                  ""]
    return "\n".join(lines), result


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shapes = list(result)
    cols = min(2, len(shapes))
    rows = -(-len(shapes) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(6.5 * cols, 5.0 * rows), squeeze=False)
    for ax in axes.flat[len(shapes):]:
        ax.set_visible(False)
    for ax, dims in zip(axes.flat, shapes, strict=False):
        pts = result[dims]["points"]
        front = set(result[dims]["frontier"])
        ax.fill_between([0.95, TARGET_OVERHEAD], TARGET_DC, 100.5, color="tab:green", alpha=0.12,
                        label=f"target: LB ≥ {TARGET_DC:g} %, ≤ {TARGET_OVERHEAD}×")
        for v, (lb, oh) in pts.items():
            if oh > X_MAX:
                continue  # off the panel (listed in the table)
            on = v in front
            ax.scatter(oh, lb, s=28 if on else 12, color="tab:red" if on else "tab:gray",
                       zorder=3)
            if on or (("abft" in v or "rmt" in v) and lb > 40):
                ax.annotate(v, (oh, lb), fontsize=7, xytext=(4, -3), textcoords="offset points")
        fx = sorted((pts[v][1], pts[v][0]) for v in front)
        ax.plot([x for x, _ in fx], [y for _, y in fx], color="tab:red", lw=0.8)
        ax.set_xscale("log")
        ax.set_xlim(0.95, X_MAX)
        ax.set_xlabel(f"overhead over the unprotected kernel (log; > {X_MAX:g}× not drawn)")
        ax.set_ylabel("worst in-kernel DC 95 % lower bound (%), campaigns at 80³")
        ax.set_ylim(-2, 101)
        ax.set_title(dims, fontsize=10)
        ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=130)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--store", required=True, type=Path)
    ap.add_argument("--bench", required=True, type=Path, action="append")
    ap.add_argument("--mode", default="fma")
    ap.add_argument("--markdown", type=Path)
    ap.add_argument("--plot", type=Path)
    args = ap.parse_args()
    dc, dc_dims = load_dc(args.store, args.mode)
    if not dc:
        print(f"no in-kernel evidence of mode {args.mode} under {args.store}", file=sys.stderr)
        return 1
    overheads, where = load_overheads(args.bench, args.mode)
    body, result = tables(dc, overheads)
    head = ("In-kernel DC lower bounds (95 %) from the campaigns at "
            f"{', '.join(sorted(dc_dims))} (`small` tile) in {args.store}; overheads "
            "(kernel time over the unprotected kernel of the same tiling, CUDA events) from "
            + "; ".join(where) + ". The two are measured on different shapes: the bound is "
            "the campaign shape's, the overhead the named shape's.\n")
    text = head + "\n" + body
    print(text)
    if args.markdown:
        args.markdown.write_text(text)
    if args.plot:
        plot(result, args.plot)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
