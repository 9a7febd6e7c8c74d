"""Intra-warp and inter-block RMT (docs/RMT.md) on the CPU: catalog, build, reference, status
and sampling rules."""

from __future__ import annotations

import numpy as np
import pytest

from safemon.config import VariantConfig
from safemon.dims import Dims
from safemon.errors import KernelCheckError
from safemon.evidence.inkernel import classify, sample_sites
from safemon.faults.launch import FIELDS, RMT_DETECTED, TARGETS
from safemon.kernels.catalog import RMT_KINDS, make_variant, slice_bounds, variant_for_shape
from safemon.kernels.checked import STATUS_RMT, STATUS_RMT_TILE, STATUS_WORDS, StatusReport
from safemon.kernels.gpu import build_for
from safemon.kernels.reference import reference_matmul


def _col(rows: np.ndarray, name: str) -> np.ndarray:
    return rows[:, FIELDS.index(name)]


def test_rmt_is_part_of_the_variant_name_and_json_only_when_enabled() -> None:
    plain = make_variant("ones", "M", "exact", "small")
    rmt = make_variant("ones", "M", "exact", "small", rmt="warp")
    assert rmt.name == "ones/M/exact/small/rmt-warp" and plain.name == "ones/M/exact/small"
    assert rmt.as_dict()["rmt"] == "warp" and "rmt" not in plain.as_dict()
    assert rmt != plain and rmt.words == plain.words


def test_rmt_launches_two_lanes_per_logical_thread() -> None:
    for tile in ("small", "large", "wide", "half", "wide64"):
        v = make_variant(None, None, "fma", tile, rmt="warp")
        assert v.block_threads == 2 * v.tile.threads and v.copies == 2
        assert make_variant(None, None, "fma", tile).block_threads == v.tile.threads


def test_inter_block_rmt_doubles_the_grid_not_the_block() -> None:
    for tile in ("small", "large", "wide", "skinny"):
        v = make_variant(None, None, "fma", tile, rmt="block")
        assert v.block_threads == v.tile.threads and v.copies == 1
        assert v.grid_copies == 2 and v.replicas == 2
        assert v.name == f"unprotected/fma/{tile}/rmt-block"
    warp = make_variant(None, None, "fma", "small", rmt="warp")
    assert (warp.grid_copies, warp.replicas) == (1, 2)
    plain = make_variant(None, None, "fma", "small")
    assert (plain.copies, plain.grid_copies, plain.replicas) == (1, 1, 1)


def test_rmt_block_buffers_hold_copy_one_or_both_copies_and_a_counter_per_tile() -> None:
    from safemon.kernels.gpu import rmt_block_shapes

    v = make_variant("ones", "M", "fma", "large", rmt="block")
    gx, gy = v.tile.grid(300, 520)
    assert rmt_block_shapes(v, 300, 520, 3) == ((3, 300, 520), 3 * gx * gy)
    assert rmt_block_shapes(v, 300, 520, 7, inject=True) == ((7, 2, 300, 520), 7 * gx * gy)
    assert rmt_block_shapes(make_variant("ones", "M", "fma", "large", rmt="warp"), 8, 8, 1) is None


def test_unknown_rmt_kind_is_rejected() -> None:
    with pytest.raises(ValueError, match="rmt"):
        make_variant("ones", "I", "exact", "small", rmt="grid")
    assert RMT_KINDS == ("none", "warp", "block")


@pytest.mark.parametrize("kind", ["warp", "block"])
def test_only_rmt_builds_get_the_rmt_define(kind: str) -> None:
    define = f"RMT_{kind.upper()}"
    plain = build_for(make_variant("ones", "I", "exact", "large"))
    rmt = build_for(make_variant("ones", "I", "exact", "large", rmt=kind))
    assert "RMT_WARP" not in dict(plain.defines) and "RMT_BLOCK" not in dict(plain.defines)
    assert dict(rmt.defines)[define] == "1"
    assert {k: v for k, v in rmt.defines if k != define} == dict(plain.defines)


