"""Drives the real Supervisor in daemon call order (sup.on_* before the _attend's postpone,
postpone before tick in _advance). Timing: heartbeat_timeout 0.3, ftti 1.0."""
import tempfile
from pathlib import Path
from safemon.channels.supervisor import Supervisor
from tests.channels.test_supervisor import FakeLauncher
from tests.runtime.helpers import make_config

def three(tmp):
    cfg = make_config(Path(tmp), "2oo3")
    sup = Supervisor(cfg, FakeLauncher(), epoch=5)
    sup.start_all(0.0)
    for n in ("c0", "c1", "c2"):
        sup.on_register(n, 0, 0.0)
    return sup, cfg

def first_loss(sup, name, t0, t1, others=("c1", "c2"), step=0.01):
    t = t0
    while t <= t1:
        for o in others:
            sup.on_heartbeat(o, 0, t)
        if any(x.channel == name for x in sup.tick(t)):
            return round(t, 3)
        t = round(t + step, 3)
    return None

with tempfile.TemporaryDirectory() as tmp:
    # F1a: late poll (SIGSTOP inside poll) of S seconds; c0 sent its last HB at 0.0 and hung.
    for S in (0.9, 2.0, 5.0):
        sup, cfg = three(tmp)
        # poll began at 0.01 with 50 ms timeout -> listened_at = 0.06; returns at S
        now = S
        sup.on_heartbeat("c0", 0, now)          # c0's queued HB (sent 0.0) read first
        sup.postpone(0.06, now - 0.06, now)     # _feed -> _attend
        for o in ("c1", "c2"):
            sup.on_heartbeat(o, 0, now)         # healthy channels' queued HBs
        print(f"F1a stop {S}s: c0 lost at", first_loss(sup, "c0", now, now + 2),
              " moved=", round(sup._slots['c0'].moved, 3))
    # F1b: poll path: stall S in _advance after tick; _start_listening reports it; poll reads
    for S in (0.9, 5.0):
        sup, cfg = three(tmp)
        sup.postpone(0.05, S, 0.05 + S)
        now = 0.05 + S
        sup.on_heartbeat("c0", 0, now)
        for o in ("c1", "c2"):
            sup.on_heartbeat(o, 0, now)
        print(f"F1b stall {S}s: c0 lost at", first_loss(sup, "c0", now, now + 2))
    # F1c: two stretches of 0.9 s in one loop turn (no poll between); c2's HB sent at 0
    # (then hung) read first after the second -> stamped, but A's move is forgotten.
    sup, cfg = three(tmp)
    sup.on_heartbeat("c1", 0, 0.9)            # c1's 2nd message read after stall A
    sup.postpone(0.0, 0.9, 0.9)               # attend: A reported
    print("  after A: c0 last_seen", sup._slots["c0"].last_seen, "moved", sup._slots["c0"].moved)
    sup.on_heartbeat("c0", 0, 1.8)            # c0's old HB read after stall B (stamped)
    sup.postpone(0.9, 0.9, 1.8)
    print("F1c: c0 lost at", first_loss(sup, "c0", 1.8, 4.0),
          "; with c0's HB not read at all:", end=" ")
    sup2, _ = three(tmp)
    sup2.on_heartbeat("c1", 0, 0.9); sup2.postpone(0.0, 0.9, 0.9)
    sup2.postpone(0.9, 0.9, 1.8)
    print(first_loss(sup2, "c0", 1.8, 4.0))
    # F2 (doc): work moves by `left`, not by what the clock may still move
    sup, cfg = three(tmp)
    sup.on_work_sent("c0", 1, 1.0)
    sup.on_heartbeat("c0", 0, 0.9)     # read during the stretch
    sup.postpone(0.0, 0.9, 0.9)
    s = sup._slots["c0"]
    print("F2: clock", s.last_seen, "(moved by 0)", "work", s.work, "moved", s.moved)
