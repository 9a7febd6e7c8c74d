"""Redundant multithreading on the GPU (docs/RMT.md), intra-warp and inter-block: bit-exact
against the reference, clean status, no false alarm in 10⁴ clean runs, injected faults in one
replica flagged, faults in both replicas not; for inter-block RMT also a reported mismatch
that names its tile, and where the two copies ran (run on the device machine)."""

from __future__ import annotations

import numpy as np
import pytest

from safemon.dims import Dims
from safemon.evidence.inkernel import run_inkernel_campaign
from safemon.faults.launch import RMT_DETECTED, TARGETS, injection_rows, run_injections
from safemon.kernels.catalog import make_variant
from safemon.kernels.precompile import precompile
from safemon.kernels.reference import reference_matmul

pytestmark = pytest.mark.gpu

SHAPES = [(20, 20, 20), (80, 80, 80), (97, 61, 113), (8, 900, 8), (300, 260, 70), (33, 517, 129)]
SPECS = [(None, None, "exact"), ("ones", "M", "exact"), ("crc32c", "E", "fma"),
         ("ones_fletcher", "I", "exact"), ("xor", "T", "fma")]
TILES = ["small", "large", "wide", "skinny", "half", "wide64"]
KINDS = ["warp", "block"]


@pytest.fixture(scope="module", autouse=True)
def _compiled_in_parallel() -> None:
    """The kind × tile × spec RMT builds, compiled in worker processes first
    (safemon.kernels.precompile)."""
    precompile(make_variant(s[0], s[1], s[2], t, rmt=kind)
               for kind in KINDS for t in TILES for s in SPECS)


def _inputs(m: int, n: int, k: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed * 7919 + m * 1_000_003 + n * 1009 + k)
    return (rng.standard_normal((m, k)).astype(np.float32),
            rng.standard_normal((k, n)).astype(np.float32))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("tile", TILES)
@pytest.mark.parametrize("spec", SPECS, ids=lambda s: f"{s[0]}-{s[1]}-{s[2]}")
def test_gpu_rmt_equals_reference_and_status_is_clean(kind: str, tile: str, spec: tuple) -> None:
    import cupy as cp

    from safemon.kernels.checked import launch_checked, read_status

    for m, n, k in SHAPES:
        v = make_variant(spec[0], spec[1], spec[2], tile, rmt=kind)
        a, b = _inputs(m, n, k)
        launch = launch_checked(cp.asarray(a), cp.asarray(b), v, a_on_device=True,
                                b_on_device=True)
        report = read_status(launch.status)
        c_ref, es_ref = reference_matmul(a, b, v)
        assert report.ok and not launch.status.get().any(), (v.name, m, n, k)
        assert cp.asnumpy(launch.c).tobytes() == c_ref.tobytes(), (v.name, m, n, k)
        assert cp.asnumpy(launch.es).tobytes() == es_ref.tobytes(), (v.name, m, n, k)


def test_gpu_rmt_split_k_equals_reference() -> None:
    import cupy as cp

    import safemon

    a, b = _inputs(64, 64, 4096)
    r = safemon.protected_matmul(a, b, checksum="ones", level="M", rmt="warp", backend="cupy")
    assert r.variant.slices(4096) > 1 and r.variant.rmt == "warp"
    c_ref, es_ref = reference_matmul(a, b, r.variant)
    assert cp.asnumpy(r.c).tobytes() == c_ref.tobytes()
    assert cp.asnumpy(r.es).tobytes() == es_ref.tobytes()


@pytest.mark.parametrize("shape", [(1024, 1024, 256), (512, 1024, 200)])
def test_gpu_rmt_warp_on_half_equals_reference_and_the_c_without_rmt(
    shape: tuple[int, int, int]
) -> None:
    """Where the automatic tile is `large`, intra-warp RMT runs on `half`
    (catalog.RMT_WARP_TILES), split over K as `large` is (1024×1024×256: 2 slices): C, ES and
    the status as the reference says, and C bit for bit the call's without RMT (which, at
    level T, runs `large` with 16-wide k-tiles: catalog.t_level_variant)."""
    import cupy as cp

    import safemon

    a, b = _inputs(*shape)
    r = safemon.protected_matmul(a, b, checksum="ones", level="T", mode="fma", rmt="warp",
                                 backend="cupy")
    plain = safemon.protected_matmul(a, b, checksum="ones", level="T", mode="fma",
                                     backend="cupy")
    assert (r.variant.tile.name, plain.variant.tile.name) == ("half", "large_k16")
    c_ref, es_ref = reference_matmul(a, b, r.variant)
    assert cp.asnumpy(r.c).tobytes() == c_ref.tobytes()
    assert cp.asnumpy(r.es).tobytes() == es_ref.tobytes()
    assert cp.asnumpy(r.c).tobytes() == cp.asnumpy(plain.c).tobytes()