def test_reference_of_an_rmt_variant_is_the_unreplicated_result() -> None:
    rng = np.random.default_rng(3)
    a = rng.standard_normal((37, 29)).astype(np.float32)
    b = rng.standard_normal((29, 41)).astype(np.float32)
    for checksum, level in [(None, None), ("crc32c", "M"), ("ones_fletcher", "I")]:
        plain = make_variant(checksum, level, "exact", "small")
        c0, es0 = reference_matmul(a, b, plain)
        for kind in ("warp", "block"):
            c1, es1 = reference_matmul(a, b, make_variant(checksum, level, "exact", "small",
                                                          rmt=kind))
            assert c1.tobytes() == c0.tobytes() and es1.tobytes() == es0.tobytes()
            assert es1.shape == es0.shape  # ES rows are logical threads of tiles, not copies


def test_status_report_decodes_an_rmt_mismatch_and_its_tile() -> None:
    words = np.zeros(STATUS_WORDS, dtype=np.uint32)
    assert StatusReport.from_words(words).ok
    words[STATUS_RMT], words[STATUS_RMT_TILE] = 1, 0xFFFFFFFF - 7
    report = StatusReport.from_words(words)
    assert not report.ok and report.rmt_mismatch and report.rmt_tile == 7
    assert StatusReport.from_words(np.zeros(STATUS_WORDS, dtype=np.uint32)).rmt_tile is None
    with pytest.raises(ValueError, match="words"):
        StatusReport.from_words(np.zeros(4, dtype=np.uint32))


def test_kernel_check_error_names_the_failed_block() -> None:
    exc = KernelCheckError("rmt", 7)
    assert "tile 7" in str(exc) and exc.check == "rmt" and exc.tile == 7
    assert "unknown tile" in str(KernelCheckError("rmt", None))


def test_rmt_verdict_bit_counts_as_detected() -> None:
    rmt, c = int(RMT_DETECTED), 2
    assert classify([rmt | c, c, rmt, 0]).tolist() == ["detected", "sdc", "detected", "masked"]


def test_sampling_without_rmt_is_unchanged_by_the_copy_field() -> None:
    dims = Dims(40, 40, 40)
    plain = sample_sites(make_variant("ones", "M", "exact", "small"), dims, 500, seed=5)
    rmt = sample_sites(make_variant("ones", "M", "exact", "small", rmt="warp"), dims, 500, seed=5)
    assert (_col(plain, "copy") == -1).all()
    assert np.array_equal(plain[:, :-1], rmt[:, :-1])  # same sites; RMT only adds the replica


@pytest.mark.parametrize("kind", ["warp", "block"])
def test_rmt_sampling_hits_one_replica_and_es_words_hit_replica_zero(kind: str) -> None:
    """Transient and thread-permanent faults hit one replica, drawn; ES-word faults replica 0.
    A block-permanent fault hits both intra-warp replicas (one SM runs both lanes) but one
    inter-block copy (the model assumes the copies ran on different SMs; docs/RMT.md)."""
    dims = Dims(40, 40, 40)
    v = make_variant("ones", "M", "exact", "small", rmt=kind)
    rows = sample_sites(v, dims, 2000, seed=1)
    copy, target = _col(rows, "copy"), _col(rows, "target")
    es = target == TARGETS["es_word"]
    assert set(copy[~es].tolist()) == {0, 1} and (copy[es] == 0).all()
    thread = sample_sites(v, dims, 500, seed=1, scope="thread", targets=("accumulator",))
    assert set(_col(thread, "copy").tolist()) == {0, 1}
    block = sample_sites(v, dims, 500, seed=1, scope="block", targets=("accumulator",))
    assert set(_col(block, "copy").tolist()) == ({-1} if kind == "warp" else {0, 1})
    plain = sample_sites(make_variant("ones", "M", "exact", "small"), dims, 2000, seed=1)
    assert np.array_equal(plain[:, :-1], rows[:, :-1])  # same sites, plus the replica


