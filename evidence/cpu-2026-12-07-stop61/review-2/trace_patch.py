import time
from safemon.channels import supervisor as S
T0 = [None]
def rel(t):
    if T0[0] is None: T0[0] = t
    return round(t - T0[0], 4)
LOG = []
orig_heard = S.Supervisor._heard
def heard(slot, now, *a):
    r = orig_heard(slot, now, *a)
    LOG.append(("heard", id(slot) % 1000, rel(now), [rel(x) for x in a if x is not None], rel(slot.last_seen)))
    return r
S.Supervisor._heard = staticmethod(heard)
orig_tick = S.Supervisor.tick
def tick(self, now):
    out = orig_tick(self, now)
    s = self._slots["c0"]
    LOG.append(("tick", rel(now), rel(s.last_seen) if s.last_seen else None, {k: rel(v) for k, v in s.work.items()}, [x.channel for x in out]))
    return out
S.Supervisor.tick = tick
