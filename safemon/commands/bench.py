"""`safemon bench [kernels]`: overhead of every variant vs the unprotected kernel and cuBLAS
(GPU only). `safemon bench vote`: the 2oo3 round trip through a real daemon (any backend).

Exit codes: 0 done, 1 the vote benchmark's daemon failed, 2 bad usage or no usable GPU.
"""

from __future__ import annotations

import argparse
import sys

from safemon.kernels.backend import BACKENDS

__all__ = ["QUICK_DIMS", "handler", "main", "register"]

#: `--quick`: the seed's 80² and the 1024³ throughput size, fma mode, 30 repeats.
QUICK_DIMS = "80,1024"


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "bench",
        help="overhead benchmark: protected vs unprotected vs cuBLAS",
        description="kernels (default): median kernel times (CUDA events, warm-up) of every "
        "standard variant at each size, against the unprotected kernel of the same block tile and "
        "K-slices and "
        "cupy.matmul, measured in the same run; clocks are recorded, never changed. "
        "vote: 2oo3 round trips through a real daemon with three channel processes, over ipc "
        "and tcp+CURVE, against the kernel called directly and a bare ZeroMQ echo.",
    )
    p.add_argument("target", nargs="?", choices=("kernels", "vote"), default="kernels",
                   help="what to benchmark (default: kernels)")
    p.add_argument("--dims", default="bench",
                   help="comma list of MxNxK / N / L91; 'bench' = 80,160,320,L91,1024,4096, "
                   "1x4096x4096,64x4096x4096,256x1024x4096 (default)")
    p.add_argument("--api-dims", default="bench",
                   help="sizes of the API wall-time section (safemon.matmul / protected_matmul "
                   "against cupy.matmul, device arrays); 'none' skips it (default: bench)")
    p.add_argument("--api-repeats", type=int, default=200,
                   help="calls per API median (fewer at ≥ 2**30 MACs)")
    p.add_argument("--modes", default="fma,exact", help="comma list of fma, exact")
    p.add_argument("--variants", default="standard",
                   help="comma list of variant labels (ones/I, xor_fletcher, ones/M/abft, "
                   "unprotected/rmt-warp, ...) or 'standard' (the ES catalog and the RMT/ABFT "
                   "variants of docs/RMT.md)")
    p.add_argument("--repeats", type=int, default=100, help="runs per median (a tenth, ≥ 10, at 4096³)")
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--quick", action="store_true",
                   help=f"sizes {QUICK_DIMS}, fma only, 30 repeats, small ECC section")
    p.add_argument("--no-ecc", action="store_true", help="skip the ECC section")
    v = p.add_argument_group("vote options")
    v.add_argument("--sizes", default=None,
                   help="comma list of MxNxK (or N) for `vote` (default: 80x80x80,1024x1024x64 "
                        "on a GPU, 80x80x80 on the NumPy backend)")
    v.add_argument("--requests", type=int, default=1000,
                   help="timed round trips per size (outputs over 512² get a tenth)")
    v.add_argument("--transports", default="ipc,tcp", help="comma list of ipc, tcp")
    v.add_argument("--backend", default="auto", choices=BACKENDS)
    v.add_argument("--depth", type=int, default=8, help="requests in flight when pipelined")
    v.add_argument("--plot", default=None, help="write the round-trip CDF (PNG) here")
    v.add_argument("--runtime", action="store_true",
                   help="device-resident (CuPy) requests and whole-model requests per channel "
                        "placement, with in-process baselines (safemon.bench.runtime)")
    v.add_argument("--channel-variant", default="",
                   help="--runtime: the channels' variant, CHECKSUM/LEVEL/MODE or "
                        "unprotected/MODE (default: the daemon's, ones/T/fma)")
    v.add_argument("--paths", default="cuda-ipc,host",
                   help="--runtime: comma list of cuda-ipc (the client's CUDA IPC buffers, "
                        "digests over ZeroMQ), host (arrays through host memory)")
    v.add_argument("--placements", default="process,stream,inline",
                   help="--runtime: comma list of process, stream, inline "
                        "(default: %(default)s)")
    v.add_argument("--model", default="64x4096x4",
                   help="--runtime: BATCHxHIDDENxLAYERS of the MLP (default: %(default)s)")
    v.add_argument("--model-requests", type=int, default=30, help="--runtime: timed model runs")
    p.add_argument("--json", dest="json_file", default=None, help="write safemon.bench/2 evidence here")
    p.add_argument("--markdown", default=None, help="write the Markdown report here")
    p.add_argument("--evidence", default=None, help="store the evidence per device under this directory")
    p.set_defaults(handler=handler)


def handler(args: argparse.Namespace) -> int:
    if args.target == "vote":
        return _vote(args)
    return _kernels(args)


