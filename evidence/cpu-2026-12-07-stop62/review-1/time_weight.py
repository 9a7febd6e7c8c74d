"""How long the daemon's core + shell take between a register_weight stimulus's _attend and
the last channel's on_work_sent clock(), for a 64 MiB weight (no stall)."""
import time, numpy as np, sys
SHAPE = tuple(int(x) for x in sys.argv[1].split("x")) if len(sys.argv) > 1 else (4096, 4096)
sys.path.insert(0, "/work/wt-sup")
from safemon.weight_id import weight_id_of
from safemon.transport import Kind
from safemon.transport.wire import encode
w = np.random.default_rng(0).standard_normal(SHAPE).astype(np.float32)  # 64 MiB
for rep in range(2):
    t0 = time.monotonic()
    ok = np.isfinite(w).all()
    t1 = time.monotonic()
    wid = weight_id_of(w)
    t2 = time.monotonic()
    c = np.array(w, dtype=np.float32, order="C", copy=True)
    t3 = time.monotonic()
    sends = []
    for ch in range(3):
        fr = encode(Kind.CONTROL, epoch=1, seq=ch, channel=f"c{ch}", meta={"command": "weight", "args": wid}, arrays=(c,))
        sends.append(time.monotonic() - t0)
    print(f"isfinite {t1-t0:.3f} hash {t2-t1:.3f} copy {t3-t2:.3f} sends at {[round(s,3) for s in sends]}")
