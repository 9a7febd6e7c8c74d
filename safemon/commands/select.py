"""`safemon select`: the cheapest variant whose every DC lower bound meets a SIL/HFT requirement.

Reads the evidence stored for one device (`safemon dc --evidence DIR`, `safemon dc --inkernel
N --scope S --evidence DIR`, `safemon bench --evidence DIR`) and applies the rule of
`safemon.evidence.select`: a variant's DC is the minimum of the input-flip DC and its three
in-kernel DCs, each as a one-sided 95 % Clopper–Pearson lower bound. Without `--evidence` the
newest committed set of the source checkout is used (`safemon.evidence.committed`; the
command says which). `--config FILE` checks a deployment instead of choosing: every channel's
configured variant at every `--dims`, against the SIL and the HFT of the configured policy.
`--json` prints every DC figure with its bound and campaign size. `--table` prints the whole
SIL × HFT table (the seed's Table 4); `--plot` / `--report DIR` write the trade-off plot and
Table 3 / Table 4 (Markdown + JSON).

Exit codes: 0 selected / the deployment meets the SIL (or a table/report written), 1 not
achievable / the deployment falls short, 2 bad usage or missing/invalid evidence.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

__all__ = ["handler", "main", "register"]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "select",
        help="pick (or check) a diagnostic for a SIL and HFT from stored evidence",
        description="Pick the cheapest variant whose input-flip and in-kernel DC lower bounds all "
        "meet the IEC 61508-2 requirement for the SIL and HFT (type B element), from this "
        "device's evidence; or, with --config, check a deployment's configured variant.",
    )
    p.add_argument("--sil", type=int, choices=(1, 2, 3, 4))
    p.add_argument("--hft", type=int, choices=(0, 1, 2))
    p.add_argument("--dims", required=True,
                   help="MxNxK (or N for square, L1..L3); with --config a comma list of the "
                   "deployment's sizes")
    p.add_argument("--config", default=None, help="check this deployment config instead of choosing")
    p.add_argument("--budget", type=float, default=None, help="maximum overhead ratio (e.g. 1.5)")
    p.add_argument("--evidence", default=None,
                   help="evidence store root (default: the newest committed set of this checkout)")
    p.add_argument("--device", default=None,
                   help="device name or directory under the root (default: this GPU, or the only one stored)")
    p.add_argument("--mode", choices=("exact", "fma", "any"), default="any")
    p.add_argument("--json", action="store_true", help="print the answer and every DC figure as JSON")
    p.add_argument("--table", action="store_true", help="print the whole SIL × HFT table")
    p.add_argument("--plot", default=None, help="write the DC-vs-overhead PNG here")
    p.add_argument("--report", default=None, help="write Table 3/4 (Markdown + JSON) and the plot here")
    p.set_defaults(handler=handler)


class _Evidence:
    """One device's evidence, loaded once."""

    def __init__(self, root: Path, slug: str, origin: str) -> None:
        from safemon.evidence.store import EvidenceStore

        store = EvidenceStore(root)
        self.root, self.slug, self.origin = root, slug, origin
        self.dc = store.dc_records(slug)
        self.bench = store.bench_rows(slug)
        self.inkernel = store.inkernel_records(slug)


def _load(args: argparse.Namespace) -> _Evidence:
    from safemon.commands._common import current_device_name
    from safemon.evidence.committed import find_committed_store
    from safemon.evidence.store import EvidenceError, EvidenceStore, device_slug

    device = args.device or current_device_name()
    if args.evidence is None:
        found = find_committed_store(device)
        return _Evidence(found.root, found.device, found.origin)
    if device is None:
        devices = EvidenceStore(args.evidence).devices()
        if len(devices) != 1:
            raise EvidenceError(
                f"no GPU here and {len(devices)} devices under {args.evidence} "
                f"({', '.join(devices) or 'none'}): name one with --device")
        device = devices[0]
    return _Evidence(Path(args.evidence), device_slug(device), f"--evidence {args.evidence}")


def handler(args: argparse.Namespace) -> int:
    from safemon.dims import parse_dims
    from safemon.evidence.store import EvidenceError

    try:
        dims_list = [parse_dims(d).key for d in args.dims.split(",")]
        if args.config is None and len(dims_list) != 1:
            raise ValueError("give one --dims when choosing (a comma list only with --config)")
        if args.config is not None and args.sil is None:
            raise ValueError("--config needs --sil")
        if args.config is None and not args.table and args.plot is None and args.report is None and (
                args.sil is None or args.hft is None):
            raise ValueError("give --sil and --hft (or --config / --table / --plot / --report)")
        ev = _load(args)
    except (ValueError, EvidenceError) as exc:
        print(f"safemon select: {exc}", file=sys.stderr)
        return 2
    print(f"safemon select: evidence for {ev.slug} from the {ev.origin}", file=sys.stderr)
    if args.config is not None:
        from safemon.commands.select_check import check_deployment

        return check_deployment(args, ev, dims_list)
    return _choose(args, ev, dims_list[0])


