import tempfile, logging, structlog
from pathlib import Path
structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.ERROR))
from tests.channels.test_supervisor import _three_registered
with tempfile.TemporaryDirectory() as tmp:
    for stale_read in (True, False):
        sup, _ = _three_registered(Path(tmp))
        sup.on_heartbeat("c0", 0, 0.9); sup.postpone(0.0, 0.9, 0.9)
        sup.on_heartbeat("c0", 0, 1.8); sup.postpone(0.9, 0.9, 1.8)
        sup.on_heartbeat("c1", 0, 1.8)
        if stale_read: sup.on_heartbeat("c2", 0, 1.8)
        out = [x.channel for x in sup.tick(1.81)]
        # next turn: poll reads c0,c1 fresh at 1.85; stall C 1.85-2.75 in handling c0's msg;
        sup.on_heartbeat("c0", 0, 1.85); sup.on_heartbeat("c1", 0, 1.85)
        sup.on_heartbeat("c0", 0, 2.75); sup.postpone(1.85, 0.9, 2.75)
        sup.on_heartbeat("c1", 0, 2.75)
        t = 2.76; lost = None
        while lost is None and t < 5 and not out:
            sup.on_heartbeat("c0", 0, t); sup.on_heartbeat("c1", 0, t)
            if any(x.channel == "c2" for x in sup.tick(t)): lost = t
            t = round(t + 0.01, 3)
        print("stale read" if stale_read else "no read", "lost at 1.81" if out else f"c2 lost at {lost}")
