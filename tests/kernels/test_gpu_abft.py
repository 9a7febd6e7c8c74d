"""ABFT on the GPU (abft.cu's vectors, the check fused into the MMM epilogue): clean products
pass with C and ES bit-exact, a wrong checksum fails exactly the tiles it feeds and names the
lowest, injected faults are flagged, and no false alarm in 10⁴ clean runs (device machine)."""

from __future__ import annotations

import numpy as np
import pytest

from safemon.faults.dims import Dims
from safemon.faults.inkernel import run_inkernel_campaign
from safemon.faults.launch import ABFT_DETECTED, TARGETS, injection_rows, run_injections
from safemon.kernels.abft import abft_check_variant
from safemon.kernels.catalog import make_variant
from safemon.kernels.reference import reference_matmul

pytestmark = pytest.mark.gpu

SHAPES = [(20, 20, 20), (80, 80, 80), (97, 61, 113), (8, 900, 8), (300, 260, 70), (64, 64, 4096)]


def _inputs(m: int, n: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(m * 1_000_003 + n * 1009 + k)
    a = rng.standard_normal((m, k)) * 10.0 ** rng.integers(-3, 4, (m, 1))
    return a.astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)


@pytest.mark.parametrize("tile", ["small", "large", "wide"])
@pytest.mark.parametrize("mode", ["exact", "fma"])
def test_gpu_abft_clean_products_pass_and_c_is_unchanged(tile: str, mode: str) -> None:
    import cupy as cp

    from safemon.kernels.checked import launch_checked, read_status

    for m, n, k in SHAPES:
        split = 8 if k >= 4096 else 1
        v = make_variant("ones", "M", mode, tile, split, abft=True)
        a, b = _inputs(m, n, k)
        launch = launch_checked(cp.asarray(a), cp.asarray(b), v, a_on_device=True,
                                b_on_device=True)
        assert read_status(launch.status).ok, (v.name, m, n, k)
        c_ref, es_ref = reference_matmul(a, b, v)
        assert cp.asnumpy(launch.c).tobytes() == c_ref.tobytes()
        assert cp.asnumpy(launch.es).tobytes() == es_ref.tobytes()
        assert abft_check_variant(a, b, v) == ()


def _checked_with_vectors(a, b, v, edit):  # type: ignore[no-untyped-def]
    """Run v's production kernel with abft.cu's vectors passed through `edit` first; returns
    ((S, M, N) slice partials, StatusReport)."""
    import cupy as cp

    from safemon.kernels.abft import abft_vectors
    from safemon.kernels.checked import STATUS_WORDS, StatusReport
    from safemon.kernels.gpu import kernel_for

    m, k = a.shape
    n = b.shape[1]
    a_d, b_d = cp.asarray(a), cp.asarray(b)
    gx, gy = v.tile.grid(m, n)
    s = v.slices(k)
    vecs = abft_vectors(a_d, b_d, v)
    edit(vecs)
    c = cp.empty((s, m, n), dtype=cp.float32)  # slice partials (not reduced)
    es = cp.empty((gx * gy * v.tile.threads * s, max(1, v.words)), dtype=cp.uint32)
    status = cp.zeros(STATUS_WORDS, dtype=cp.uint32)
    kernel_for(v)((gx, gy, s), (v.block_threads, 1, 1),
                  (a_d, b_d, c, es, np.int32(m), np.int32(n), np.int32(k), status, *vecs))
    return c, StatusReport.from_words(status.get())


@pytest.mark.parametrize("which", [0, 2])
@pytest.mark.parametrize("rmt", ["none", "warp"])
def test_gpu_abft_wrong_checksum_fails_exactly_its_tiles(which: int, rmt: str) -> None:
    """A wrong a_sum entry of tile row `by` (which=0) fails the column checks of every tile
    of that row; a wrong b_sum entry of tile column `bx` (which=2) the row checks of that
    column: the status names the lowest such tile, and C is still the reference's."""
    import cupy as cp

    m, n, k = 300, 260, 70
    a, b = _inputs(m, n, k)
    v = make_variant("ones", "M", "exact", "small", rmt=rmt, abft=True)
    gx = v.tile.grid(m, n)[0]
    unit = 3 if which == 0 else 5  # tile row 3 / tile column 5

    def edit(vecs):  # type: ignore[no-untyped-def]
        vecs[which][unit * k + 17] += 1.0e4

    c, report = _checked_with_vectors(a, b, v, edit)
    assert report.abft_failed and not report.rmt_mismatch
    assert report.abft_tile == (unit * gx if which == 0 else unit)
    assert cp.asnumpy(c[0]).tobytes() == reference_matmul(a, b, v)[0].tobytes()
    _, clean = _checked_with_vectors(a, b, v, lambda vecs: None)
    assert clean.ok


