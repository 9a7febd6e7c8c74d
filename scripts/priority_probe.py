"""Device probe: do CUDA stream priorities let a 2oo3 quorum of inline channels end first?

    python3 scripts/priority_probe.py [--rounds 6] [--reps 20] [--hidden 4096] [--batch 64]

Inline channels run their passes side by side, one CUDA stream each, and the daemon answers
a 2oo3 vote once two results agree (docs/RUNTIME.md, "Answering at the quorum"). This probe
times the issue-16 MLP's three captured channel passes side by side on ECC weights, as
`safemon bench vote --runtime` does (`bench.runtime._three_captured_passes`, which checks
every pass's digests against a pass run by hand), in alternating rounds:
- "equal": all three streams at CUDA's default priority (main before the rule);
- "quorum first": the priorities `safemon.channels.stream_priority` gives an all-inline 2oo3
  deployment (the first two streams at the greatest priority, the third at the least).
Per arm it reports the median time until the first two passes are done (when a quorum could
be answered) and until all three are (when the lockstep round ends), with the back-to-back
passes for scale (`safemon bench vote --runtime` times the cupy.matmul forward). Nothing
is asserted.
"""

from __future__ import annotations

import argparse
import datetime
import statistics

import cupy as cp
import numpy as np

from safemon.bench.runtime import ModelShape, _model_operands, _three_captured_passes
from safemon.channels.stream_priority import device_priority_range, stream_priority
from safemon.config import Config, VariantConfig
from safemon.ecc import ProtectedArray
from safemon.kernels.backend import Backend


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--batch", type=int, default=64)
    args = ap.parse_args()
    h, m = args.hidden, args.batch
    # the runtime bench's MLP operands (4 gelu layers with biases)
    layers, hosts, x_host = _model_operands(ModelShape(batch=m, hidden=h),
                                            np.random.default_rng(0))
    kept = {k: ProtectedArray.from_host(w, name=k, backend=Backend.CUPY)
            for k, w in hosts.items()}
    x = cp.asarray(x_host)
    vc = VariantConfig()
    least, greatest = device_priority_range()
    inline = Config.model_validate({"channels": [{"name": f"c{i}", "placement": "inline"}
                                                 for i in range(3)]})
    arms: dict[str, list[int] | None] = {
        "equal": None,
        "quorum first": [stream_priority(inline, f"c{i}", least, greatest) for i in range(3)],
    }
    rows: dict[str, list[float]] = {}
    for r in range(args.rounds):
        names = list(arms) if r % 2 == 0 else list(arms)[::-1]
        for name in names:
            two: list[float] = []
            serial, side = _three_captured_passes(cp, layers, kept, x, vc, args.reps, 3,
                                                  priorities=arms[name], two_done=two)
            rows.setdefault(f"{name}: first two side by side done", []).extend(
                s * 1e6 for s in two)
            rows.setdefault(f"{name}: all three side by side done", []).extend(
                s * 1e6 for s in side)
            rows.setdefault(f"{name}: three back to back (one stream)", []).extend(
                s * 1e6 for s in serial)
        print(f"round {r + 1} of {args.rounds} done", flush=True)
    name = cp.cuda.runtime.getDeviceProperties(0)["name"]
    name = name.decode() if isinstance(name, bytes) else name
    print(f"# Stream priorities and the MLP's captured passes: {name}, "
          f"{datetime.datetime.now(datetime.UTC):%Y-%m-%dT%H:%MZ}; batch {m}, hidden {h}, "
          f"4 layers (gelu, biases), ECC weights, variant {vc.checksum}/{vc.level}/{vc.mode}; "
          f"priority range least {least}, greatest {greatest}; quorum first = "
          f"{arms['quorum first']}; {args.rounds} rounds alternating, medians and p99 (µs)\n")
    print("| row | p50 µs | p99 µs |")
    print("|---|---:|---:|")
    for row, values in rows.items():
        p99 = float(np.percentile(values, 99))
        print(f"| {row} | {statistics.median(values):,.0f} | {p99:,.0f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
