"""ABFT on the GPU (abft.cu): clean products pass with C bit-exact, the device decision and
failed tile equal the NumPy mirror's, and injected faults are flagged (device machine)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from safemon.dims import Dims
from safemon.evidence.inkernel import run_inkernel_campaign
from safemon.faults.launch import ABFT_DETECTED, TARGETS, injection_rows, run_injections
from safemon.kernels.abft import abft_check
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
        assert abft_check(a, b, c_ref, v.tile, v.slices(k)).ok


@pytest.mark.parametrize("side", [False, True], ids=["one-stream", "side-stream"])
@pytest.mark.parametrize("bit", [31, 30, 27, 23, 20, 10, 0])
@pytest.mark.parametrize(("shape", "tile"), [
    ((300, 260, 70), "small"),  # column kernel Y = 16, row kernel 2 n-tiles of 8 per warp
    ((64, 2048, 1024), "small"),  # Y = 2, 4 n-tiles, both products split over K
    ((5, 1024, 512), "skinny"),  # Y = 1, 1 n-tile
    ((200, 600, 300), "large"),  # Y = 2, 1 n-tile
])
def test_gpu_abft_decision_and_tile_equal_the_numpy_mirror(
        bit: int, shape: tuple[int, int, int], tile: str, side: bool) -> None:
    """`side`: the checksum products on the side stream, as `launch_checked` queues them
    (`begin_abft(side=True)` before the kernel, `finish_abft` after C was corrupted on the
    current stream: the products, then the verify kernel after both)."""
    import cupy as cp

    from safemon.kernels.abft import begin_abft, finish_abft, launch_abft
    from safemon.kernels.checked import STATUS_WORDS, StatusReport
    from safemon.kernels.gpu import gpu_matmul

    m, n, k = shape
    a, b = _inputs(m, n, k)
    v = make_variant(None, None, "exact", tile, abft=True)
    rng = np.random.default_rng(bit)
    for _ in range(10):
        i, j = int(rng.integers(0, m)), int(rng.integers(0, n))
        da, db = cp.asarray(a), cp.asarray(b)
        status = cp.zeros(STATUS_WORDS, dtype=cp.uint32)
        pending = begin_abft(m, n, k, v, side=True) if side else None
        c, _ = gpu_matmul(a, b, v)
        bits = c.view(cp.uint32)
        bits[i, j] ^= cp.uint32(1 << bit)
        if pending is not None:
            finish_abft(pending, da, db, c, int(status.data.ptr))
        else:
            launch_abft(da, db, c, v, int(status.data.ptr))
        report = StatusReport.from_words(status.get())
        mirror = abft_check(a, b, cp.asnumpy(c), v.tile)
        assert report.abft_failed == (not mirror.ok)
        assert report.abft_tile == (mirror.failed_tiles[0] if mirror.failed_tiles else None)


#: Split-K shapes for the side-stream tests: (M, N, K) and the split (their partial-product
#: buffers are freed while the side stream may still run).
SIDE_STREAM_CASES = [((300, 260, 70), 1), ((64, 2048, 1024), 4), ((200, 600, 300), 2)]


def _side_stream_refs() -> list[tuple[Any, ...]]:
    """(A, B, variant, C, ES) of the reference for each of `SIDE_STREAM_CASES`."""
    refs = []
    for (m, n, k), split in SIDE_STREAM_CASES:
        a, b = _inputs(m, n, k)
        v = make_variant("ones", "M", "fma", "small", split, abft=True)
        refs.append((a, b, v, *reference_matmul(a, b, v)))
    return refs


def _from_two_threads(refs: list[tuple[Any, ...]], product: Callable[..., tuple[Any, Any, bool]],
                      rounds: int) -> list[str]:
    """Two threads, each on its own non-blocking stream, run `product(a, b, variant)` ->
    (C, ES, check passed) over the cases in a shuffled order, `rounds` times each; the
    failures (a failed check, C or ES not the reference's, a thread that never ends)."""
    import threading

    import cupy as cp

    failures: list[str] = []

    def worker(seed: int) -> None:
        with cp.cuda.Stream(non_blocking=True):
            for idx in np.random.default_rng(seed).permutation(len(refs) * rounds) % len(refs):
                a, b, v, c_ref, es_ref = refs[idx]
                c, es, ok = product(a, b, v)
                if not ok:
                    failures.append(f"{SIDE_STREAM_CASES[idx]}: check failed")
                elif (cp.asnumpy(c).tobytes() != c_ref.tobytes()
                      or cp.asnumpy(es).tobytes() != es_ref.tobytes()):
                    failures.append(f"{SIDE_STREAM_CASES[idx]}: C or ES differs")

    threads = [threading.Thread(target=worker, args=(s,)) for s in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
        if t.is_alive():
            failures.append("a worker never finished")
    return failures


def test_gpu_abft_side_stream_checks_from_two_threads_at_once_pass_bit_exact() -> None:
    """Two threads, each on its own stream and so with its own side stream, queue checked ABFT
    products on the side stream (`begin_abft(side=True)`, MMM kernel, `finish_abft`) at once,
    on split-K shapes:
    every check passes, and C and ES equal the reference bit for bit."""
    import cupy as cp

    from safemon.kernels.abft import begin_abft, finish_abft
    from safemon.kernels.checked import STATUS_WORDS, StatusReport
    from safemon.kernels.gpu import gpu_matmul

    def product(a: Any, b: Any, v: Any) -> tuple[Any, Any, bool]:
        da, db = cp.asarray(a), cp.asarray(b)
        status = cp.zeros(STATUS_WORDS, dtype=cp.uint32)
        pending = begin_abft(a.shape[0], b.shape[1], a.shape[1], v, side=True)
        c, es = gpu_matmul(da, db, v, status=status)
        finish_abft(pending, da, db, c, int(status.data.ptr))
        return c, es, StatusReport.from_words(status.get()).ok

    failures = _from_two_threads(_side_stream_refs(), product, rounds=8)
    assert not failures, failures


def test_gpu_launch_checked_takes_the_side_stream_above_the_threshold(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """`launch_checked` itself on its side-stream branch (the threshold lowered to every
    product): from two threads at once, on split-K shapes, every check passes and C and ES
    equal the reference bit for bit; and B's ECC check, queued before the event the side
    stream waits on, still flags a corrupted word of B with the side stream in use."""
    import cupy as cp

    from safemon.ecc import ProtectedArray
    from safemon.kernels import abft
    from safemon.kernels.checked import launch_checked, read_status

    monkeypatch.setattr(abft, "ABFT_OVERLAP_MIN_MACS", 0)

    def product(a: Any, b: Any, v: Any) -> tuple[Any, Any, bool]:
        launch = launch_checked(cp.asarray(a), cp.asarray(b), v)
        return launch.c, launch.es, read_status(launch.status).ok

    refs = _side_stream_refs()
    failures = _from_two_threads(refs, product, rounds=6)
    assert not failures, failures

    a, b, v, _, _ = refs[1]
    protected = ProtectedArray(cp.asarray(b), name="w")
    protected.verified().view(cp.uint32).ravel()[5] ^= cp.uint32(0b11)  # two bits of a word
    launch = launch_checked(cp.asarray(a), None, v, b_protected=protected)
    report = read_status(launch.status)
    assert not report.ok and report.ecc_bad_words > 0


@pytest.mark.parametrize("abft", [True, "rows"], ids=["full", "rows"])
def test_gpu_abft_flags_an_injected_exponent_flip_and_leaves_tiny_ones_below_tolerance(
        abft: bool | str) -> None:
    v = make_variant(None, None, "exact", "small", abft=abft)
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