def _runtime(args: argparse.Namespace) -> int:
    from safemon.bench.runtime import ModelShape, run_runtime_bench, runtime_markdown
    from safemon.bench.vote import DEVICE_SIZES, parse_sizes, write_evidence
    from safemon.errors import BackendUnavailableError, SafemonError

    try:
        sizes = parse_sizes(args.sizes or DEVICE_SIZES, args.requests)
        batch, hidden, layers = (int(v) for v in args.model.lower().split("x"))
        ev = run_runtime_bench(
            sizes=sizes, model=ModelShape(batch, hidden, layers),
            placements=[p.strip() for p in args.placements.split(",") if p.strip()],
            paths=[p.strip() for p in args.paths.split(",") if p.strip()],
            variant=args.channel_variant,
            warmup=args.warmup, model_requests=args.model_requests,
            progress=lambda s: print(f"bench vote --runtime: {s}", file=sys.stderr, flush=True))
    except (ValueError, BackendUnavailableError) as exc:
        print(f"safemon bench vote --runtime: {exc}", file=sys.stderr)
        return 2
    except SafemonError as exc:
        print(f"safemon bench vote --runtime: failed: {exc}", file=sys.stderr)
        return 1
    _report(runtime_markdown(ev), "Runtime benchmark (device-resident, whole-model)",
            args.markdown)
    if args.json_file:
        write_evidence(ev, args.json_file)
    return 0


def _vote(args: argparse.Namespace) -> int:
    if args.runtime:
        return _runtime(args)
    from safemon.bench.vote import (
        default_sizes,
        parse_sizes,
        plot_round_trips,
        run_vote_bench,
        vote_markdown,
        write_evidence,
    )
    from safemon.errors import BackendUnavailableError, SafemonError

    try:
        sizes = parse_sizes(args.sizes or default_sizes(args.backend), args.requests)
        transports = [t.strip() for t in args.transports.split(",") if t.strip()]
        ev = run_vote_bench(
            sizes=sizes, transports=transports, backend=args.backend, warmup=args.warmup,
            depth=args.depth,
            progress=lambda s: print(f"bench vote: {s}", file=sys.stderr, flush=True),
        )
    except (ValueError, BackendUnavailableError) as exc:
        print(f"safemon bench vote: {exc}", file=sys.stderr)
        return 2
    except SafemonError as exc:
        print(f"safemon bench vote: failed: {exc}", file=sys.stderr)
        return 1
    _report(vote_markdown(ev), "Vote round-trip benchmark", args.markdown)
    if args.json_file:
        write_evidence(ev, args.json_file)
    if args.plot:
        plot_round_trips(ev, args.plot)
    return 0


def _report(markdown: str, title: str, path: str | None) -> None:
    """Print the Markdown report; also write it, under `title`, to `path` when given."""
    print(markdown)
    if path:
        with open(path, "w") as fh:
            fh.write(f"# {title}\n\n{markdown}\n")


def _kernels(args: argparse.Namespace) -> int:
    from safemon.bench.overhead import bench_markdown, run_bench
    from safemon.dims import BENCH_DIMS, parse_dims_list
    from safemon.errors import BackendUnavailableError
    from safemon.evidence.campaign import variant_label
    from safemon.evidence.store import EvidenceStore, write_evidence
    from safemon.kernels.catalog import MODES, Variant

    try:
        dims = parse_dims_list(QUICK_DIMS if args.quick and args.dims == "bench" else args.dims)
        modes = ["fma"] if args.quick and args.modes == "fma,exact" else [
            m.strip() for m in args.modes.split(",") if m.strip()]
        for m in modes:
            if m not in MODES:
                raise ValueError(f"unknown mode {m!r}; known: {', '.join(MODES)}")
        repeats = 30 if args.quick and args.repeats == 100 else args.repeats
        wanted = None if args.variants == "standard" else {
            s.strip() for s in args.variants.split(",") if s.strip()}

        def keep(v: Variant) -> bool:
            return wanted is None or variant_label(v) in wanted

        api_text = QUICK_DIMS if args.quick and args.api_dims == "bench" else args.api_dims
        api_dims = [] if api_text == "none" else parse_dims_list(api_text)
        ev = run_bench(
            dims_list=dims, modes=modes, variant_filter=keep, repeats=repeats,
            api_dims=api_dims, api_repeats=args.api_repeats,
            warmup=args.warmup, ecc=not args.no_ecc,
            ecc_sizes_mib=(64,) if args.quick else (64, 256),
            ecc_dims=(BENCH_DIMS["1024"],) if args.quick else (BENCH_DIMS["1024"], BENCH_DIMS["4096"]),
            progress=lambda s: print(f"bench: {s}", file=sys.stderr, flush=True),
        )
    except (ValueError, BackendUnavailableError) as exc:
        print(f"safemon bench: {exc}", file=sys.stderr)
        return 2
    _report(bench_markdown(ev), "Overhead benchmark", args.markdown)
    if args.json_file:
        write_evidence(ev, args.json_file)
    if args.evidence:
        print(f"stored {EvidenceStore(args.evidence).save_bench(ev)}", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    from safemon.commands._common import standalone

    return standalone(register, "bench", argv)


if __name__ == "__main__":
    sys.exit(main())
