"""Device probe: SM coverage of one device-covering self-test and what it costs (JSON to stdout).

For the default self-test variant (ones/I/exact/small) on this GPU: the covering pattern's size
(≥ 2 blocks per SM), the distinct SMs that ran its blocks in each of several launches, and
CUDA-event p50/p99 (200 launches after 20 warm-ups, launch latency hidden behind a spin kernel)
of the self-test build, the production build at the same size and the 16x16x16 launch, plus the
host wall time of a whole self-test (launch, copy back, compare); duty cycle = p50 / dti_s. Usage: python3 scripts/sm_cover_probe.py
"""

from __future__ import annotations

import datetime
import json

import cupy as cp
import numpy as np

from safemon.config import TimingConfig
from safemon.kernels.catalog import make_variant
from safemon.kernels.gpu import gpu_matmul_recording_sm
from safemon.patterns.sm_coverage import cover_pattern, failing_blocks


def _kernel_us(launch, runs: int = 200, warm: int = 20) -> dict[str, float]:  # type: ignore[no-untyped-def]
    """GPU time of one launch (CUDA events), the host launch latency hidden behind a spin
    kernel queued first, as `safemon bench` does: p50/p99 in microseconds."""
    from safemon.bench.timing import kernel_samples_ms, percentiles

    p50, p99 = percentiles(kernel_samples_ms(cp, launch, runs, warm), (50, 99), 1000.0)
    return {"p50_us": p50, "p99_us": p99, "runs": runs}


def _host_us(fn, runs: int = 100, warm: int = 10) -> dict[str, float]:  # type: ignore[no-untyped-def]
    """Host wall time of one whole self-test (launch, copy C/ES/SM back, compare): p50/p99 µs."""
    from safemon.bench.timing import percentiles, wall_samples_s

    p50, p99 = percentiles(wall_samples_s(fn, runs, warm), (50, 99), 1e6)
    return {"p50_us": p50, "p99_us": p99, "runs": runs}


def _launcher(v, a, b, *, record_sm: bool):  # type: ignore[no-untyped-def]
    from safemon.kernels.gpu import kernel_for

    m, k = a.shape
    n = b.shape[1]
    gx, gy = v.tile.grid(m, n)
    c = cp.empty((m, n), dtype=cp.float32)
    es = cp.empty((gx * gy * v.tile.threads, v.words), dtype=cp.uint32)
    sm = cp.empty(gx * gy, dtype=cp.uint32)
    kernel = kernel_for(v, record_sm=record_sm)
    args = (a, b, c, es, np.int32(m), np.int32(n), np.int32(k)) + ((sm,) if record_sm else ())
    return lambda: kernel((gx, gy, 1), (v.tile.threads, 1, 1), args)


def main() -> None:
    dev = cp.cuda.Device()
    props = cp.cuda.runtime.getDeviceProperties(dev.id)
    sms = int(dev.attributes["MultiProcessorCount"])
    v = make_variant("ones", "I", "exact", "small")
    p = cover_pattern(sms, v)
    a, b = cp.asarray(p.a), cp.asarray(p.b)
    covered = []
    for _ in range(10):
        c, es, sm = gpu_matmul_recording_sm(a, b, v)
        assert failing_blocks(p.expected_c, p.expected_es, cp.asnumpy(c), cp.asnumpy(es), v.tile) == []
        covered.append(len(np.unique(cp.asnumpy(sm))))
    small = make_variant("ones", "I", "exact", "small")
    sa, sb = cp.asarray(np.ones((16, 16), np.float32)), cp.asarray(np.ones((16, 16), np.float32))
    dti = TimingConfig().dti_s

    def whole_selftest() -> None:
        c, es, sm = gpu_matmul_recording_sm(a, b, v)
        c_h, es_h, sm_h = cp.asnumpy(c), cp.asnumpy(es), cp.asnumpy(sm)
        assert not failing_blocks(p.expected_c, p.expected_es, c_h, es_h, v.tile)
        assert len(np.unique(sm_h)) == sms

    # The default config's variant (ones/I/exact, tile auto) at its covering shape: auto picks
    # the large tile there, so the shape is 17x16 blocks of 128x128.
    from safemon.config import Config
    from safemon.golden_store import load_patterns
    from safemon.patterns.golden import pattern_shapes

    dcfg = Config.model_validate({"policy": "2oo3", "backend": "numpy"})
    (dm, dn, dk), = pattern_shapes(dcfg, sms)
    dpat = load_patterns(dcfg, sm_count=sms)[0]
    dv = dpat.variant
    da, db = cp.asarray(dpat.a), cp.asarray(dpat.b)

    def default_selftest() -> None:
        c, es, sm = gpu_matmul_recording_sm(da, db, dv)
        c_h, es_h, sm_h = cp.asnumpy(c), cp.asnumpy(es), cp.asnumpy(sm)
        assert not failing_blocks(dpat.expected_c, dpat.expected_es, c_h, es_h, dv.tile)
        assert len(np.unique(sm_h)) == sms

    default = {"pattern": dpat.id, "variant": dv.name, "shape": [dm, dn, dk],
               "kernel": _kernel_us(_launcher(dv, da, db, record_sm=True)),
               "whole_selftest_host": _host_us(default_selftest)}
    rec = _kernel_us(_launcher(v, a, b, record_sm=True))
    prod = _kernel_us(_launcher(v, a, b, record_sm=False))
    old = _kernel_us(_launcher(small, sa, sb, record_sm=False))
    whole = _host_us(whole_selftest)
    name = props["name"]
    print(json.dumps({
        "device": name.decode() if isinstance(name, bytes) else str(name), "sm_count": sms,
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "variant": v.name, "pattern": p.id, "blocks": int(np.prod(v.tile.grid(*p.expected_c.shape))),
        "sms_covered_per_launch": covered,
        "selftest_build_kernel": rec, "production_build_kernel": prod,
        "default_16x16x16_kernel": old, "whole_selftest_host": whole, "default_dti_s": dti,
        "default_config_selftest": default,
        "duty_cycle_default_config_whole_selftest": default["whole_selftest_host"]["p50_us"] * 1e-6 / dti,
        "duty_cycle_kernel_at_default_dti": rec["p50_us"] * 1e-6 / dti,
        "duty_cycle_whole_selftest_at_default_dti": whole["p50_us"] * 1e-6 / dti,
        "ratio_selftest_vs_production_build": rec["p50_us"] / prod["p50_us"],
        "ratio_cover_vs_16x16x16": rec["p50_us"] / old["p50_us"],
        "note": "kernel figures: GPU time between CUDA events with the launch latency hidden "
                "behind a spin kernel (as safemon bench); whole_selftest_host: host wall time of "
                "launch + copy of C, ES and SM ids to the host + comparison with golden, on an "
                "idle GPU (the daemon's queueing and messaging are not included)",
    }, indent=2))


if __name__ == "__main__":
    main()
