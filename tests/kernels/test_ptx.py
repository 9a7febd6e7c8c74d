"""The kernels' arithmetic does not depend on the flush-to-zero flag.

CuPy appends -ftz=true to every NVRTC compile, after safemon's own --ftz=false, so at run time
the compiler may flush subnormals in any float instruction it generates. The protected MMM
therefore does its arithmetic in inline PTX (mul.rn / add.rn / fma.rn, no .ftz). This test
compiles builds with nvcc and -ftz=true, as CuPy effectively does, and requires that no
`.ftz` instruction appears in the PTX. Runs wherever nvcc is (CI has it); skipped elsewhere.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from safemon.kernels.catalog import make_variant
from safemon.kernels.compiler import KernelBuild
from safemon.kernels.gpu import build_for, finite_build

NVCC = shutil.which("nvcc")


@pytest.mark.skipif(NVCC is None, reason="nvcc not installed")
@pytest.mark.parametrize("build", [
    build_for(make_variant(None, None, "exact", "small")),
    build_for(make_variant("ones", "I", "exact", "large")),
    build_for(make_variant("fletcher", "E", "fma", "wide")),
    build_for(make_variant("fletcher_xor", "I", "fma", "small"), inject=True),
    finite_build(),
], ids=["unprotected-exact", "ones-I-exact", "fletcher-E-fma", "inject", "finite"])
def test_no_flush_to_zero_instruction_even_with_ftz_true(build: KernelBuild, tmp_path: Path) -> None:
    assert NVCC is not None
    out = tmp_path / "k.ptx"
    flags = [f for f in build.flags() if not f.startswith("--ftz")]
    r = subprocess.run([NVCC, "-arch=sm_90", "-ptx", "-ftz=true", *flags, str(build.source),
                        "-o", str(out)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    ptx = out.read_text()
    assert ".ftz" not in ptx, [line for line in ptx.splitlines() if ".ftz" in line][:5]
    assert "fma.rn.f32" in ptx or "add.rn.f32" in ptx or "finite" in str(build.source)
