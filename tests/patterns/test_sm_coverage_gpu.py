"""On the device: one device-covering self-test runs blocks on every SM and matches the reference."""

from __future__ import annotations

import numpy as np
import pytest

from safemon.kernels.catalog import make_variant
from safemon.patterns.sm_coverage import cover_pattern, failing_blocks

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("level", ["I", "M", "E", "F", "T"])
def test_one_cover_self_test_runs_on_every_sm_and_matches_golden(level: str) -> None:
    from safemon.kernels.compiler import cuda_available

    if not cuda_available():
        pytest.skip("no CUDA device")
    import cupy as cp

    from safemon.kernels.gpu import gpu_matmul, gpu_matmul_recording_sm

    sms = int(cp.cuda.Device().attributes["MultiProcessorCount"])
    v = make_variant("ones", level, "exact", "small")
    p = cover_pattern(sms, v)
    c, es, sm = gpu_matmul_recording_sm(p.a, p.b, v)
    c_h, es_h, sm_h = cp.asnumpy(c), cp.asnumpy(es), cp.asnumpy(sm)
    assert failing_blocks(p.expected_c, p.expected_es, c_h, es_h, v.tile) == []
    assert len(np.unique(sm_h)) == sms, f"{len(np.unique(sm_h))}/{sms} SMs ran a block"
    # The production build computes the same bits: recording the SM changes nothing else.
    c2, es2 = gpu_matmul(p.a, p.b, v)
    assert np.array_equal(cp.asnumpy(c2).view(np.uint32), c_h.view(np.uint32))
    assert np.array_equal(cp.asnumpy(es2), es_h)
