"""Lane maps (`TileConfig.lane_map`, mmm.cu's LANE_MAP): which launched thread runs which
logical thread. The map changes neither C nor ES (the GPU tests compare every tile with the
reference, and `test_gpu.py` runs one shape under all three maps); here the Python side: which
builds get which map, what the catalog refuses, and that the kernel cache tells apart builds
that differ only in their map. nvcc (where installed) checks that mmm.cu refuses the maps the
catalog refuses.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from safemon.kernels import gpu
from safemon.kernels.catalog import TILE_BUILDS, TILES, WIDE64_READS_AT, TileConfig, make_variant
from safemon.kernels.compiler import KernelBuild
from safemon.kernels.gpu import build_for

NVCC = shutil.which("nvcc")


def test_the_catalog_maps_wide_and_wide64_only() -> None:
    maps = {t.name + ("-at" if t.a_kmajor and t.name == "wide64" else ""): t.lane_map
            for t in TILE_BUILDS}
    assert maps == {"small": 0, "large": 0, "wide": 1, "wide64": 1, "wide64-at": 1,
                    "skinny": 0, "half": 0}
    assert WIDE64_READS_AT.lane_map == 1


def test_lane_map_is_not_part_of_the_tile_identity() -> None:
    """Like `async_copy` and `a_kmajor`: C and ES do not depend on it."""
    assert replace(TILES["wide"], lane_map=0) == TILES["wide"]
    assert hash(replace(TILES["wide"], lane_map=2)) == hash(TILES["wide"])


@pytest.mark.parametrize(("lane_map", "match"), [
    (3, "lane_map must be 0, 1 or 2"),
    (-1, "lane_map must be 0, 1 or 2"),
])
def test_unknown_lane_maps_are_refused(lane_map: int, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        replace(TILES["wide"], lane_map=lane_map)


@pytest.mark.parametrize(("tile", "lane_map"), [
    ("small", 1),    # 8 threads per row: no room for 16 columns per warp
    ("skinny", 2),   # 2 thread rows: no room for 4 rows per warp
])
def test_maps_that_do_not_tile_the_block_are_refused(tile: str, lane_map: int) -> None:
    with pytest.raises(ValueError, match=f"lane_map {lane_map} runs warps of"):
        replace(TILES[tile], lane_map=lane_map)


@pytest.mark.parametrize(("checksum", "level", "tile", "rmt", "expected"), [
    (None, None, "wide", "none", "1"),
    ("ones", "T", "wide64", "none", "1"),
    ("ones", "T", WIDE64_READS_AT, "none", "1"),
    ("ones", "I", "wide", "none", "1"),       # register copies: the map holds there too
    ("ones", "T", "wide", "block", "1"),      # inter-block RMT: two blocks, lanes as without RMT
    ("ones", "T", "wide", "warp", None),      # intra-warp RMT pairs lanes itself
    (None, None, "large", "none", None),
    (None, None, "small", "none", None),
    ("ones", "T", "skinny", "none", None),
])
def test_build_for_sets_the_tile_map(checksum: str | None, level: str | None,
                                     tile: str | TileConfig, rmt: str, expected: str | None) -> None:
    v = make_variant(checksum, level, "fma", tile, rmt=rmt)
    assert dict(build_for(v).defines).get("LANE_MAP") == expected


def test_the_injection_build_runs_the_tile_map() -> None:
    """Campaign verdicts are per logical thread, which the map does not change; the injection
    build keeps the production lane assignment."""
    v = make_variant("ones", "T", "fma", "wide")
    assert dict(build_for(v, inject=True).defines).get("LANE_MAP") == "1"


def test_kernel_cache_tells_apart_builds_that_differ_only_in_their_lane_map(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    keys: list[tuple[tuple[object, ...], KernelBuild]] = []
    monkeypatch.setattr(gpu, "_function", lambda key, build, name: keys.append((key, build())))
    mapped = make_variant("ones", "T", "fma", "wide", 8)
    plain = make_variant("ones", "T", "fma", replace(TILES["wide"], lane_map=0), 8)
    assert mapped == plain
    gpu.kernel_for(mapped)
    gpu.kernel_for(plain)
    (key_mapped, build_mapped), (key_plain, build_plain) = keys
    assert key_mapped != key_plain
    assert dict(build_mapped.defines)["LANE_MAP"] == "1" and "LANE_MAP" not in dict(build_plain.defines)


def _compiles(build: KernelBuild, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    assert NVCC is not None
    return subprocess.run([NVCC, "-arch=sm_90", "-ptx", *build.flags(), str(build.source),
                           "-o", str(tmp_path / "k.ptx")], capture_output=True, text=True,
                          timeout=300)


def _forced(build: KernelBuild, lane_map: int) -> KernelBuild:
    defines = {**dict(build.defines), "LANE_MAP": str(lane_map)}
    return KernelBuild(build.source, tuple(sorted(defines.items())), build.options, build.include_dirs)


@pytest.mark.skipif(NVCC is None, reason="nvcc not installed")
@pytest.mark.parametrize(("checksum", "level", "tile", "rmt", "lane_map", "reason"), [
    (None, None, "small", "none", 1, "lane map 1: 2x16 warps"),
    (None, None, "skinny", "none", 2, "lane map 2: 4x8 warps"),
    ("ones", "T", "wide", "warp", 1, "lane maps: whole warps, no RMT"),
])
def test_mmm_refuses_the_maps_the_catalog_refuses(checksum: str | None, level: str | None,
                                                   tile: str, rmt: str, lane_map: int,
                                                   reason: str, tmp_path: Path) -> None:
    build = build_for(make_variant(checksum, level, "fma", tile, rmt=rmt))
    r = _compiles(_forced(build, lane_map), tmp_path)
    assert r.returncode != 0 and reason in r.stderr
    assert _compiles(build, tmp_path).returncode == 0
