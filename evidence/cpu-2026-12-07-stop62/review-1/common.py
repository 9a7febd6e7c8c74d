"""Shared helpers: build old (94abb59) and new (687947d) supervisors with one config."""
import importlib.util, sys, tempfile
from pathlib import Path
sys.path.insert(0, "/work/wt-sup")
from safemon.channels import supervisor as new_mod
from tests.channels.test_supervisor import FakeLauncher
from tests.runtime.helpers import make_config

_spec = importlib.util.spec_from_file_location("old_supervisor", "/tmp/rev62/old_supervisor.py")
old_mod = importlib.util.module_from_spec(_spec); sys.modules["old_supervisor"] = old_mod; _spec.loader.exec_module(old_mod)

class OldSup(old_mod.Supervisor):
    def on_work_sent(self, channel, key, deadline, now=None):  # old signature ignores now
        return super().on_work_sent(channel, key, deadline)

_CFG = {}
def config(timing=None):
    key = tuple(sorted((timing or {}).items()))
    if key not in _CFG:
        d = Path(tempfile.mkdtemp(dir="/tmp/rev62/cfg"))
        _CFG[key] = make_config(d, "2oo3", extra={"timing": dict(timing or {})})
    return _CFG[key]

# production defaults for the liveness rules (safemon/config.py)
PROD = {"heartbeat_interval_s": 0.1, "heartbeat_timeout_s": 0.5, "ftti_s": 2.0,
        "dti_s": 1.0, "selftest_deadline_s": 0.2, "request_deadline_s": 0.25}

def both(timing=None, t0=0.0):
    cfg = config(timing)
    out = []
    for cls in (OldSup, new_mod.Supervisor):
        s = cls(cfg, FakeLauncher(), epoch=1)
        s.start_all(t0)
        for n in ("c0", "c1", "c2"):
            s.on_register(n, 0, t0, sent=t0)
        out.append(s)
    return out, cfg

import logging, structlog
structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.ERROR))
