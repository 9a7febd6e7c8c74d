"""Device probe: the read-only (39,32) ECC check on tensor cores against the scalar one.

    python3 scripts/ecc_check_probe.py [--mib 1,16,64,256] [--rounds 7] [--reps 30] [--json OUT]

Every protected product on an ECC weight runs the check first (`ProtectedArray.launch_check`
→ `safemon.ecc.gpu.count_errors_device`). The scalar kernel (`ecc32_check`) spends seven
POPCs per word; `ecc32_check_tc` computes the same check bits with single-bit MMAs (ecc.cu,
`check32_tc_impl`). This probe times both on the same buffers, CUDA events around each
launch, in interleaved rounds (median of the rounds' medians), with the read bandwidth the
time implies (data plus check bytes), and checks that both count 0 on the clean buffer and
the same count after flipping bits in 1,000 random words. Nothing is asserted beyond that.
"""

from __future__ import annotations

import argparse
import json
import statistics
from datetime import UTC, datetime
from pathlib import Path

import cupy as cp
import numpy as np

from safemon.ecc.code import n_check_words
from safemon.ecc.gpu import BLOCK, _grid_for, _launch, encode_device


def _time_us(fn, reps: int) -> float:
    out = []
    for _ in range(reps):
        s, e = cp.cuda.Event(), cp.cuda.Event()
        s.record()
        fn()
        e.record()
        e.synchronize()
        out.append(cp.cuda.get_elapsed_time(s, e) * 1e3)
    return statistics.median(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mib", default="1,16,64,256")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    k = _launch(cp, 32)
    if k.check_tc is None:
        raise SystemExit("no tensor-core check on this device (compute capability < 8.0)")
    name = cp.cuda.runtime.getDeviceProperties(0)["name"]
    name = name.decode() if isinstance(name, bytes) else name
    report: dict = {"device": name, "date": datetime.now(UTC).isoformat(timespec="seconds"),
                    "rounds": args.rounds, "reps": args.reps, "sizes": {}}
    print(f"# {name}, {report['date']}: (39,32) check kernel µs, medians of {args.rounds} "
          "interleaved rounds")
    rng = np.random.default_rng(0)
    for mib in (int(v) for v in args.mib.split(",")):
        nbytes = mib << 20
        data = cp.asarray(rng.standard_normal(nbytes // 4, dtype=np.float32))
        check = encode_device(data, 32)
        ngroups = n_check_words(nbytes, 32)
        nerr = cp.zeros(1, dtype=cp.uint64)
        call = {
            "scalar": lambda: k.check((_grid_for(k, (ngroups + k.unroll - 1) // k.unroll),),
                                      (BLOCK,), (data, np.uint64(nbytes), check,
                                                 np.uint64(ngroups), nerr)),
            "tensor": lambda: k.check_tc((_grid_for(k, ngroups),), (BLOCK,),
                                         (data, np.uint64(nbytes), check, np.uint64(ngroups),
                                          nerr)),
        }
        counts = {}
        for kind, fn in call.items():
            nerr[...] = 0
            fn()
            counts[kind] = int(nerr.get()[0])
        words = rng.choice(nbytes // 4, size=1000, replace=False)
        flat = data.view(cp.uint32)
        flat[cp.asarray(words)] ^= cp.uint32(1 << 9)
        for kind, fn in call.items():
            nerr[...] = 0
            fn()
            counts[kind + " after 1000 flips"] = int(nerr.get()[0])
        flat[cp.asarray(words)] ^= cp.uint32(1 << 9)
        per_round: dict[str, list[float]] = {kind: [] for kind in call}
        for r in range(args.rounds):
            for kind in (list(call) if r % 2 == 0 else list(call)[::-1]):
                per_round[kind].append(_time_us(call[kind], args.reps))
        med = {kind: statistics.median(v) for kind, v in per_round.items()}
        moved = nbytes * 1.25  # data and one check byte per word
        report["sizes"][mib] = {"median_us": med, "counts": counts,
                                "read_gb_per_s": {kd: moved / us / 1e3 for kd, us in med.items()}}
        print(f"{mib:5d} MiB  scalar {med['scalar']:8.1f} µs ({moved / med['scalar'] / 1e3:6.0f} GB/s)"
              f"  tensor {med['tensor']:8.1f} µs ({moved / med['tensor'] / 1e3:6.0f} GB/s)"
              f"  {med['scalar'] / med['tensor']:.2f}x  counts {counts}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