def test_gpu_abft_split_product_is_checked_slice_by_slice() -> None:
    """With split-K each slice checks its partial tile against its own K range: the clean
    product passes on the device and in the reference mirror (per-slice partials), C is
    bit-exact, and a wrong a_sum entry inside slice 2's range fails tile row 1."""
    import cupy as cp

    from safemon.kernels.abft import abft_check_variant
    from safemon.kernels.catalog import slice_bounds
    from safemon.kernels.checked import launch_checked, read_status

    m, n, k = 64, 64, 4096
    a, b = _inputs(m, n, k)
    v = make_variant(None, None, "fma", "small", 8, abft=True)
    assert v.slices(k) == 8 and abft_check_variant(a, b, v) == ()
    launch = launch_checked(cp.asarray(a), cp.asarray(b), v, a_on_device=True, b_on_device=True)
    assert read_status(launch.status).ok
    assert cp.asnumpy(launch.c).tobytes() == reference_matmul(a, b, v)[0].tobytes()
    lo = slice_bounds(k, v.tile.bk, 8)[2][0]

    def edit(vecs):  # type: ignore[no-untyped-def]
        vecs[0][1 * k + lo + 5] += 1.0e4  # tile row 1, a k of slice 2

    _, report = _checked_with_vectors(a, b, v, edit)
    assert report.abft_failed and report.abft_tile == 1 * v.tile.grid(m, n)[0]


def test_gpu_abft_flags_an_injected_exponent_flip_and_leaves_tiny_ones_below_tolerance() -> None:
    v = make_variant(None, None, "exact", "small", abft=True)
    a, b = _inputs(80, 80, 80)
    gc, ges = reference_matmul(a, b, v)
    rows = injection_rows(2, target=TARGETS["accumulator"], thread=7, kstep=79, index=5,
                          bit=np.array([30, 0]), scope=0)
    errs = np.zeros(2, dtype=np.float32)
    verdicts = run_injections(a, b, v, gc, ges, rows, rel_errors=errs)
    assert verdicts[0] & int(ABFT_DETECTED) and verdicts[0] & 2
    assert verdicts[1] == 2 and 0 < errs[1] < 1e-5  # changed C, below tolerance


def test_gpu_abft_campaign_reports_below_tolerance_faults_apart() -> None:
    v = make_variant(None, None, "fma", "small", abft=True)
    r = run_inkernel_campaign(v, Dims(80, 80, 80), 4000, seed=4,
                              targets=("operand_a", "operand_b", "accumulator"))
    below = r.below_tolerance()
    assert below is not None
    assert below["count"] == sum(e["c_only"] for e in r.effect_counts().values())
    assert sum(e["both"] for e in r.effect_counts().values()) > 0


@pytest.mark.slow
def test_gpu_abft_no_false_positive_in_10000_clean_runs_on_fresh_inputs() -> None:
    """10,000 clean products, every one on fresh random inputs (rows scaled over 10⁻³…10³),
    over 8 shapes (two split), 3 tiles, both modes, ABFT alone and with RMT and ES-M: no
    status word is ever set; a sample of them is bit-exact against the reference."""
    import cupy as cp

    from safemon.kernels.checked import launch_checked, read_status

    shapes = [*SHAPES, (1, 512, 256), (33, 130, 9)]
    kinds = [(c, lv, mode, tile, r) for c, lv, r in ((None, None, "none"), ("ones", "M", "warp"))
             for mode in ("exact", "fma") for tile in ("small", "large", "wide")]
    rng = np.random.default_rng(2026)
    runs = 0
    while runs < 10_000:
        m, n, k = shapes[runs % len(shapes)]
        c, lv, mode, tile, r = kinds[(runs // len(shapes)) % len(kinds)]
        v = make_variant(c, lv, mode, tile, 8 if k >= 4096 else 1, rmt=r, abft=True)
        a = (rng.standard_normal((m, k)) * 10.0 ** rng.integers(-3, 4, (m, 1))).astype(np.float32)
        b = rng.standard_normal((k, n)).astype(np.float32)
        launch = launch_checked(cp.asarray(a), cp.asarray(b), v, a_on_device=True,
                                b_on_device=True)
        assert read_status(launch.status).ok, f"false alarm: run {runs}, {v.name} {m}x{n}x{k}"
        if runs % 997 == 0:
            assert cp.asnumpy(launch.c).tobytes() == reference_matmul(a, b, v)[0].tobytes()
        runs += 1