@pytest.mark.parametrize("shape", [(64, 64, 4096), (1, 4096, 4096), (300, 260, 2000)])
def test_gpu_rmt_block_split_k_and_abft_equal_reference(shape: tuple[int, int, int]) -> None:
    """Split-K (each K-slice's pair compares its partial product) and ABFT on top."""
    import cupy as cp

    import safemon

    a, b = _inputs(*shape)
    r = safemon.protected_matmul(a, b, checksum="ones", level="M", rmt="block", abft=True,
                                 backend="cupy")
    assert r.variant.rmt == "block" and r.variant.abft
    c_ref, es_ref = reference_matmul(a, b, r.variant)
    assert cp.asnumpy(r.c).tobytes() == c_ref.tobytes()
    assert cp.asnumpy(r.es).tobytes() == es_ref.tobytes()
    if shape[2] == 4096:
        assert r.variant.slices(shape[2]) > 1


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
def test_gpu_rmt_and_abft_no_false_positive_in_10000_clean_runs(kind: str) -> None:
    import cupy as cp

    from safemon.kernels.checked import launch_checked, read_status

    runs = 0
    for i, (m, n, k) in enumerate(SHAPES):
        for tile in ("small", "large", "wide"):
            v = make_variant("ones", "M", "fma" if i % 2 else "exact", tile, rmt=kind,
                             abft=True)
            a, b = (cp.asarray(x) for x in _inputs(m, n, k, seed=i))
            first = b""
            for _ in range(560):
                launch = launch_checked(a, b, v, a_on_device=True, b_on_device=True)
                assert read_status(launch.status).ok, f"false alarm: {v.name} {m}x{n}x{k}"
                first = first or cp.asnumpy(launch.c).tobytes()
                runs += 1
            assert cp.asnumpy(launch.c).tobytes() == first  # reproducible bit for bit
    assert runs >= 10_000


def test_gpu_rmt_block_mismatch_poisons_the_tile_and_names_it() -> None:
    """The production comparison, driven by hand: tile 4's arrival counter starts at 1, so
    copy 0 of tile 4 (launched in the first wave of 8,192 blocks) takes itself for the second
    arrival and compares against copy 1's tile before copy 1's block (launched thousands of
    blocks later) has run: the pre-filled garbage. The tile must be poison, the status must
    say RMT and name tile 4, and every other tile must be the reference's."""
    import cupy as cp

    from safemon.kernels.checked import STATUS_WORDS, read_status
    from safemon.kernels.gpu import kernel_for, rmt_block_shapes

    m, n, k = 2048, 2048, 64
    v = make_variant(None, None, "fma", "small", rmt="block")
    a, b = _inputs(m, n, k, seed=9)
    gx, gy = v.tile.grid(m, n)
    buf_shape, counters = rmt_block_shapes(v, m, n, 1)
    c = cp.empty((m, n), dtype=cp.float32)
    spare = cp.full(buf_shape, -777.0, dtype=cp.float32)
    count = cp.zeros(counters, dtype=cp.uint32)
    count[4] = 1
    status = cp.zeros(STATUS_WORDS, dtype=cp.uint32)
    es = cp.empty((0,), dtype=cp.uint32)
    kernel_for(v)((gx, 2 * gy, 1), (v.block_threads, 1, 1),
                  (cp.asarray(a), cp.asarray(b), c, es, np.int32(m), np.int32(n), np.int32(k),
                   status, spare, count))
    report = read_status(status)
    assert report.rmt_mismatch and report.rmt_tile == 4
    assert not (report.a_nonfinite or report.b_nonfinite or report.abft_failed)
    got = cp.asnumpy(c)
    bm, bn = v.tile.bm, v.tile.bn
    assert (got[:bm, 4 * bn:5 * bn].view(np.uint32) == 0x7FFFFFFF).all()
    mask = np.ones((m, n), dtype=bool)
    mask[:bm, 4 * bn:5 * bn] = False
    assert got[mask].tobytes() == reference_matmul(a, b, v)[0][mask].tobytes()


