"""Device probe: SM coverage of one ``cover`` self-test and what it costs (JSON to stdout).

For the default self-test variant (ones/I/exact/small) on this GPU: the cover pattern's size
(≥ 2 blocks per SM), the distinct SMs that ran its blocks in each of several launches, and
CUDA-event medians (p50/p99 over 200 launches, after 20 warm-ups) of the self-test build, the
production build of the same variant at the same size, and the built-in 16x16x16 pattern's
launch; the duty cycle at the default DTI is median / dti_s. Usage: python3 scripts/sm_cover_probe.py
"""

from __future__ import annotations

import datetime
import json

import cupy as cp
import numpy as np

from safemon.config import TimingConfig
from safemon.kernels.catalog import make_variant
from safemon.kernels.gpu import gpu_matmul, gpu_matmul_recording_sm
from safemon.patterns.sm_coverage import cover_pattern, failing_blocks


def _times(fn, runs: int = 200, warm: int = 20) -> dict[str, float]:  # type: ignore[no-untyped-def]
    for _ in range(warm):
        fn()
    out = []
    for _ in range(runs):
        s, e = cp.cuda.Event(), cp.cuda.Event()
        s.record()
        fn()
        e.record()
        e.synchronize()
        out.append(cp.cuda.get_elapsed_time(s, e) * 1000.0)
    return {"p50_us": float(np.median(out)), "p99_us": float(np.percentile(out, 99)), "runs": runs}


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
    small_a, small_b = cp.asarray(np.ones((16, 16), np.float32)), cp.asarray(np.ones((16, 16), np.float32))
    dti = TimingConfig().dti_s
    rec = _times(lambda: gpu_matmul_recording_sm(a, b, v))
    prod = _times(lambda: gpu_matmul(a, b, v))
    old = _times(lambda: gpu_matmul(small_a, small_b, v))
    name = props["name"]
    print(json.dumps({
        "device": name.decode() if isinstance(name, bytes) else str(name), "sm_count": sms,
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "variant": v.name, "pattern": p.id, "blocks": int(np.prod(v.tile.grid(*p.expected_c.shape))),
        "sms_covered_per_launch": covered,
        "selftest_build_kernel": rec, "production_build_kernel": prod,
        "default_16x16x16_kernel": old, "default_dti_s": dti,
        "duty_cycle_at_default_dti": rec["p50_us"] * 1e-6 / dti,
        "ratio_selftest_vs_production_build": rec["p50_us"] / prod["p50_us"],
        "ratio_cover_vs_16x16x16": rec["p50_us"] / old["p50_us"],
        "note": "kernel time only (CUDA events around the launch); the host comparison with "
                "golden and the transfer of C/ES are not included",
    }, indent=2))


if __name__ == "__main__":
    main()
