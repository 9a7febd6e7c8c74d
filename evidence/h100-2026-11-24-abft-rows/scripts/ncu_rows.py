import sys
import cupy as cp, numpy as np
from safemon.kernels.catalog import make_variant
from safemon.kernels.abft import abft_weight_vectors, begin_abft, finish_abft
from safemon.kernels.checked import STATUS_WORDS, read_status
from safemon.kernels.gpu import gpu_matmul
m, n, k = 64, 4096, 4096
rng = np.random.default_rng(0)
a = cp.asarray(rng.standard_normal((m, k), dtype=np.float32))
b = cp.asarray(rng.standard_normal((k, n), dtype=np.float32))
for tile in sys.argv[1:]:
    name, split = tile.split(":")
    v = make_variant(None, None, "fma", name, int(split), abft="rows")
    w = abft_weight_vectors(b, v.tile)
    for _ in range(2):
        st = cp.zeros(STATUS_WORDS, dtype=cp.uint32)
        p = begin_abft(m, n, k, v, weights=w)
        c, _ = gpu_matmul(a, b, v, status=st)
        finish_abft(p, a, b, c, int(st.data.ptr))
        assert read_status(st).ok
cp.cuda.Device().synchronize()
