"""How long nvcc takes to compile a variant's production build, as CI compiles it.

usage: python3 scripts/compile_time.py [-D NAME=VALUE ...] SPEC [SPEC ...]

SPEC is a variant name (`Variant.name`, e.g. crc32c/I/exact/skinny or unprotected/fma/large;
`catalog.variant_from_name` reads it). -D sets a define in every build (e.g. KSTEP_ROLLED=0 for
mmm.cu's unrolled k steps). Prints one line per build: seconds of `nvcc -arch=sm_90 -cubin` (safemon.kernels.nvcc_check.compile_one) and
its exit status. One build at a time, so that the times do not compete with each other.
"""

from __future__ import annotations

import argparse
import subprocess
import time
from dataclasses import replace

from safemon.kernels.catalog import variant_from_name
from safemon.kernels.gpu import build_for
from safemon.kernels.nvcc_check import compile_one


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("specs", nargs="+")
    ap.add_argument("-D", dest="defines", action="append", default=[])
    ap.add_argument("--nvcc", default="nvcc")
    args = ap.parse_args()
    extra = dict(d.split("=", 1) for d in args.defines)
    version = subprocess.run([args.nvcc, "--version"], capture_output=True, text=True).stdout
    print(f"nvcc: {version.strip().splitlines()[-1]}; defines {extra or 'none'}")
    worst = 0
    for spec in args.specs:
        build = build_for(variant_from_name(spec))
        defines = dict(build.defines) | extra
        build = replace(build, defines=tuple(sorted(defines.items())))
        start = time.perf_counter()
        _, rc, _ = compile_one(args.nvcc, build, "sm_90")
        print(f"{spec:32s} {time.perf_counter() - start:7.1f} s  rc={rc}", flush=True)
        worst = max(worst, rc)
    return worst


if __name__ == "__main__":
    raise SystemExit(main())
