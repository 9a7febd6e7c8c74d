"""Time register_weight of 4096x4096 weights against an inline daemon (configs/2oo3.yaml).
(The form that ran in call 6; it was scripts/.reg_probe.py in the tree then.)"""
import sys, time, tempfile, yaml, numpy as np
from pathlib import Path
sys.path.insert(0, ".")
from safemon.bench.vote import running_daemon
cfg = yaml.safe_load(open("configs/2oo3.yaml"))
for ch in cfg["channels"]:
    ch["placement"] = sys.argv[1]
d = Path(tempfile.mkdtemp())
cfg.setdefault("endpoints", {})["runtime_dir"] = str(d / "rt")
p = d / "c.yaml"; p.write_text(yaml.safe_dump(cfg))
rng = np.random.default_rng(0)
with running_daemon(p, d / "daemon.log", 240.0) as client:
    client.control_timeout_s = 60.0
    for n in (256, 4096, 4096, 4096):
        w = rng.standard_normal((n, n)).astype(np.float32)
        t = time.perf_counter(); client.register_weight(w)
        print(f"{sys.argv[1]} register {n}x{n}: {time.perf_counter() - t:.3f} s", flush=True)
