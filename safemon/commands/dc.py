"""`safemon dc`: bit-exhaustive single-bit input campaigns; DC(ES), visible, latent, escapes.

Exit codes: 0 done, 2 bad usage, 1 the device's clean run disagrees with the reference.
"""

from __future__ import annotations

import argparse
import platform
import sys
from typing import Any

from safemon.kernels.backend import BACKENDS, Backend

__all__ = ["handler", "main", "register"]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "dc",
        help="exhaustive single-bit input fault campaign (diagnostic coverage)",
        description="Flip every bit of every element of A and B, one at a time, and count how "
        "often the ES array (and C) differ from the golden run. Inputs are seeded standard normal.",
    )
    p.add_argument("--variants", default="standard",
                   help="comma list: ones/I, xor/E, xor_fletcher, ones/M/rmt-warp/abft, "
                   "unprotected/abft, ..., 'standard' (default: the ES catalog) or 'checked' "
                   "(the RMT/ABFT variants of docs/RMT.md; ABFT needs --backend cupy)")
    p.add_argument("--dims", default="20",
                   help="comma list of MxNxK, N (square) or L1/L2/L3; 'seed-dc' = the seed's six sizes")
    p.add_argument("--mode", choices=("exact", "fma"), default="exact")
    p.add_argument("--tile", default="auto", help="a tile name (catalog.NAMED_TILES) or auto (catalog.auto_tile by shape, level left out; "
                   "level T on its 16-wide k-tiles where the library runs them there)")
    p.add_argument("--backend", choices=BACKENDS, default="auto")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batch", type=int, default=None, help="copies per reference call / launch")
    p.add_argument("--json", dest="json_file", default=None, help="write the safemon.dc/2 evidence here")
    p.add_argument("--markdown", default=None, help="write the Table-3-style Markdown here")
    p.add_argument("--evidence", default=None, help="store the evidence per device under this directory")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--inkernel", type=int, default=0, metavar="N",
                   help="instead: N sampled in-kernel faults per variant (GPU; operand a/b, "
                   "accumulator, ES word), classified masked / detected / sdc")
    p.add_argument("--scope", choices=("transient", "thread", "block"), default="transient",
                   help="with --inkernel: transient, or permanent in one thread / one block")
    p.set_defaults(handler=handler)


def handler(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from safemon.commands._common import current_device_name
    from safemon.dims import parse_dims_list
    from safemon.errors import BackendUnavailableError
    from safemon.evidence.campaign import campaign_variants, run_input_campaign
    from safemon.evidence.store import (
        EvidenceStore,
        dc_evidence,
        dc_table_markdown,
        evidence_dict,
        write_evidence,
    )
    from safemon.faults.launch import GoldenMismatchError
    from safemon.kernels.backend import resolve_backend

    try:
        backend = resolve_backend(args.backend)
        dims_list = parse_dims_list(args.dims)
        jobs = []
        for dims in dims_list:
            jobs += [(v, dims) for v in campaign_variants(args.variants, args.mode, args.tile, dims)]
    except (ValueError, BackendUnavailableError) as exc:
        print(f"safemon dc: {exc}", file=sys.stderr)
        return 2
    if args.inkernel:
        return _inkernel(args, jobs, backend)
    device = current_device_name() if backend.on_device else None
    device = device or f"numpy reference ({platform.machine()})"
    results = []
    total = sum(d.input_bits for _, d in jobs)
    with tqdm(total=total, unit="flip", disable=args.no_progress, file=sys.stderr,
              dynamic_ncols=True) as bar:
        for variant, dims in jobs:
            bar.set_description(f"{dims.label} {variant.name}")
            try:
                results.append(run_input_campaign(
                    variant, dims, seed=args.seed, backend=backend, progress=bar.update,
                    batch=args.batch))
            except GoldenMismatchError as exc:
                print(f"safemon dc: {exc}", file=sys.stderr)
                return 1
    ev = dc_evidence(results, device=device, backend=backend.value, seed=args.seed)
    table = dc_table_markdown(ev.results)
    detail = _detail(evidence_dict(ev)["results"])
    print(f"DC(ES) % — {device}, backend {backend}, seed {args.seed}\n\n{table}\n\n{detail}")
    if args.json_file:
        write_evidence(ev, args.json_file)
    if args.markdown:
        with open(args.markdown, "w") as fh:
            fh.write(f"# DC(ES) %\n\n{device}; backend {backend}; seed {args.seed}; {ev.date}\n\n"
                     f"{table}\n\n## Detail\n\n{detail}\n")
    if args.evidence:
        for path in EvidenceStore(args.evidence).save_dc(ev):
            print(f"stored {path}", file=sys.stderr)
    return 0


def _inkernel(args: argparse.Namespace, jobs: list[Any], backend: Backend) -> int:
    """Sampled in-kernel campaigns: per variant the dangerous / detected / escaped / safe
    counts and the DC lower bound; `--json` / `--evidence` write `safemon.inkernel/2`."""
    from safemon.commands._common import current_device_name
    from safemon.evidence.inkernel import IN_KERNEL_TARGETS, run_inkernel_campaign
    from safemon.evidence.inkernel_schema import inkernel_evidence
    from safemon.evidence.store import EvidenceStore, write_evidence

    if not backend.on_device:
        print("safemon dc: --inkernel needs the cupy backend (the NumPy reference does not "
              "model register faults)", file=sys.stderr)
        return 2
    targets = IN_KERNEL_TARGETS if args.scope == "transient" else IN_KERNEL_TARGETS[:3]
    results = []
    for variant, dims in jobs:
        tg = targets if variant.words else tuple(t for t in targets if t != "es_word")
        results.append(run_inkernel_campaign(variant, dims, args.inkernel, seed=args.seed,
                                             targets=tg, scope=args.scope))
    ev = inkernel_evidence(results, device=current_device_name() or "unknown GPU")
    lines = ["| variant | size | sites | dangerous | detected | escapes | no effect | latent | "
             "safe (ES word) | DC % | DC 95 % lower % |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in ev.results:
        dc = "—" if r.dc_percent is None else f"{r.dc_percent:.2f}"
        lo = "—" if r.dc_lower_percent is None else f"{r.dc_lower_percent:.2f}"
        lines.append(f"| {r.name} | {r.dims} | {r.sites} | {r.dangerous} | {r.detected_dangerous} | "
                     f"{r.escapes} | {r.no_effect} | {r.latent} | {r.safe_es_word} | {dc} | {lo} |")
    print(f"In-kernel faults ({args.scope}), {args.inkernel} sites per variant, {ev.device}, "
          f"{ev.date}\n")
    print("\n".join(lines))
    if args.json_file:
        write_evidence(ev, args.json_file)
    if args.evidence:
        for path in EvidenceStore(args.evidence).save_inkernel(ev):
            print(f"stored {path}", file=sys.stderr)
    return 0


def _detail(rows: list[dict[str, Any]]) -> str:
    lines = ["| variant | size | injections | DC(ES) % | visible % | latent % | escapes % | s |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(
            f"| {r['name']} | {r['dims']} | {r['injections']} | {r['dc_percent']:.2f} | "
            f"{r['visible_percent']:.2f} | {r['latent_percent']:.2f} | {r['escapes_percent']:.3f} | "
            f"{r['seconds']:.1f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from safemon.commands._common import standalone

    return standalone(register, "dc", argv)


if __name__ == "__main__":
    sys.exit(main())
