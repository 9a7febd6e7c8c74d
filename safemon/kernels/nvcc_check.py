"""Compile every CUDA build with nvcc, as CI does: `python -m safemon.kernels.nvcc_check`.

Each build is compiled to a cubin for sm_90 with exactly the defines and flags NVRTC gets at
run time (`KernelBuild.flags()`), so a CUDA syntax or type error fails CI on a machine without a
GPU. It also refuses a `.cu` file in the package that no build compiles.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from safemon.kernels.compiler import KernelBuild

PACKAGE_ROOT = Path(__file__).resolve().parent.parent


def shipped_builds() -> list[KernelBuild]:
    """The builds safemon loads at run time (the PTX audit, `safemon audit ptx`, covers these)."""
    from safemon.ecc.gpu import nvcc_builds as ecc_builds
    from safemon.kernels.gpu import nvcc_builds as mmm_builds
    from safemon.kernels.model_gpu import nvcc_builds as model_builds

    return mmm_builds() + ecc_builds() + model_builds()


def all_builds() -> list[KernelBuild]:
    """The shipped builds and the audit-only instrumentation kernels of `safemon.audit`."""
    from safemon.audit.kernels import nvcc_builds as audit_builds

    return shipped_builds() + audit_builds()


def compile_one(nvcc: str, build: KernelBuild, arch: str) -> tuple[KernelBuild, int, str]:
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [nvcc, f"-arch={arch}", "-cubin", "-o", str(Path(tmp) / "out.cubin"),
               *build.flags(), str(build.source)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        return build, proc.returncode, proc.stdout + proc.stderr


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nvcc", default="nvcc")
    parser.add_argument("--arch", default="sm_90")
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args(argv)
    builds = all_builds()
    sources = {b.source.resolve() for b in builds}
    orphans = sorted(p for p in PACKAGE_ROOT.rglob("*.cu") if p.resolve() not in sources)
    if orphans:
        print(f"nvcc_check: no build compiles {', '.join(map(str, orphans))}", file=sys.stderr)
        return 1
    failed = 0
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        for build, rc, log in pool.map(lambda b: compile_one(args.nvcc, b, args.arch), builds):
            if rc != 0:
                failed += 1
                print(f"FAILED {build.source.name} {dict(build.defines)}\n{log}", file=sys.stderr)
    print(f"nvcc_check: {len(builds) - failed}/{len(builds)} builds compiled for {args.arch}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
