"""Host time per phase of the row-only ABFT path at 64x4096x4096 (submission only)."""
import statistics, time
import cupy as cp, numpy as np
from safemon.kernels.catalog import make_variant
from safemon.kernels.abft import abft_weight_vectors, begin_abft, finish_abft, plan_abft, _queue_rows, launch_abft_verify
from safemon.kernels.checked import STATUS_WORDS, launch_checked
from safemon.kernels.gpu import gpu_matmul, function_for
m, n, k = 64, 4096, 4096
rng = np.random.default_rng(0)
a = cp.asarray(rng.standard_normal((m, k), dtype=np.float32))
b = cp.asarray(rng.standard_normal((k, n), dtype=np.float32))
v = make_variant(None, None, "fma", "wide64", 8, abft="rows")
plain = make_variant(None, None, "fma", "wide64", 8)
w = abft_weight_vectors(b, v.tile)
ph = {x: [] for x in ("zeros", "begin", "matmul", "plan", "rows", "verify", "plain_launch_checked")}
for i in range(300):
    t0 = time.perf_counter(); st = cp.zeros(STATUS_WORDS, dtype=cp.uint32)
    t1 = time.perf_counter(); p = begin_abft(m, n, k, v, weights=w)
    t2 = time.perf_counter(); c, _ = gpu_matmul(a, b, v, status=st)
    t3 = time.perf_counter(); plan = plan_abft(m, n, k, v, weights=w)
    t4 = time.perf_counter(); _queue_rows(function_for, plan, a)
    t5 = time.perf_counter(); launch_abft_verify(c, plan, int(st.data.ptr))
    t6 = time.perf_counter(); launch_checked(a, b, plain)
    t7 = time.perf_counter()
    for key, d in zip(ph, (t1-t0, t2-t1, t3-t2, t4-t3, t5-t4, t6-t5, t7-t6)):
        ph[key].append(d * 1e6)
    if i % 20 == 0:
        cp.cuda.Device().synchronize()
cp.cuda.Device().synchronize()
print("host µs (median of 300):", {k2: round(statistics.median(x[50:]), 1) for k2, x in ph.items()})
