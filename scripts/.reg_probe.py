"""Time register_weight of 4096x4096 weights against an inline daemon (configs/2oo3.yaml)."""
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
        dt = time.perf_counter() - t
        time.sleep(0.5)
        st = client.status()
        print(f"{sys.argv[1]} register {n}x{n}: {dt:.3f} s; mode {st['mode']}, faults {st.get('faults')}, "
              f"channels {[c['state'] for c in st['channels']]}", flush=True)
import subprocess; print(d)
print(subprocess.run(["grep", "-c", "not acknowledged", str(d / "daemon.log")], capture_output=True, text=True).stdout)
