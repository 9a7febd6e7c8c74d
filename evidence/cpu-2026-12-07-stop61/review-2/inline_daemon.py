"""Real daemon, three inline channels (numpy), each live request computed serially in launch
for D seconds (a host-memory request, modelled by a sleep before the real step). Reports
channel incarnations/faults after N sequential requests."""
import sys, time, tempfile, logging, structlog
from pathlib import Path
import numpy as np
structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.ERROR))
sys.path.insert(0, "/tmp/review-sup2"); import trace_patch
from safemon.channels import inline
from tests.runtime.helpers import make_config, operands, system, reference, same_bits
D = float(sys.argv[1]) if len(sys.argv) > 1 else 0.2
N = int(sys.argv[2]) if len(sys.argv) > 2 else 4
real = inline._InlineWorker._request_steps
def steps(self, msg):
    if msg.meta.get("job") == "live":
        time.sleep(D)
    return (yield from real(self, msg))
inline._InlineWorker._request_steps = steps
with tempfile.TemporaryDirectory() as tmp:
    cfg = make_config(Path(tmp), "2oo3", placement="inline",
                      extra={"timing": {"request_deadline_s": 1.5, "dti_s": 1.0, "selftest_deadline_s": 0.2, "scrub_interval_s": 10.0, "heartbeat_interval_s": 0.1, "heartbeat_timeout_s": 0.5, "ftti_s": 2.0}})
    x, w = operands()
    with system(cfg) as (daemon, client):
        wid = client.register_weight(w)
        ok = 0
        for i in range(N):
            try:
                c = client.matmul(x, wid, timeout=3.0); ok += same_bits(c, reference(x, w, cfg))
            except Exception as e:
                print("req", i, type(e).__name__, e)
            time.sleep(0.3)
        st = client.status()
        print("released bit-exact:", ok, "/", N, "mode", st["mode"])
        print("channels:", [(c["name"], c["state"], c["incarnation"]) for c in st["channels"]])
        print("faults:", [(f.get("channel"), f.get("kind"), f.get("detail", "")[:60]) for f in st["faults"]][:6])
if len(sys.argv) > 3:
    import trace_patch
    for e in trace_patch.LOG[-int(sys.argv[3]):]: print(e)
