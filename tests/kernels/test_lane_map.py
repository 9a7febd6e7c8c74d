"""Kernel schedules (`Variant.kernel_schedule`): the lane map (`TileConfig.lane_map`, mmm.cu's
LANE_MAP: which launched thread runs which logical thread) and the MAC order
(`TileConfig.mac_order`, MAC_ORDER: the order of one k step's independent MACs). Neither
changes C or ES (the GPU tests compare every tile with the reference, and `test_gpu.py` runs
one shape under every schedule); here the Python side: which builds get which schedule, what
the catalog refuses, and that the kernel cache tells apart builds that differ only in their
schedule. nvcc (where installed) checks that mmm.cu refuses what the catalog refuses.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from safemon.kernels import gpu
from safemon.kernels.catalog import (
    M_LEVEL_SCHEDULES,
    TILE_BUILDS,
    TILES,
    WIDE64_READS_AT,
    TileConfig,
    make_variant,
)
from safemon.kernels.compiler import KernelBuild
from safemon.kernels.gpu import build_for

NVCC = shutil.which("nvcc")


def test_the_catalog_schedules() -> None:
    schedules = {t.name + ("-at" if t.a_kmajor and t.name.startswith("wide64") else ""):
                 (t.lane_map, t.mac_order) for t in TILE_BUILDS}
    assert schedules == {"small": (0, 0), "large": (1, 1), "wide": (1, 0), "wide64": (1, 0),
                         "wide64-at": (1, 0), "skinny": (0, 0), "half": (0, 0),
                         "large_k16": (1, 1), "wide64_k16": (1, 0), "wide64_k16-at": (1, 0)}


def test_the_schedule_is_not_part_of_the_tile_identity() -> None:
    """Like `async_copy` and `a_kmajor`: C and ES do not depend on it."""
    assert replace(TILES["wide"], lane_map=0) == TILES["wide"]
    assert hash(replace(TILES["wide"], lane_map=2)) == hash(TILES["wide"])
    assert replace(TILES["large"], lane_map=0, mac_order=0) == TILES["large"]


@pytest.mark.parametrize("lane_map", [3, -1])
def test_unknown_lane_maps_are_refused(lane_map: int) -> None:
    with pytest.raises(ValueError, match="lane_map must be 0, 1 or 2"):
        replace(TILES["wide"], lane_map=lane_map)


@pytest.mark.parametrize("mac_order", [2, -1])
def test_unknown_mac_orders_are_refused(mac_order: int) -> None:
    with pytest.raises(ValueError, match="mac_order must be 0 or 1"):
        replace(TILES["large"], mac_order=mac_order)


@pytest.mark.parametrize(("tile", "lane_map"), [
    ("small", 1),    # 8 threads per row: no room for 16 columns per warp
    ("skinny", 2),   # 2 thread rows: no room for 4 rows per warp
])
def test_maps_that_do_not_tile_the_block_are_refused(tile: str, lane_map: int) -> None:
    with pytest.raises(ValueError, match=f"lane_map {lane_map} runs warps of"):
        replace(TILES[tile], lane_map=lane_map)


@pytest.mark.parametrize(("checksum", "level", "tile", "rmt", "expected"), [
    (None, None, "wide", "none", (1, 0)),
    ("ones", "T", "wide64", "none", (1, 0)),
    ("ones", "T", WIDE64_READS_AT, "none", (1, 0)),
    ("ones", "I", "wide", "none", (1, 0)),       # no MAC order on wide: its map holds at I
    ("ones", "T", "wide", "block", (1, 0)),      # inter-block RMT: each block as without RMT
    ("ones", "T", "wide", "warp", (0, 0)),       # intra-warp RMT pairs lanes itself
    (None, None, "large", "none", (1, 1)),
    ("ones", "T", "large", "none", (1, 1)),
    ("xor", "F", "large", "none", (1, 1)),
    ("ones", "T", "large", "block", (1, 1)),
    ("ones", "T", "large", "warp", (0, 0)),
    ("ones", "M", "large", "none", (0, 0)),      # M_LEVEL_SCHEDULES
    ("twos", "M", "large", "none", (0, 1)),      # M folds follow the last row's MACs
    ("xor", "M", "large", "none", (0, 1)),
    ("fletcher", "M", "large", "none", (1, 1)),  # not in M_LEVEL_SCHEDULES: the tile's own
    ("ones", "M", "large", "block", (1, 1)),     # RMT: the tile's own
    ("twos", "M", "wide64", "none", (1, 0)),
    ("twos", "E", "large", "none", (1, 1)),
    ("ones", "I", "large", "none", (0, 0)),      # a fold at every MAC: Algorithm 1's order
    ("ones_fletcher", "I+M", "large", "none", (0, 0)),
    (None, None, "small", "none", (0, 0)),
    ("ones", "T", "skinny", "none", (0, 0)),
])
def test_kernel_schedule_and_build_defines(checksum: str | None, level: str | None,
                                           tile: str | TileConfig, rmt: str,
                                           expected: tuple[int, int]) -> None:
    v = make_variant(checksum, level, "fma", tile, rmt=rmt)
    assert v.kernel_schedule == expected
    defines = dict(build_for(v).defines)
    lane_map, mac_order = expected
    assert defines.get("LANE_MAP") == (str(lane_map) if lane_map else None)
    assert defines.get("MAC_ORDER") == (str(mac_order) if mac_order else None)


def test_an_explicit_schedule_wins_over_the_m_level_table() -> None:
    """`M_LEVEL_SCHEDULES` picks the schedule of the catalog's own tile; a tile given a
    schedule with `dataclasses.replace` (the GPU schedule sweep) runs exactly that one."""
    for (tile, checksum), chosen in M_LEVEL_SCHEDULES.items():
        assert make_variant(checksum, "M", "fma", tile).kernel_schedule == chosen
        for lane_map in (0, 1, 2):
            for mac_order in (0, 1):
                t = replace(TILES[tile], lane_map=lane_map, mac_order=mac_order)
                if (lane_map, mac_order) == (TILES[tile].lane_map, TILES[tile].mac_order):
                    continue
                v = make_variant(checksum, "M", "fma", t)
                assert v.kernel_schedule == (lane_map, mac_order)
                assert v == make_variant(checksum, "M", "fma", tile)  # same C and ES identity
        # Only fma builds were timed faster; exact ones, and another tile of the same name,
        # run the tile's own schedule.
        own = (TILES[tile].lane_map, TILES[tile].mac_order)
        assert make_variant(checksum, "M", "exact", tile).kernel_schedule == own
        other = replace(TILES[tile], bk=2 * TILES[tile].bk)
        assert make_variant(checksum, "M", "fma", other).kernel_schedule == own


def test_the_injection_build_runs_the_lane_map_but_not_the_mac_order() -> None:
    """Campaign verdicts are per logical thread, which the map does not change: the injection
    build keeps the production lane assignment, and MAC order 0, which flips an accumulator
    right after its MAC."""
    for tile in ("wide", "large"):
        defines = dict(build_for(make_variant("ones", "T", "fma", tile), inject=True).defines)
        assert defines.get("LANE_MAP") == "1" and "MAC_ORDER" not in defines


@pytest.mark.parametrize(("tile", "plain", "define"), [
    ("wide", {"lane_map": 0}, "LANE_MAP"),
    ("large", {"mac_order": 0}, "MAC_ORDER"),
])
def test_kernel_cache_tells_apart_builds_that_differ_only_in_their_schedule(
    tile: str, plain: dict[str, int], define: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    keys: list[tuple[tuple[object, ...], KernelBuild]] = []
    monkeypatch.setattr(gpu, "_function", lambda key, build, name: keys.append((key, build())))
    scheduled = make_variant("ones", "T", "fma", tile, 4)
    unscheduled = make_variant("ones", "T", "fma", replace(TILES[tile], **plain), 4)
    assert scheduled == unscheduled
    gpu.kernel_for(scheduled)
    gpu.kernel_for(unscheduled)
    (key_scheduled, build_scheduled), (key_unscheduled, build_unscheduled) = keys
    assert key_scheduled != key_unscheduled
    assert dict(build_scheduled.defines)[define] == "1"
    assert define not in dict(build_unscheduled.defines)


def _compiles(build: KernelBuild, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    assert NVCC is not None
    return subprocess.run([NVCC, "-arch=sm_90", "-ptx", *build.flags(), str(build.source),
                           "-o", str(tmp_path / "k.ptx")], capture_output=True, text=True,
                          timeout=300)


def _forced(build: KernelBuild, **defines: int) -> KernelBuild:
    merged = {**dict(build.defines), **{k: str(v) for k, v in defines.items()}}
    return KernelBuild(build.source, tuple(sorted(merged.items())), build.options,
                       build.include_dirs)


@pytest.mark.skipif(NVCC is None, reason="nvcc not installed")
@pytest.mark.parametrize(("checksum", "level", "tile", "rmt", "forced", "reason"), [
    (None, None, "small", "none", {"LANE_MAP": 1}, "lane map 1: 2x16 warps"),
    (None, None, "skinny", "none", {"LANE_MAP": 2}, "lane map 2: 4x8 warps"),
    ("ones", "T", "wide", "warp", {"LANE_MAP": 1}, "lane maps: whole warps, no RMT"),
    ("ones", "I", "large", "none", {"MAC_ORDER": 1}, "MAC order 1: builds without a fold at"),
    ("ones", "I", "wide", "none", {"MAC_ORDER": 1}, "MAC order 1: builds without a fold at"),
])
def test_mmm_refuses_the_schedules_the_catalog_refuses(
    checksum: str | None, level: str | None, tile: str, rmt: str, forced: dict[str, int],
    reason: str, tmp_path: Path,
) -> None:
    build = build_for(make_variant(checksum, level, "fma", tile, rmt=rmt))
    r = _compiles(_forced(build, **forced), tmp_path)
    assert r.returncode != 0 and reason in r.stderr
    assert _compiles(build, tmp_path).returncode == 0
