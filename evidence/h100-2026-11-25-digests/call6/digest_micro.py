"""copy_digest / device_digests of this tree against .device/ab_old's model_gpu.py, interleaved."""
import importlib.util, sys, time
import numpy as np, cupy as cp
spec = importlib.util.spec_from_file_location("old_model_gpu", ".device/ab_old/safemon/kernels/model_gpu.py")
old = importlib.util.module_from_spec(spec); spec.loader.exec_module(old)
from safemon.kernels import model_gpu as new
rng = np.random.default_rng(0)
for shape in [(80, 80), (64, 4096)]:
    x = cp.asarray(rng.standard_normal(shape, dtype=np.float32)); d1 = cp.empty_like(x); d2 = cp.empty_like(x)
    assert old.copy_digest(x, d1) == new.copy_digest(x, d2) and bool((d1 == d2).all())
    assert old.device_digests([x, d1, d2]) == new.device_digests([x, d1, d2])
    t = {k: [] for k in ("old copy_digest", "new copy_digest", "old device_digests(3)", "new device_digests(3)")}
    for rep in range(2200):
        for k, fn in (("old copy_digest", lambda: old.copy_digest(x, d1)), ("new copy_digest", lambda: new.copy_digest(x, d2)),
                      ("old device_digests(3)", lambda: old.device_digests([x, d1, d2])), ("new device_digests(3)", lambda: new.device_digests([x, d1, d2]))):
            t0 = time.perf_counter(); fn(); dt = time.perf_counter() - t0
            if rep >= 200: t[k].append(dt)
    print(shape, "  ".join(f"{k}: p50 {np.median(v)*1e6:.1f} p99 {np.percentile(v,99)*1e6:.1f} us" for k, v in t.items()))
# a view over a device pointer, made afresh (old view) against a dict hit (new view)
m = cp.cuda.Memory(1 << 20)
tm = []
for rep in range(2200):
    t0 = time.perf_counter()
    mem = cp.cuda.UnownedMemory(m.ptr, 80 * 80 * 4, m)
    a = cp.ndarray((80, 80), dtype=cp.float32, memptr=cp.cuda.MemoryPointer(mem, 0))
    tm.append(time.perf_counter() - t0)
print("UnownedMemory + ndarray (what view made every call): p50 %.1f us" % (np.median(tm[200:]) * 1e6))
