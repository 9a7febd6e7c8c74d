"""Reviewer's scenario: each ingress message takes 60 ms more in the daemon loop, c1 hangs; how long until c1 is faulted?"""
import sys, threading, time, os
TREE=os.environ.get("TREE","/work/main"); sys.path.insert(0, TREE)
from pathlib import Path
import tempfile
from tests.runtime.helpers import make_config, operands, system
from safemon.client import Client
from safemon.daemon import Daemon
from safemon.errors import SafemonError
orig = Daemon._client_message
def slow(self, sock, identity, msg):
    time.sleep(0.06); return orig(self, sock, identity, msg)
Daemon._client_message = slow
tmp = Path(tempfile.mkdtemp())
cfg = make_config(tmp, "2oo3", injection=True)
x, w = operands()
with system(cfg) as (d, client):
    client.control_timeout_s = 30
    wid = client.register_weight(w)
    stop = threading.Event()
    def traffic():
        c = Client(cfg)
        while not stop.is_set():
            try: c.matmul(x, wid, timeout=5.0)
            except SafemonError: pass
        c.close()
    ts = [threading.Thread(target=traffic) for _ in range(6)]
    for t in ts: t.start()
    time.sleep(1.0)
    t0 = time.monotonic(); client.inject("c1", "hang")
    found = None
    while time.monotonic() - t0 < 15:
        st = client.status()
        if any(f["channel"] == "c1" for f in st["faults"]):
            found = time.monotonic() - t0; break
        time.sleep(0.05)
    stop.set(); [t.join(10) for t in ts]
    st = client.status()
    print("found_after_s", found, "mode", st["mode"], "faults", [(f["kind"], f["channel"], f["fdti_s"]) for f in st["faults"]])
