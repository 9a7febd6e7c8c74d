"""The (39,32) check kernel's GPU time with launches queued back to back (20 per pair of
events, after a spin kernel so the host is ahead), against one launch per pair of events
on an idle GPU (what scripts/ecc_model_probe.py times): the difference is host launch
latency, which a queued or captured sequence does not pay."""
import statistics
import cupy as cp
import numpy as np
from safemon.ecc.gpu import count_errors_device, encode_device, spin_function

spin = spin_function()
rng = np.random.default_rng(0)
name = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
print(f"# {name}: count_errors_device, µs per check, medians of 15")
for mib in (1, 16, 64, 256):
    data = cp.asarray(rng.standard_normal((mib << 20) // 4, dtype=np.float32))
    check = encode_device(data, 32)
    nerr = cp.zeros(1, dtype=cp.uint64)
    single, queued = [], []
    for _ in range(15):
        s, e = cp.cuda.Event(), cp.cuda.Event()
        s.record(); count_errors_device(data, check, 32, out=nerr); e.record(); e.synchronize()
        single.append(cp.cuda.get_elapsed_time(s, e) * 1e3)
        spin((1,), (1,), (np.uint64(200_000),))  # 200 µs: the host queues the rest meanwhile
        s.record()
        for _ in range(20):
            count_errors_device(data, check, 32, out=nerr)
        e.record(); e.synchronize()
        queued.append(cp.cuda.get_elapsed_time(s, e) * 1e3 / 20)
    moved = (mib << 20) * 1.25
    q = statistics.median(queued)
    print(f"{mib:4d} MiB  one launch on an idle GPU {statistics.median(single):7.1f}  "
          f"queued {q:7.1f} ({moved / q / 1e3:5.0f} GB/s)  errors {int(nerr.get()[0])}")
