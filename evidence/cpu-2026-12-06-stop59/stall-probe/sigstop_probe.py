"""SIGSTOP a real 2oo3 daemon (process channels, ipc) for STOP_S while a client sends products."""
import json, os, signal, subprocess, sys, threading, time
from pathlib import Path
import numpy as np, yaml
sys.path.insert(0, os.environ.get("TREE", "/work/main"))
sys.path.insert(0, os.environ.get("TREE", "/work/main") + "/tests")
from runtime.helpers import make_config, operands, reference, same_bits
from safemon.client import Client

stop_s = float(sys.argv[1]) if len(sys.argv) > 1 else 1.0
tmp = Path(f"/tmp/stall/run-{os.getpid()}"); tmp.mkdir(parents=True)
cfg = make_config(tmp, "2oo3", placement="process", transport="ipc",
                  extra={"timing": {"heartbeat_interval_s": 0.1, "heartbeat_timeout_s": 0.5, "dti_s": 1.0,
                                    "selftest_deadline_s": 0.3, "ftti_s": 2.0, "request_deadline_s": 0.5}})
path = tmp / "c.yaml"; path.write_text(yaml.safe_dump(json.loads(cfg.model_dump_json())))
proc = subprocess.Popen([sys.executable, "-m", "safemon", "run", "--config", str(path)],
                        stdout=subprocess.DEVNULL, stderr=open(tmp / "err", "wb"), env={**os.environ, "PYTHONPATH": os.environ.get("TREE", "/work/main")})
try:
    c = Client(cfg)
    for _ in range(200):
        try:
            if c.status()["mode"] == "NORMAL": break
        except Exception: pass
        time.sleep(0.1)
    x, w = operands(); want = reference(x, w, cfg)
    wid = c.register_weight(w)
    answers = []; stop = threading.Event()
    def traffic():
        cc = Client(cfg)
        while not stop.is_set():
            try: answers.append(same_bits(cc.matmul(x, wid, timeout=5.0), want))
            except Exception as e: answers.append(type(e).__name__)
        cc.close()
    t = threading.Thread(target=traffic); t.start()
    time.sleep(1.0)
    os.kill(proc.pid, signal.SIGSTOP); time.sleep(stop_s); os.kill(proc.pid, signal.SIGCONT)
    time.sleep(2.0); stop.set(); t.join(10)
    st = c.status()
    print("mode", st["mode"], "faults", st["faults"])
    print("channels", st.get("channels"))
    from collections import Counter; print(Counter(map(str, answers)))
finally:
    proc.terminate(); proc.wait(10)
