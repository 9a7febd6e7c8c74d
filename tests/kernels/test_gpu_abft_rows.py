"""The row-only ABFT check ("rows") on the GPU: B's vectors equal the column kernel's bit for
bit, clean products pass with C bit-exact (B raw, or a `ProtectedArray` weight that keeps its
vectors), the device decision and tile equal the NumPy mirror's, and injected faults are
flagged (device machine)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import safemon
from safemon.dims import Dims
from safemon.evidence.inkernel import run_inkernel_campaign
from safemon.kernels.abft import abft_check
from safemon.kernels.catalog import make_variant
from safemon.kernels.reference import reference_matmul

pytestmark = pytest.mark.gpu

SHAPES = [(20, 20, 20), (80, 80, 80), (97, 61, 113), (8, 900, 8), (300, 260, 70),
          (64, 64, 4096), (64, 1024, 1024)]
TILES_ALL = ["small", "large", "wide", "wide64", "skinny", "half"]


def _inputs(m: int, n: int, k: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(m * 1_000_003 + n * 1009 + k + seed)
    a = rng.standard_normal((m, k)) * 10.0 ** rng.integers(-3, 4, (m, 1))
    return a.astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)


@pytest.mark.parametrize("tile", TILES_ALL)
def test_gpu_b_vectors_equal_the_column_kernels_bit_for_bit(tile: str) -> None:
    import cupy as cp

    from safemon.kernels.abft import abft_weight_vectors, launch_abft_checksums, plan_abft

    for m, n, k in [(80, 80, 80), (33, 700, 300), (64, 4096, 1024)]:
        a, b = _inputs(m, n, k)
        da, db = cp.asarray(a), cp.asarray(b)
        full = make_variant(None, None, "fma", tile, abft=True)
        plan = plan_abft(m, n, k, full)
        launch_abft_checksums(da, db, plan)
        w = abft_weight_vectors(db, full.tile)
        assert cp.asnumpy(w.b_sum).tobytes() == cp.asnumpy(plan.b_sum).tobytes(), (tile, m, n, k)
        assert cp.asnumpy(w.b_abs).tobytes() == cp.asnumpy(plan.b_abs).tobytes(), (tile, m, n, k)


@pytest.mark.parametrize("weight", ["raw", "protected"])
@pytest.mark.parametrize("tile", TILES_ALL)
def test_gpu_rows_clean_products_pass_and_c_is_unchanged(tile: str, weight: str) -> None:
    import cupy as cp

    from safemon.ecc import ProtectedArray
    from safemon.kernels.checked import launch_checked, read_status

    for m, n, k in SHAPES:
        split = 8 if k >= 4096 else 1
        v = make_variant("ones", "M", "fma", tile, split, abft="rows")
        a, b = _inputs(m, n, k)
        pb = ProtectedArray(cp.asarray(b), name="w") if weight == "protected" else None
        for _ in range(2):  # the second call takes the weight's kept vectors
            launch = launch_checked(cp.asarray(a), cp.asarray(b) if pb is None else None, v,
                                    b_protected=pb)
            assert read_status(launch.status).ok, (v.name, m, n, k)
            c_ref, es_ref = reference_matmul(a, b, v)
            assert cp.asnumpy(launch.c).tobytes() == c_ref.tobytes()
            assert cp.asnumpy(launch.es).tobytes() == es_ref.tobytes()


@pytest.mark.parametrize("given", [False, True], ids=["b-vectors-per-call", "weight-vectors"])
@pytest.mark.parametrize("side", [False, True], ids=["one-stream", "side-stream"])
@pytest.mark.parametrize("bit", [31, 30, 27, 23, 20, 10, 0])
@pytest.mark.parametrize(("shape", "tile"), [
    ((300, 260, 70), "small"), ((64, 2048, 1024), "wide64"), ((5, 1024, 512), "skinny"),
    ((200, 600, 300), "large"),
])
def test_gpu_rows_decision_and_tile_equal_the_numpy_mirror(
        bit: int, shape: tuple[int, int, int], tile: str, side: bool, given: bool) -> None:
    """One bit of C flipped between the kernel and the check: the device's row-only decision
    and failed tile are the mirror's (`abft_check(kind="rows")`)."""
    import cupy as cp

    from safemon.kernels.abft import abft_weight_vectors, begin_abft, finish_abft
    from safemon.kernels.checked import STATUS_WORDS, StatusReport
    from safemon.kernels.gpu import gpu_matmul

    m, n, k = shape
    a, b = _inputs(m, n, k)
    v = make_variant(None, None, "exact", tile, abft="rows")
    da, db = cp.asarray(a), cp.asarray(b)
    weights = abft_weight_vectors(db, v.tile) if given else None
    rng = np.random.default_rng(bit)
    for _ in range(10):
        i, j = int(rng.integers(0, m)), int(rng.integers(0, n))
        status = cp.zeros(STATUS_WORDS, dtype=cp.uint32)
        pending = begin_abft(m, n, k, v, side=side, weights=weights)
        c, _ = gpu_matmul(da, db, v)
        c.view(cp.uint32)[i, j] ^= cp.uint32(1 << bit)
        finish_abft(pending, da, db, c, int(status.data.ptr))
        report = StatusReport.from_words(status.get())
        mirror = abft_check(a, b, cp.asnumpy(c), v.tile, kind="rows")
        assert report.abft_failed == (not mirror.ok)
        assert report.abft_tile == (mirror.failed_tiles[0] if mirror.failed_tiles else None)


