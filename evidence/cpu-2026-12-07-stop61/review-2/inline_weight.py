"""Real daemon, three inline channels (numpy backend, default timing), no monkeypatching:
the client registers one large weight; each inline channel stores it in turn in one lockstep
round (CONTROL "weight" is handled in launch). Reports channel incarnations / faults."""
import sys, time, tempfile, logging, structlog
from pathlib import Path
import numpy as np
structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.ERROR))
sys.path.insert(0, "/tmp/review-sup2"); import trace_patch
from safemon.channels import inline
from tests.runtime.helpers import make_config, system
K, N = int(sys.argv[1]), int(sys.argv[2])
times = []
real = inline._InlineWorker._store_weight
def store(self, *a, **k):
    t = time.monotonic(); r = real(self, *a, **k); times.append((self.name, round(time.monotonic() - t, 3))); return r
inline._InlineWorker._store_weight = store
DEFAULT = {"request_deadline_s": 0.25, "dti_s": 1.0, "selftest_deadline_s": 0.2, "scrub_interval_s": 10.0,
           "heartbeat_interval_s": 0.1, "heartbeat_timeout_s": 0.5, "ftti_s": 2.0}
with tempfile.TemporaryDirectory() as tmp:
    cfg = make_config(Path(tmp), "2oo3", placement="inline", extra={"timing": DEFAULT})
    w = np.random.default_rng(0).standard_normal((K, N)).astype(np.float32)
    with system(cfg) as (daemon, client):
        time.sleep(0.5)
        for i in range(3):
            try:
                client.register_weight((w + np.float32(i)).astype(np.float32))
            except Exception as e:
                print("register:", type(e).__name__, e)
            time.sleep(1.2)
        st = client.status()
        print("store times:", times)
        print("mode", st["mode"], "channels:", [(c["name"], c["state"], c["incarnation"]) for c in st["channels"]])
        print("faults:", [(f.get("channel"), f.get("kind"), str(f.get("detail", ""))[:70]) for f in st["faults"]][:6])
    big = [i for i, e in enumerate(trace_patch.LOG) if e[0] == "heard" and e[3] and e[2] - e[3][0] > 0.2]
    for b in big[:4]:
        print("--"); [print(e) for e in trace_patch.LOG[b-1:b+6]]
