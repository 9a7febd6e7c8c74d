"""`safemon select`: the cheapest variant whose measured DC meets a SIL/HFT requirement.

Reads the evidence stored for one device (`safemon dc --evidence DIR`, `safemon bench
--evidence DIR`) and applies the rule of `safemon.faults.select`. `--table` prints the whole
SIL × HFT table (the seed's Table 4, generated); `--plot` writes the DC-vs-overhead PNG;
`--report DIR` writes Table 3 / Table 4 Markdown + JSON and the plot.

Exit codes: 0 a variant was selected (or a table/report written), 1 not achievable,
2 bad usage or missing/invalid evidence.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

__all__ = ["handler", "main", "register"]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "select",
        help="pick a diagnostic for a SIL and HFT from stored evidence",
        description="Pick the cheapest variant whose measured DC(ES) meets the IEC 61508-2 "
        "requirement for the SIL and HFT (type B element), from this device's evidence.",
    )
    p.add_argument("--sil", type=int, choices=(1, 2, 3, 4))
    p.add_argument("--hft", type=int, choices=(0, 1, 2))
    p.add_argument("--dims", required=True, help="MxNxK (or N for square, L1..L3)")
    p.add_argument("--budget", type=float, default=None, help="maximum overhead ratio (e.g. 1.5)")
    p.add_argument("--evidence", default="evidence", help="evidence root directory (default ./evidence)")
    p.add_argument("--device", default=None,
                   help="device name or directory under the root (default: this GPU, or the only one stored)")
    p.add_argument("--mode", choices=("exact", "fma", "any"), default="fma")
    p.add_argument("--table", action="store_true", help="print the whole SIL × HFT table")
    p.add_argument("--plot", default=None, help="write the DC-vs-overhead PNG here")
    p.add_argument("--report", default=None, help="write Table 3/4 (Markdown + JSON) and the plot here")
    p.set_defaults(handler=handler)


def handler(args: argparse.Namespace) -> int:
    from safemon.commands._common import current_device_name
    from safemon.faults.dims import parse_dims
    from safemon.faults.evidence import EvidenceError, EvidenceStore, dc_table_markdown, device_slug
    from safemon.faults.plot import plot_tradeoff, tradeoff_points
    from safemon.faults.select import select_variant, selection_table, selection_table_markdown

    try:
        dims = parse_dims(args.dims).key
        if not args.table and args.plot is None and args.report is None and (
                args.sil is None or args.hft is None):
            raise ValueError("give --sil and --hft (or --table / --plot / --report)")
        store = EvidenceStore(args.evidence)
        device = args.device or current_device_name()
        if device is None:
            devices = store.devices()
            if len(devices) != 1:
                raise EvidenceError(
                    f"no GPU here and {len(devices)} devices under {args.evidence} "
                    f"({', '.join(devices) or 'none'}): name one with --device")
            device = devices[0]
        slug = device_slug(device)
        dc = store.dc_records(slug)
        bench = store.bench_rows(slug)
    except (ValueError, EvidenceError) as exc:
        print(f"safemon select: {exc}", file=sys.stderr)
        return 2
    mode = None if args.mode == "any" else args.mode
    rc = 0
    if args.sil is not None and args.hft is not None:
        s = select_variant(args.sil, args.hft, dims, dc, bench, mode=mode, budget=args.budget)
        if s.achievable:
            print(f"SIL {args.sil}, HFT {args.hft}, {dims} on {slug}: {s.variant} "
                  f"(DC {s.dc_percent:.2f} %, overhead {s.overhead:.2f}×) — {s.reason}")
        else:
            print(f"SIL {args.sil}, HFT {args.hft}, {dims} on {slug}: {s.reason}")
            rc = 1
    table = selection_table(dims, dc, bench, mode=mode, budget=args.budget)
    table_md = selection_table_markdown(table)
    if args.table:
        print(table_md)
    points = tradeoff_points(dims, dc, bench, mode=mode)
    title = f"DC vs overhead at {dims} on {slug} (mode {args.mode})"
    try:
        if args.plot:
            print(f"wrote {plot_tradeoff(points, args.plot, title=title)}", file=sys.stderr)
        if args.report:
            out = Path(args.report)
            out.mkdir(parents=True, exist_ok=True)
            recs = [r for r in dc.values() if mode is None or r.mode == mode]
            (out / "table3_dc.md").write_text(
                f"# DC(ES) % on {slug}\n\n{dc_table_markdown(recs)}\n")
            (out / "table3_dc.json").write_text(json.dumps(
                [r.model_dump() for r in recs], indent=2) + "\n")
            (out / "table4_selection.md").write_text(f"# Selection on {slug}\n\n{table_md}\n")
            (out / "table4_selection.json").write_text(json.dumps([
                {"sil": s.requirement.sil, "hft": s.requirement.hft, "band": s.requirement.band,
                 "min_dc": s.requirement.min_dc, "dims": s.dims, "variant": s.variant,
                 "dc_percent": s.dc_percent, "overhead": s.overhead, "reason": s.reason}
                for s in table], indent=2) + "\n")
            if points:
                plot_tradeoff(points, out / "tradeoff.png", title=title)
            else:  # a report without overhead evidence for this mode still has its tables
                print("safemon select: no variant has both DC and overhead evidence at "
                      f"{dims}; no plot written", file=sys.stderr)
            print(f"wrote the report under {out}", file=sys.stderr)
    except ValueError as exc:
        print(f"safemon select: {exc}", file=sys.stderr)
        return 2
    return rc


def main(argv: list[str] | None = None) -> int:
    from safemon.commands._common import standalone

    return standalone(register, "select", argv)


if __name__ == "__main__":
    sys.exit(main())
