"""py-spy of a 2oo3 CuPy daemon (inline or process channels) and this client under
device-resident requests; raw folded stacks to OUT."""
import os, sys, time, subprocess, yaml, numpy as np
from pathlib import Path
import cupy as cp
from safemon.bench.vote import _bench_config, running_daemon
placement, size, secs, outdir = sys.argv[1], sys.argv[2], float(sys.argv[3]), Path(sys.argv[4])
outdir.mkdir(parents=True, exist_ok=True)
work = Path(f"/tmp/spy-{placement}-{size}"); work.mkdir(parents=True, exist_ok=True)
cfg = _bench_config(work, "ipc", "cupy", ["16x16x16"])
cfg["channels"] = [{"name": f"c{i}", "placement": placement} for i in range(3)]
p = work / "config.yaml"; p.write_text(yaml.safe_dump(cfg))
rng = np.random.default_rng(0)
model = "x" in size and size.count("x") == 2 and size.startswith("model")
with running_daemon(p, work / "daemon.log", 240) as client:
    client.control_timeout_s = 60.0
    if size.startswith("model"):
        from safemon.models import Layer
        bsz, hid, depth = (int(v) for v in size[5:].split("x"))
        w = rng.standard_normal((hid, hid), dtype=np.float32) / np.float32(np.sqrt(hid))
        wid = client.register_weight(w)
        mid = client.register_model([Layer(wid, rng.standard_normal(hid).astype(np.float32), "gelu")] * depth)
        x = cp.asarray(rng.standard_normal((bsz, hid), dtype=np.float32))
        call = lambda: client.run(mid, x, timeout=30.0)
    else:
        m, n, k = (int(v) for v in size.split("x"))
        wid = client.register_weight(rng.standard_normal((k, n), dtype=np.float32))
        x = cp.asarray(rng.standard_normal((m, k), dtype=np.float32))
        call = lambda: client.matmul(x, wid, timeout=30.0)
    for _ in range(50): call()
    pid = [int(l.split()[0]) for l in subprocess.run(["pgrep", "-f", "-a", f"safemon run --config {p}"], capture_output=True, text=True).stdout.splitlines()][0]
    spies = [subprocess.Popen(["py-spy", "record", "--nonblocking", "-r", "1000", "-d", str(int(secs)), "-f", "raw", "-o", str(outdir / f"{who}-{placement}-{size}.txt"), "-p", str(q)], stdout=subprocess.DEVNULL, stderr=open(outdir / f"spyerr-{who}.txt", "w")) for who, q in (("daemon", pid), ("client", os.getpid()))]
    time.sleep(0.5)
    rtt = []; end = time.monotonic() + secs - 1
    while time.monotonic() < end:
        t0 = time.perf_counter(); call(); rtt.append(time.perf_counter() - t0)
    for s in spies: s.wait()
    print(placement, size, "requests", len(rtt), "p50 us %.0f" % (np.median(rtt) * 1e6), "p90 %.0f" % (np.percentile(rtt, 90) * 1e6))
