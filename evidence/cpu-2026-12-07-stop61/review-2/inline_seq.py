"""Inline lockstep round, supervisor level: three inline channels, a host-memory request
computed serially in launch (0.2 s each). Heartbeats made at the pump's tick (1.0), results
stamped at each channel's end of compute; everything taken after c0's finish (1.6)."""
import sys, tempfile, importlib.util, logging, structlog
from pathlib import Path
structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.ERROR))
from safemon.channels.supervisor import Supervisor as New
spec = importlib.util.spec_from_file_location("old_supervisor", "/tmp/review-sup2/old_supervisor.py")
old = importlib.util.module_from_spec(spec); sys.modules["old_supervisor"] = old; spec.loader.exec_module(old)
from tests.channels.test_supervisor import FakeLauncher
from tests.runtime.helpers import make_config

def run(cls, stamps):
    with tempfile.TemporaryDirectory() as tmp:
        cfg = make_config(Path(tmp), "2oo3")
        sup = cls(cfg, FakeLauncher(), epoch=1); sup.start_all(0.0)
        for n in ("c0","c1","c2"): sup.on_register(n, 0, 0.0)
        kw = (lambda s: (s,)) if stamps else (lambda s: ())
        for n in ("c0","c1","c2"): sup.on_heartbeat(n, 0, 0.95, *kw(0.95))
        # pump at 1.0: tick makes heartbeats; request seq 1 queued to each (deadline 2.2)
        for n in ("c0","c1","c2"): sup.on_work_sent(n, 1, 2.2)
        ends = {"c0": 1.2, "c1": 1.4, "c2": 1.6}
        for n in ("c0","c1","c2"):  # after_finish of c0 at 1.6 takes every outbox
            sup.on_heartbeat(n, 0, 1.6, *kw(1.0))
            sup.on_work_done(n, 1, 1.6, *kw(ends[n]))
        return [(x.channel, x.detail) for x in sup.tick(1.61)]
print("old (no stamps):", run(old.Supervisor, False))
print("new (stamps):   ", run(New, True))
