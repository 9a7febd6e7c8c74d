import sys, time, tempfile, yaml, numpy as np
from pathlib import Path
sys.path.insert(0, ".")
from safemon.bench.vote import running_daemon
cfg = yaml.safe_load(open("configs/2oo3.yaml"))
for ch in cfg["channels"]:
    ch["placement"] = sys.argv[1]
n = int(sys.argv[2])
d = Path(tempfile.mkdtemp())
cfg.setdefault("endpoints", {})["runtime_dir"] = str(d / "rt")
p = d / "c.yaml"; p.write_text(yaml.safe_dump(cfg))
with running_daemon(p, d / "daemon.log", 240.0) as client:
    client.control_timeout_s = 60.0
    w = np.random.default_rng(0).standard_normal((n, n)).astype(np.float32)
    t = time.perf_counter(); client.register_weight(w); print("registered", round(time.perf_counter()-t, 3))
    for i in range(5):
        time.sleep(5)
        st = client.status()
        print(i, st["mode"], [(f["kind"], f["channel"], f["detail"][:60]) for f in st["faults"]], flush=True)
import subprocess
print(subprocess.run(f"grep -E 'scrub_overrun|dti_overrun|channel_lost|overrun' {d}/daemon.log | cut -c1-200 | head -8", shell=True, capture_output=True, text=True).stdout)