def test_gpu_rows_catches_an_exponent_flip_and_passes_a_cancelling_pair() -> None:
    """The device check: an exponent flip fails its tile; +δ/−δ in one tile row passes
    (what "rows" gives up, docs/RMT.md), and the full check fails it."""
    import cupy as cp

    from safemon.kernels.abft import launch_abft
    from safemon.kernels.checked import STATUS_WORDS, StatusReport
    from safemon.kernels.gpu import gpu_matmul

    a, b = _inputs(80, 80, 80)
    da, db = cp.asarray(a), cp.asarray(b)

    def check(kind: str | bool, corrupt: Any) -> StatusReport:
        v = make_variant(None, None, "fma", "small", abft=kind)
        status = cp.zeros(STATUS_WORDS, dtype=cp.uint32)
        c, _ = gpu_matmul(da, db, v)
        corrupt(c)
        launch_abft(da, db, c, v, int(status.data.ptr))
        return StatusReport.from_words(status.get())

    def flip(c: Any) -> None:
        c.view(cp.uint32)[37, 50] ^= cp.uint32(1 << 29)

    def pair(c: Any) -> None:
        c[3, 1] += 100.0
        c[3, 2] -= 100.0

    r = check("rows", flip)
    assert r.abft_failed and r.abft_tile == (37 // 32) * 3 + 50 // 32
    assert check("rows", pair).ok
    assert check(True, pair).abft_failed


def test_gpu_protected_weight_makes_its_vectors_once_and_again_after_update() -> None:
    import cupy as cp

    from safemon.ecc import ProtectedArray
    from safemon.kernels.checked import launch_checked, read_status, weight_vectors

    a, b = _inputs(64, 1024, 1024)
    v = make_variant(None, None, "fma", "wide64", abft="rows")
    pb = ProtectedArray(cp.asarray(b), name="w")
    first = weight_vectors(pb, v.tile)
    assert weight_vectors(pb, v.tile) is first
    pb.update(cp.asarray(-b))
    again = weight_vectors(pb, v.tile)
    assert again is not first
    assert cp.asnumpy(again.b_sum).tobytes() == cp.asnumpy(-first.b_sum).tobytes()
    launch = launch_checked(cp.asarray(a), None, v, b_protected=pb)
    assert launch.keep is again  # held by the launch: an update may drop them from the weight
    assert read_status(launch.status).ok
    assert cp.asnumpy(launch.c).tobytes() == reference_matmul(a, -b, v)[0].tobytes()
    pending = safemon.protected_matmul(cp.asarray(a), pb, checksum="ones", level="M",
                                       mode="fma", abft="rows", tile="wide64", wait=False)
    assert pending._keep is again
    done = pending.wait()
    assert cp.asnumpy(done.c).tobytes() == reference_matmul(a, -b, done.variant)[0].tobytes()


def test_gpu_uncorrectable_weight_keeps_no_vectors_and_raises() -> None:
    import cupy as cp

    from safemon.ecc import ProtectedArray
    from safemon.errors import UncorrectableError
    from safemon.kernels.checked import launch_checked

    a, b = _inputs(64, 256, 256)
    v = make_variant(None, None, "fma", "small", abft="rows")
    pb = ProtectedArray(cp.asarray(b), name="w")
    pb.verified().view(cp.uint32).ravel()[5] ^= cp.uint32(0b11)  # two bits of a word
    with pytest.raises(UncorrectableError):
        launch_checked(cp.asarray(a), None, v, b_protected=pb)


def test_gpu_rows_campaign_detects_no_more_than_full_on_the_same_faults() -> None:
    """The same 4000 in-kernel faults: "rows" flags a subset of what "full" flags (its rule is
    one of full's two), and reports its below-tolerance faults apart."""
    full = run_inkernel_campaign(make_variant(None, None, "fma", "small", abft=True),
                                 Dims(80, 80, 80), 4000, seed=4,
                                 targets=("operand_a", "operand_b", "accumulator"))
    rows = run_inkernel_campaign(make_variant(None, None, "fma", "small", abft="rows"),
                                 Dims(80, 80, 80), 4000, seed=4,
                                 targets=("operand_a", "operand_b", "accumulator"))
    assert rows.below_tolerance() is not None
    detected = [sum(e["both"] for e in r.effect_counts().values()) for r in (rows, full)]
    assert 0 < detected[0] <= detected[1]


@pytest.mark.slow
def test_gpu_rows_no_false_positive_in_10000_clean_runs_on_fresh_inputs() -> None:
    """10,000 clean products on fresh random inputs (rows scaled over 10⁻³…10³), over 9
    shapes, 4 tiles, both modes, the row check alone and with ES-M, B raw and as a
    `ProtectedArray` weight: no status word is ever set; a sample is bit-exact."""
    import cupy as cp

    from safemon.ecc import ProtectedArray
    from safemon.kernels.checked import launch_checked, read_status

    shapes = [*SHAPES, (1, 512, 256), (33, 130, 9)]
    kinds = [(c, lv, mode, tile) for c, lv in ((None, None), ("ones", "M"))
             for mode in ("exact", "fma") for tile in ("small", "large", "wide", "wide64")]
    rng = np.random.default_rng(2027)
    runs = 0
    while runs < 10_000:
        m, n, k = shapes[runs % len(shapes)]
        c, lv, mode, tile = kinds[(runs // len(shapes)) % len(kinds)]
        v = make_variant(c, lv, mode, tile, 8 if k >= 4096 else 1, abft="rows")
        a = (rng.standard_normal((m, k)) * 10.0 ** rng.integers(-3, 4, (m, 1))).astype(np.float32)
        b = rng.standard_normal((k, n)).astype(np.float32)
        pb = ProtectedArray(cp.asarray(b), name="w") if runs % 2 else None
        launch = launch_checked(cp.asarray(a), cp.asarray(b) if pb is None else None, v,
                                b_protected=pb)
        assert read_status(launch.status).ok, f"false alarm: run {runs}, {v.name} {m}x{n}x{k}"
        if runs % 997 == 0:
            assert cp.asnumpy(launch.c).tobytes() == reference_matmul(a, b, v)[0].tobytes()
        runs += 1


@pytest.mark.parametrize("abft", [True, "rows"], ids=["full", "rows"])
def test_gpu_split_products_decide_like_the_mirror_with_the_longest_slice(
        abft: bool | str) -> None:
    """Split 4 (k_S = 512 of K = 2048): after a flip of one bit of C the device's decision and
    tile equal the mirror's with k_slice = k_S (k_S + S roundings). Flips of bits near the
    tolerance are chosen so that the earlier rule (K + S) decides some of them otherwise: the
    test asserts that some do, so a device still on the earlier count would fail it."""
    import cupy as cp

    from safemon.kernels.abft import launch_abft
    from safemon.kernels.catalog import slice_k_max
    from safemon.kernels.checked import STATUS_WORDS, StatusReport
    from safemon.kernels.gpu import gpu_matmul

    m, n, k = 64, 1024, 2048
    v = make_variant(None, None, "fma", "wide64", 4, abft=abft)
    s = v.slices(k)
    k_s = slice_k_max(k, v.tile.bk, s)
    assert (s, k_s) == (4, 512)
    a, b = _inputs(m, n, k, seed=7)
    da, db = cp.asarray(a), cp.asarray(b)
    c, _ = gpu_matmul(da, db, v)
    kind = "rows" if abft == "rows" else "full"
    rng = np.random.default_rng(11)
    separated = 0
    for bit in range(18, 28):
        for _ in range(10):
            i, j = int(rng.integers(0, m)), int(rng.integers(0, n))
            bad = c.copy()
            bad.view(cp.uint32)[i, j] ^= cp.uint32(1 << bit)
            status = cp.zeros(STATUS_WORDS, dtype=cp.uint32)
            launch_abft(da, db, bad, v, int(status.data.ptr))
            report = StatusReport.from_words(status.get())
            host = cp.asnumpy(bad)
            new = abft_check(a, b, host, v.tile, s, kind, k_s)
            old = abft_check(a, b, host, v.tile, s, kind)
            assert report.abft_failed == (not new.ok), (bit, i, j)
            assert report.abft_tile == (new.failed_tiles[0] if new.failed_tiles else None)
            separated += new.ok != old.ok
    assert separated > 0
