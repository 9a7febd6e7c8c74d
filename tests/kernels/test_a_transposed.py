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

from safemon.kernels import gpu
from safemon.kernels.catalog import (
    AUTO_WIDE64_AT_MIN_TILES,
    TILES,
    WIDE64_READS_AT,
    TileConfig,
    auto_split,
    auto_tile,
    make_variant,
    variant_for_shape,
)
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
    (None, None, "wide64", False),          # no a_kmajor on the catalog's tile
    (None, None, WIDE64_READS_AT, True),    # the same tile as auto_tile picks it where it pays
    ("ones", "T", WIDE64_READS_AT, True),
    (None, None, "small", False),
])
def test_which_variants_read_a_transposed(checksum: str | None, level: str | None,
                                          tile: str | TileConfig, expected: bool) -> None:
    v = make_variant(checksum, level, "fma", tile)
    assert v.reads_a_transposed is expected
    assert (dict(build_for(v).defines).get("A_KMAJOR") == "1") is expected
    assert build_reads_a_transposed(build_for(v)) is expected


@pytest.mark.parametrize(("m", "n", "k", "reads_at"), [
    (64, 4096, 4096, True),     # 32 tiles of 64×128
    (256, 1024, 4096, True),    # 8 × 4 tiles
    (64, 11008, 4096, True),
    (64, 4096, 1024, True),     # K = AUTO_WIDE_MIN_K
    (64, 1024, 4096, False),    # 8 tiles: the transpose costs more than it saves
    (64, 3968, 4096, False),    # 31 tiles
    (40, 4096, 4096, False),    # M pads the 64-row tile
    (96, 4096, 4096, False),    # `wide`
    (128, 4096, 4096, True),    # `large`, which always reads Aᵀ
])
def test_auto_tile_reads_a_transposed_on_wide64_only_where_it_pays(
    m: int, n: int, k: int, reads_at: bool
) -> None:
    """`wide64` reads Aᵀ where M fills whole 64-row tiles and the output spans at least
    AUTO_WIDE64_AT_MIN_TILES of them (catalog.WIDE64_READS_AT); its split, C and ES are the
    catalog `wide64`'s either way."""
    t = auto_tile(m, n, k)
    v = variant_for_shape(m, n, k, None, None, "fma", None, None)
    assert v.tile is t and v.reads_a_transposed is reads_at
    if t.name == "wide64":
        assert t == TILES["wide64"]
        assert auto_split(m, n, k, t) == auto_split(m, n, k, TILES["wide64"])
        gx, gy = t.grid(m, n)
        assert reads_at is (m % 64 == 0 and gx * gy >= AUTO_WIDE64_AT_MIN_TILES)
    # The channels' default variant follows the same rule.
    assert variant_for_shape(m, n, k, "ones", "T", "fma", None, None).reads_a_transposed is reads_at


def test_kernel_cache_tells_apart_builds_that_differ_only_in_reading_a_transposed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Variants on `wide64` and on `WIDE64_READS_AT` compare equal (a_kmajor is not part of
    the tile's identity) but are different builds: the kernel cache must not hand one the
    other's kernel, which would read A with the wrong layout."""
    keys: list[tuple[tuple[object, ...], KernelBuild]] = []
    monkeypatch.setattr(gpu, "_function", lambda key, build, name: keys.append((key, build())))
    plain = make_variant("ones", "T", "fma", "wide64", 8)
    at = make_variant("ones", "T", "fma", WIDE64_READS_AT, 8)
    assert plain == at
    gpu.kernel_for(plain)
    gpu.kernel_for(at)
    (key_plain, build_plain), (key_at, build_at) = keys
    assert key_plain != key_at
    assert not build_reads_a_transposed(build_plain) and build_reads_a_transposed(build_at)


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
