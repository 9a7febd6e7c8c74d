"""Which builds read Aᵀ (`Variant.reads_a_transposed`, mmm.cu's A_KMAJOR): the Python rule and
the CUDA rule must agree, or the kernel would read A with the wrong layout.

mmm.cu refuses to compile A_KMAJOR where it copies through registers; nvcc (where installed)
checks here that every build the rule sends to Aᵀ compiles, and that the rule's refusals are
the builds mmm.cu refuses.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from safemon.kernels.catalog import TILES, make_variant
from safemon.kernels.compiler import KernelBuild
from safemon.kernels.gpu import build_for, build_reads_a_transposed

NVCC = shutil.which("nvcc")


@pytest.mark.parametrize(("checksum", "level", "tile", "expected"), [
    (None, None, "large", True),
    ("ones", "M", "large", True),
    ("ones", "T", "large", True),
    ("crc32c", "F", "large", True),
    ("ones", "I", "large", False),          # a fold at every MAC: register copies
    ("ones_fletcher", "I+M", "large", False),  # a combination folds X at every MAC
    (None, None, "wide64", False),          # no a_kmajor on the tile
    (None, None, "small", False),
])
def test_which_variants_read_a_transposed(checksum: str | None, level: str | None, tile: str,
                                          expected: bool) -> None:
    v = make_variant(checksum, level, "fma", tile)
    assert v.reads_a_transposed is expected
    assert (dict(build_for(v).defines).get("A_KMAJOR") == "1") is expected
    assert build_reads_a_transposed(build_for(v)) is expected


def test_the_injection_build_never_reads_a_transposed() -> None:
    v = make_variant("ones", "M", "fma", "large")
    assert v.reads_a_transposed
    assert "A_KMAJOR" not in dict(build_for(v, inject=True).defines)


def test_a_kmajor_is_not_part_of_the_tile_identity() -> None:
    """Like `async_copy`: C and ES do not depend on it, so stored results stay comparable."""
    t = TILES["large"]
    assert t.a_kmajor and t.async_copy
    assert replace(t, a_kmajor=False, async_copy=False) == t


def _compiles(build: KernelBuild, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    assert NVCC is not None
    return subprocess.run([NVCC, "-arch=sm_90", "-ptx", *build.flags(), str(build.source),
                           "-o", str(tmp_path / "k.ptx")], capture_output=True, text=True,
                          timeout=300)


@pytest.mark.skipif(NVCC is None, reason="nvcc not installed")
def test_mmm_refuses_a_kmajor_where_it_copies_through_registers(tmp_path: Path) -> None:
    """Forcing A_KMAJOR onto a build that the rule keeps on register copies (a fold at every
    MAC on `large`) fails to compile, naming the reason, instead of reading A wrongly."""
    build = build_for(make_variant("ones", "I", "fma", "large"))
    forced = KernelBuild(build.source, tuple(sorted({**dict(build.defines), "A_KMAJOR": "1"}.items())),
                         build.options, build.include_dirs)
    r = _compiles(forced, tmp_path)
    assert r.returncode != 0 and "A_KMAJOR needs asynchronous copies" in r.stderr
    assert _compiles(build, tmp_path).returncode == 0
