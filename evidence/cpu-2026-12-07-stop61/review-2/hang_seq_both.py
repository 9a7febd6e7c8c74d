"""c2 sends its last heartbeat at 0.0 and hangs. Daemon (ftti 1.0, timeout 0.3):
A: poll stopped 0.05-0.55, c2's heartbeat read at 0.55, then the stretch reported (read, then _attend).
tick at 0.79 (nothing). B: away 0.81-1.31 (reported at 1.31 by the TimerTick's _attend);
the timers then send c2 a self-test (deadline 1.81) before supervisor.tick(1.31).
C: away 1.32-2.22, reported at 2.22 (next TimerTick), tick(2.22); then ticks every 10 ms."""
import sys, tempfile, logging, structlog
from pathlib import Path
structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.ERROR))
sys.path.insert(0, "/tmp/review-sup2")
from safemon.channels.supervisor import Supervisor as New
from oldsup import OldSupervisor as Old
from tests.channels.test_supervisor import FakeLauncher
from tests.runtime.helpers import make_config

def run(cls, stamps):
    kw = (lambda s: (s,)) if stamps else (lambda s: ())
    with tempfile.TemporaryDirectory() as tmp:
        sup = cls(make_config(Path(tmp), "2oo3"), FakeLauncher(), epoch=1); sup.start_all(0.0)
        for n in ("c0", "c1", "c2"): sup.on_register(n, 0, 0.0, *kw(0.0))
        def others(t):
            for n in ("c0", "c1"): sup.on_heartbeat(n, 0, t, *kw(t))
        sup.on_heartbeat("c2", 0, 0.55, *kw(0.0)); sup.postpone(0.05, 0.5, 0.55); others(0.55)
        assert sup.tick(0.79) == []; others(0.79); print("  tick(0.8499):", [x.channel for x in sup.tick(0.8499)]) if False else None
        sup.postpone(0.86, 0.45, 1.31); others(1.31)
        sup.on_work_sent("c2", 7, 1.81)
        found = [x.channel for x in sup.tick(1.31)]
        if found: return 1.31
        sup.postpone(1.32, 0.9, 2.22); others(2.22)
        t = 2.22
        while t < 4:
            if any(x.channel == "c2" for x in sup.tick(t)): return round(t, 2)
            t = round(t + 0.01, 2); others(t)
print("old: hung c2 lost at", run(Old, False))
print("new: hung c2 lost at", run(New, True))
