"""`safemon audit`: kernel audits behind bit-exact voting (docs/AUDIT.md).

- `safemon audit ptx`: static, no GPU. Compiles every shipped build (or `--source FILE.cu`)
  to PTX with nvcc and the run-time flags and checks barriers/races, fma in exact builds,
  float atomics, `.ftz` and global-store containment. Exit 0 clean, 1 on a finding, 2 on bad
  usage or when nvcc fails.
- `safemon audit determinism`: GPU. Runs every shipped MMM variant many times, alone and
  under concurrent load, and records block start orders, with a float-atomic contrast and
  CuPy/cuBLAS references. Exit 0 when every shipped variant was bit-identical, 1 otherwise,
  2 without a device.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from safemon.kernels.compiler import KernelBuild

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("audit", help="kernel audits: PTX barriers/races (static), determinism (GPU)",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="audit_command", metavar="AUDIT")
    ptx = sub.add_parser("ptx", help="static PTX audit of every shipped build (nvcc, no GPU)")
    ptx.add_argument("--source", type=Path, default=None, help="audit this .cu file instead")
    ptx.add_argument("-D", "--define", action="append", default=[], metavar="NAME=VALUE",
                     help="with --source: a preprocessor define (repeatable)")
    ptx.add_argument("--mode", choices=("exact", "fma"), default="exact",
                     help="with --source: exact compiles with --fmad=false and forbids fma")
    ptx.add_argument("--nvcc", default="nvcc")
    ptx.add_argument("--arch", default="sm_90")
    ptx.add_argument("--jobs", type=int, default=2, help="nvcc processes at a time")
    ptx.add_argument("--max-print", type=int, default=50, help="findings printed (all go to --json)")
    ptx.add_argument("--json", dest="json_file", default=None, help="write the report here ('-': stdout)")
    ptx.set_defaults(handler=_ptx)
    det = sub.add_parser("determinism", help="run-to-run determinism and block orderings on the GPU")
    det.add_argument("--repeats", type=int, default=40, help="runs per variant and condition")
    det.add_argument("--size", type=int, default=512, help="M = N = K of the MMM runs")
    det.add_argument("--out", type=Path, default=Path("out/audit-determinism"),
                     help="directory for determinism.json and the plot")
    det.add_argument("--no-process-load", action="store_true", help="load only from other streams")
    det.set_defaults(handler=_determinism)

    def usage(_args: argparse.Namespace) -> int:
        p.print_help(sys.stderr)
        return 2

    p.set_defaults(handler=usage)


def _source_build(args: argparse.Namespace) -> KernelBuild:
    defines: dict[str, str] = {}
    for d in args.define:
        name, sep, value = d.partition("=")
        if not name:
            raise ValueError(f"bad define {d!r}; expected NAME=VALUE")
        defines[name] = value if sep else "1"
    fmad = "--fmad=false" if args.mode == "exact" else "--fmad=true"
    return KernelBuild.make(args.source.resolve(), defines, (fmad,))


def _ptx(args: argparse.Namespace) -> int:
    from safemon.audit.builds import NvccError, shipped_builds
    from safemon.audit.ptx import PtxParseError
    from safemon.audit.ptx_audit import audit_builds

    try:
        if args.source is not None:
            if not args.source.is_file():
                raise ValueError(f"no such file: {args.source}")
            builds = [_source_build(args)]
        else:
            builds = shipped_builds()
        reports = audit_builds(builds, nvcc=args.nvcc, arch=args.arch, jobs=args.jobs)
    except (ValueError, NvccError, PtxParseError) as exc:
        print(f"safemon audit ptx: {exc}", file=sys.stderr)
        return 2
    findings = [f for r in reports for f in r.findings]
    for r in reports:
        status = f"{len(r.findings)} finding(s)" if r.findings else "clean"
        print(f"{r.build}: {', '.join(r.kernels)} ({'exact' if r.exact else 'fma'}): {status}")
    for f in findings[:max(0, args.max_print)]:
        print(f.describe())
    if len(findings) > args.max_print:
        print(f"... {len(findings) - args.max_print} more (see --json)")
    print(f"safemon audit ptx: {len(reports)} build(s), {len(findings)} finding(s)")
    if args.json_file:
        doc = {"schema": "safemon.audit.ptx/1", "arch": args.arch,
               "builds": [r.as_dict() for r in reports], "findings": len(findings)}
        text = json.dumps(doc, indent=2)
        if args.json_file == "-":
            print(text)
        else:
            Path(args.json_file).write_text(text + "\n")
    return 1 if findings else 0


def _determinism(args: argparse.Namespace) -> int:
    from safemon.audit.determinism_run import run_determinism
    from safemon.errors import BackendUnavailableError

    try:
        doc = run_determinism(repeats=args.repeats, size=args.size, out_dir=args.out,
                              process_load=not args.no_process_load)
    except (ValueError, BackendUnavailableError) as exc:
        print(f"safemon audit determinism: {exc}", file=sys.stderr)
        return 2
    bad = [v["build"] for v in doc["variants"] if v["differing_max"] != 0]
    print(f"safemon audit determinism: {len(doc['variants'])} shipped build(s), "
          f"{len(bad)} not bit-identical{': ' + ', '.join(bad) if bad else ''}; "
          f"evidence in {args.out}")
    return 1 if bad else 0


if __name__ == "__main__":
    from safemon.commands._common import standalone

    raise SystemExit(standalone(register, "audit"))