def _choose(args: argparse.Namespace, ev: _Evidence, dims: str) -> int:
    from safemon.evidence.select import select_variant, selection_table

    mode = None if args.mode == "any" else args.mode
    rc = 0
    if args.sil is not None and args.hft is not None:
        s = select_variant(args.sil, args.hft, dims, ev.dc, ev.bench, ev.inkernel, mode=mode,
                           budget=args.budget)
        if args.json:
            print(json.dumps(selection_dict(s, ev), indent=2))
        elif s.achievable:
            print(f"SIL {args.sil}, HFT {args.hft}, {dims} on {ev.slug}: {s.variant} "
                  f"(DC ≥ {s.dc_percent:.2f} % at 95 % confidence, overhead {s.overhead:.2f}×, "
                  f"{s.vs_cublas:.2f}× cuBLAS's time) "
                  f"— {s.reason}")
        else:
            print(f"SIL {args.sil}, HFT {args.hft}, {dims} on {ev.slug}: {s.reason}")
        rc = 0 if s.achievable else 1
    table = selection_table(dims, ev.dc, ev.bench, ev.inkernel, mode=mode, budget=args.budget)
    try:
        _outputs(args, ev, dims, mode, table)
    except ValueError as exc:
        print(f"safemon select: {exc}", file=sys.stderr)
        return 2
    return rc


def selection_dict(s: Any, ev: _Evidence) -> dict[str, Any]:
    """The JSON form of a `Selection`: the answer, the chosen variant's four figures with
    bounds and campaign sizes, and the variants set aside for missing evidence."""
    req = s.requirement
    return {
        "sil": req.sil, "hft": req.hft, "band": req.band, "min_dc_percent": req.min_dc,
        "dims": s.dims, "device": ev.slug, "evidence": str(ev.root),
        "achievable": s.achievable, "variant": s.variant, "selection_dc_percent": s.dc_percent,
        "overhead": s.overhead, "vs_cublas": s.vs_cublas, "reason": s.reason,
        "coverage": None if s.coverage is None else s.coverage.as_dict(),
        "not_selectable": [{"variant": b.name, "missing": list(b.missing),
                            "run": b.missing_campaigns(str(ev.root))} for b in s.blind],
    }


def _outputs(args: argparse.Namespace, ev: _Evidence, dims: str, mode: str | None,
             table: list[Any]) -> None:
    from safemon.evidence.plot import plot_tradeoff, tradeoff_points
    from safemon.evidence.seed_table3 import table3_vs_seed
    from safemon.evidence.select import selection_table_markdown
    from safemon.evidence.store import dc_table_markdown

    table_md = selection_table_markdown(table)
    if args.table:
        print(table_md)
    points = tradeoff_points(dims, ev.dc, ev.bench, ev.inkernel, mode=mode)
    title = f"selection DC vs overhead at {dims} on {ev.slug} (mode {args.mode})"
    ylabel = "DC %: min of input-flip and in-kernel 95 % lower bounds"
    if args.plot:
        print(f"wrote {plot_tradeoff(points, args.plot, title=title, ylabel=ylabel)}", file=sys.stderr)
    if not args.report:
        return
    out = Path(args.report)
    out.mkdir(parents=True, exist_ok=True)
    recs = [r for r in ev.dc.values() if mode is None or r.mode == mode]
    (out / "table3_dc.md").write_text(f"# DC(ES) % on {ev.slug}\n\n{dc_table_markdown(recs)}\n")
    (out / "table3_dc.json").write_text(json.dumps([r.model_dump() for r in recs], indent=2) + "\n")
    (out / "table3_vs_seed.md").write_text(
        f"# DC(ES) % on {ev.slug} beside the seed's GPU column (Δ = ours − seed; ** over 5 "
        f"points)\n\n{table3_vs_seed(recs)}\n")
    (out / "table4_selection.md").write_text(f"# Selection on {ev.slug}\n\n{table_md}\n")
    (out / "table4_selection.json").write_text(
        json.dumps([selection_dict(s, ev) for s in table], indent=2) + "\n")
    if points:
        plot_tradeoff(points, out / "tradeoff.png", title=title, ylabel=ylabel)
    else:  # a report without complete evidence for this mode still has its tables
        print("safemon select: no variant has DC, in-kernel and overhead evidence at "
              f"{dims}; no plot written", file=sys.stderr)
    print(f"wrote the report under {out}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    from safemon.commands._common import standalone

    return standalone(register, "select", argv)


if __name__ == "__main__":
    sys.exit(main())
