"""Intra-warp RMT on the GPU (docs/RMT.md): bit-exact against the reference, clean status,
injected faults in one replica flagged, faults in both replicas not (run on the device machine)."""

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
TILES = ["small", "large", "wide", "skinny"]


@pytest.fixture(scope="module", autouse=True)
def _compiled_in_parallel() -> None:
    """The tile × spec RMT builds, compiled in worker processes first (safemon.kernels.precompile)."""
    precompile(make_variant(s[0], s[1], s[2], t, rmt="warp") for t in TILES for s in SPECS)


def _inputs(m: int, n: int, k: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed * 7919 + m * 1_000_003 + n * 1009 + k)
    return (rng.standard_normal((m, k)).astype(np.float32),
            rng.standard_normal((k, n)).astype(np.float32))


@pytest.mark.parametrize("tile", TILES)
@pytest.mark.parametrize("spec", SPECS, ids=lambda s: f"{s[0]}-{s[1]}-{s[2]}")
def test_gpu_rmt_equals_reference_and_status_is_clean(tile: str, spec: tuple) -> None:
    import cupy as cp

    from safemon.kernels.checked import launch_checked, read_status

    for m, n, k in SHAPES[:4]:
        v = make_variant(spec[0], spec[1], spec[2], tile, rmt="warp")
        a, b = _inputs(m, n, k)
        launch = launch_checked(cp.asarray(a), cp.asarray(b), v, a_on_device=True,
                                b_on_device=True)
        report = read_status(launch.status)
        c_ref, es_ref = reference_matmul(a, b, v)
        assert report.ok and not launch.status.get().any()
        assert cp.asnumpy(launch.c).tobytes() == c_ref.tobytes(), v.name
        assert cp.asnumpy(launch.es).tobytes() == es_ref.tobytes(), v.name


def test_gpu_rmt_split_k_equals_reference() -> None:
    import cupy as cp

    import safemon

    a, b = _inputs(64, 64, 4096)
    r = safemon.protected_matmul(a, b, checksum="ones", level="M", rmt="warp", backend="cupy")
    assert r.variant.slices(4096) > 1 and r.variant.rmt == "warp"
    c_ref, es_ref = reference_matmul(a, b, r.variant)
    assert cp.asnumpy(r.c).tobytes() == c_ref.tobytes()
    assert cp.asnumpy(r.es).tobytes() == es_ref.tobytes()


@pytest.mark.slow
def test_gpu_rmt_and_abft_no_false_positive_in_10000_clean_runs() -> None:
    import cupy as cp

    from safemon.kernels.checked import launch_checked, read_status

    runs = 0
    for i, (m, n, k) in enumerate(SHAPES):
        for tile in ("small", "large", "wide"):
            v = make_variant("ones", "M", "fma" if i % 2 else "exact", tile, rmt="warp",
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


def _verdict(v, a, b, **fields) -> int:  # type: ignore[no-untyped-def]
    gc, ges = reference_matmul(a, b, v)
    return int(run_injections(a, b, v, gc, ges, injection_rows(1, **fields))[0])


@pytest.mark.parametrize("copy", [0, 1])
def test_gpu_fault_in_one_replica_is_flagged(copy: int) -> None:
    v = make_variant(None, None, "exact", "small", rmt="warp")  # no ES: only RMT can see it
    a, b = _inputs(40, 40, 40)
    verdict = _verdict(v, a, b, target=TARGETS["accumulator"], thread=5, kstep=3, index=2,
                       bit=30, scope=0, copy=copy)
    assert verdict & int(RMT_DETECTED) and verdict & 2  # C differs in the hit replica


def test_gpu_fault_in_both_replicas_is_not_flagged_by_rmt() -> None:
    v = make_variant(None, None, "exact", "small", rmt="warp")
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
