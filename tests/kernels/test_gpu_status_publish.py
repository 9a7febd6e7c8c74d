"""The device publishes a synchronous call's status block into page-locked host memory
(status.cu, splitk.cu's publishing reduction; safemon.kernels.checked.run_checked).

Every launch path a synchronous call can take publishes: the lean launch unsplit (a kernel
after the MMM kernel) and split (from the reduction), the RawKernel launch of inter-block RMT,
and the ABFT sequence (after its verify kernel). For each, a failing call raises naming the
operand, and the clean call after it settles to the NumPy reference, under both ways of
reading the block: published by the device, and copied by a memcpy.
"""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

# (M, N, K), protected_matmul keywords: unsplit lean, split lean, RMT block (RawKernel), ABFT.
CASES = [
    ((80, 80, 80), {"checksum": "ones", "level": "M"}),
    ((1, 512, 4096), {"checksum": "ones", "level": "T", "mode": "fma"}),
    ((64, 256, 1024), {"checksum": "twos", "level": "M", "split": 4}),
    ((48, 96, 200), {"checksum": "ones", "level": "M", "rmt": "block"}),
    ((64, 128, 512), {"checksum": None, "level": None, "abft": True}),
    ((64, 128, 2048), {"checksum": None, "level": None, "abft": "rows", "split": 4}),
]


def _inputs(m: int, n: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(m * 31 + n * 17 + k)
    return rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)


def test_publish_copies_every_word_of_the_block() -> None:
    import cupy as cp

    from safemon.kernels.checked import STATUS_WORDS, device_writes_host
    from safemon.kernels.gpu import publish_status

    assert device_writes_host(cp, cp.cuda.runtime.getDevice())  # true on every CUDA GPU we run
    words = np.array([1, 0, 0xDEADBEEF, 7, 1, 0xFFFFFFF0, 0, 42], dtype=np.uint32)
    assert words.size == STATUS_WORDS
    mem = cp.cuda.alloc_pinned_memory(4 * STATUS_WORDS)
    row = np.frombuffer(mem, np.uint32, STATUS_WORDS)
    row[:] = 0x55555555
    publish_status(cp.asarray(words), mem.ptr)
    cp.cuda.get_current_stream().synchronize()
    assert row.tolist() == words.tolist()


@pytest.mark.parametrize("published", [True, False], ids=["published", "copied"])
@pytest.mark.parametrize("index", range(len(CASES)))
def test_failures_and_clean_calls_alternate_on_every_launch_path(index: int, published: bool) -> None:
    import cupy as cp

    import safemon
    from safemon.errors import InvalidInputError
    from safemon.kernels import checked
    from safemon.kernels.reference import reference_matmul

    (m, n, k), kwargs = CASES[index]
    a, b = _inputs(m, n, k)
    a_d, b_d = cp.asarray(a), cp.asarray(b)
    bad_a = a.copy()
    bad_a[m // 2, k // 3] = np.nan
    bad_b = b.copy()
    bad_b[k - 1, n // 2] = np.inf
    device = cp.cuda.runtime.getDevice()
    saved = checked._writes_host.get(device)
    checked._writes_host[device] = published and checked.device_writes_host(cp, device)
    try:
        for operand, bad in (("a", (cp.asarray(bad_a), b_d)), ("b", (a_d, cp.asarray(bad_b))),
                             ("a", (cp.asarray(bad_a), b_d))):
            with pytest.raises(InvalidInputError, match=f"finite check of {operand}"):
                safemon.protected_matmul(*bad, **kwargs)
            result = safemon.protected_matmul(a_d, b_d, **kwargs)
            c_ref, es_ref = reference_matmul(a, b, result.variant)
            assert cp.asnumpy(result.c).view(np.uint32).tolist() == c_ref.view(np.uint32).tolist()
            assert cp.asnumpy(result.es).tolist() == es_ref.tolist()
    finally:
        if saved is None:
            checked._writes_host.pop(device, None)
        else:
            checked._writes_host[device] = saved