@pytest.mark.parametrize("kind", ["warp", "block"])
def test_channel_config_carries_rmt_into_the_variant(kind: str) -> None:
    cfg = VariantConfig(checksum="ones", level="M", tile="auto", rmt=kind)
    assert cfg.to_variant(64, 64, 64).rmt == kind
    assert VariantConfig().to_variant(64, 64, 64).rmt == "none"
    with pytest.raises(ValueError, match="rmt"):
        VariantConfig(rmt="grid")


# (M, N, K) → (tile intra-warp RMT runs, the automatic tile without RMT). 512×1024×600: large
# cuts K = 600 at 152, which half's 16-wide k-tiles cannot, so RMT stays on large there.
RMT_WARP_CHOICES = [((4096, 4096, 4096), "half", "large"), ((1024, 1024, 1024), "half", "large"),
                    ((128, 4096, 4096), "half", "large"), ((1000, 1000, 1000), "half", "large"),
                    ((512, 1024, 200), "half", "large"), ((512, 1024, 600), "large", "large"),
                    ((64, 4096, 4096), "wide", "wide64"), ((96, 4096, 4096), "wide", "wide"),
                    ((80, 80, 80), "small", "small"),
                    ((1, 4096, 4096), "skinny", "skinny")]


@pytest.mark.parametrize(("dims", "rmt_tile", "plain_tile"), RMT_WARP_CHOICES,
                         ids=lambda x: "x".join(map(str, x)) if isinstance(x, tuple) else x)
def test_intra_warp_rmt_moves_off_256_thread_tiles_on_the_same_k_slices(
    dims: tuple[int, int, int], rmt_tile: str, plain_tile: str
) -> None:
    """One block of `large` or `wide64` under intra-warp RMT is 512 threads, one per SM;
    `half` and `wide` keep two (catalog.RMT_WARP_TILES). The move must never change C: same
    K-slices, else no move."""
    m, n, k = dims
    plain = variant_for_shape(m, n, k, "ones", "M", "fma", None, None)
    warp = variant_for_shape(m, n, k, "ones", "M", "fma", None, None, "warp")
    assert (warp.tile.name, plain.tile.name) == (rmt_tile, plain_tile)
    assert warp.rmt == "warp" and (warp.checksum, warp.level, warp.mode) == ("ones", "M", "fma")
    assert slice_bounds(k, warp.tile.bk, warp.slices(k)) == \
        slice_bounds(k, plain.tile.bk, plain.slices(k))
    # Inter-block RMT, an explicit tile and the channels' config follow their own rules.
    assert variant_for_shape(m, n, k, "ones", "M", "fma", None, None, "block").tile == plain.tile
    assert variant_for_shape(m, n, k, "ones", "M", "fma", "large", None, "warp").tile.name == \
        "large"
    cfg = VariantConfig(checksum="ones", level="M", rmt="warp")
    assert cfg.to_variant(m, n, k) == warp and cfg.tile_for(m, n, k) == warp.tile


def test_reference_c_of_rmt_on_half_is_the_c_of_large_without_rmt() -> None:
    """C depends on the K-slices alone: the move to `half` leaves every bit of C."""
    rng = np.random.default_rng(5)
    m, n, k = 512, 1024, 40
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    plain = variant_for_shape(m, n, k, None, None, "fma", None, None)
    warp = variant_for_shape(m, n, k, None, None, "fma", None, None, "warp")
    assert (plain.tile.name, warp.tile.name) == ("large", "half")
    c0, _ = reference_matmul(a, b, plain)
    c1, _ = reference_matmul(a, b, warp)
    assert c1.tobytes() == c0.tobytes()


def test_bench_times_intra_warp_rmt_on_the_tile_the_library_gives_it() -> None:
    from safemon.bench.overhead import _variants_at

    got = {v.name for v in _variants_at(Dims(4096, 4096, 4096), "fma", None)}
    assert {"unprotected/fma/half/rmt-warp", "ones/M/fma/half/rmt-warp",
            "unprotected/fma/large/abft", "unprotected/fma/large/rmt-block"} <= got
    assert not any("large" in name and "rmt-warp" in name for name in got)