def _verdict(v, a, b, **fields) -> int:  # type: ignore[no-untyped-def]
    gc, ges = reference_matmul(a, b, v)
    return int(run_injections(a, b, v, gc, ges, injection_rows(1, **fields))[0])


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("copy", [0, 1])
def test_gpu_fault_in_one_replica_is_flagged(kind: str, copy: int) -> None:
    v = make_variant(None, None, "exact", "small", rmt=kind)  # no ES: only RMT can see it
    a, b = _inputs(40, 40, 40)
    verdict = _verdict(v, a, b, target=TARGETS["accumulator"], thread=5, kstep=3, index=2,
                       bit=30, scope=0, copy=copy)
    assert verdict & int(RMT_DETECTED) and verdict & 2  # C differs in the hit replica


@pytest.mark.parametrize("kind", KINDS)
def test_gpu_fault_in_both_replicas_is_not_flagged_by_rmt(kind: str) -> None:
    v = make_variant(None, None, "exact", "small", rmt=kind)
    a, b = _inputs(40, 40, 40)
    verdict = _verdict(v, a, b, target=TARGETS["accumulator"], block=1, index=0, bit=30,
                       scope=2, copy=-1)
    assert verdict == 2  # an SDC: both replicas computed the same wrong value


def test_gpu_rmt_campaign_detects_every_c_changing_transient_fault() -> None:
    v = make_variant(None, None, "exact", "small", rmt="warp")
    r = run_inkernel_campaign(v, Dims(40, 40, 40), 3000, seed=2,
                              targets=("operand_a", "operand_b", "accumulator"))
    effects = r.effect_counts()
    assert sum(e["c_only"] for e in effects.values()) == 0
    assert sum(e["both"] for e in effects.values()) > 0


@pytest.mark.parametrize("copy", [0, 1])
@pytest.mark.parametrize("scope", [0, 1, 2])
def test_gpu_rmt_block_fault_in_one_copy_is_flagged_in_every_scope(copy: int, scope: int) -> None:
    """Transient, thread-permanent and block-permanent faults in one copy of the block."""
    v = make_variant(None, None, "exact", "small", rmt="block")  # no ES: only RMT can see it
    a, b = _inputs(40, 40, 40)
    verdict = _verdict(v, a, b, target=TARGETS["accumulator"], thread=5 if scope < 2 else -1,
                       block=0, kstep=3, index=2, bit=30, scope=scope, copy=copy)
    assert verdict & int(RMT_DETECTED) and verdict & 2  # C differs in the hit copy


def test_gpu_input_fault_reaches_both_copies_and_is_not_flagged_by_rmt() -> None:
    """An input element is outside the sphere: both copies load the same flipped word."""
    v = make_variant(None, None, "exact", "small", rmt="block")
    a, b = _inputs(40, 40, 40)
    verdict = _verdict(v, a, b, target=TARGETS["input_a"], index=41, bit=30)
    assert verdict == 2


@pytest.mark.parametrize("scope", ["transient", "block"])
def test_gpu_rmt_block_campaign_detects_every_c_changing_fault(scope: str) -> None:
    v = make_variant(None, None, "exact", "small", rmt="block")
    r = run_inkernel_campaign(v, Dims(40, 40, 40), 3000 if scope == "transient" else 600,
                              seed=2, targets=("operand_a", "operand_b", "accumulator"),
                              scope=scope)
    effects = r.effect_counts()
    assert sum(e["c_only"] for e in effects.values()) == 0
    assert sum(e["both"] for e in effects.values()) > 0


def test_gpu_rmt_block_records_both_copies_sms() -> None:
    """The self-test build records the SM of each copy's block: 2·gx·gy entries, each a
    real SM id (the device's SM count bounds them)."""
    import cupy as cp

    from safemon.kernels.gpu import gpu_matmul_recording_sm

    v = make_variant(None, None, "exact", "small", rmt="block")
    a, b = _inputs(300, 260, 70)
    c, _, sm = gpu_matmul_recording_sm(cp.asarray(a), cp.asarray(b), v)
    gx, gy = v.tile.grid(300, 260)
    sms = cp.asnumpy(sm)
    count = cp.cuda.Device().attributes["MultiProcessorCount"]
    assert sms.shape == (2 * gx * gy,) and sms.max() < count
    assert cp.asnumpy(c).tobytes() == reference_matmul(a, b, v)[0].tobytes()
