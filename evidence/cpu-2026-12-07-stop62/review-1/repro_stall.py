"""Finding 1: a stall between a stimulus's _attend and the send's clock() marks healthy work late.
Production timing: heartbeat every 0.1 s, timeout 0.5 s, ftti 2.0 s."""
import common
(old, new), cfg = common.both(common.PROD, t0=0.0)
for s in (old, new):
    # healthy: all three heartbeat every 0.1 s, read promptly, up to 10.0
    t = 0.1
    while t <= 10.0 + 1e-9:
        for c in ("c0", "c1", "c2"):
            s.on_heartbeat(c, 0, round(t, 3), sent=round(t, 3))
        assert s.tick(round(t, 3)) == []
        t += 0.1
    # 10.0: poll returns (listened_at = 10.0); a client request read at 10.01 (_attend: 10 ms, nothing)
    # the daemon is descheduled/stopped 0.6 s inside core.handle; the request (budget 1.0 s:
    # e.g. kernels of a new shape) goes to c0 at clock() = 10.61
    s.on_work_sent("c0", 1, 11.61, 10.61)
    # next turn: _advance(10.62) -> _attend reports the stretch 10.0 .. 10.62, then tick
    s.postpone(10.0, 0.62, 10.62)
    lost = s.tick(10.62)
    assert lost == [], lost
    # the poll reads what the channels sent during the stall (stamps 10.1 .. 10.6)
    for k in range(1, 7):
        ts = round(10.0 + k / 10, 3)
        for c in ("c0", "c1", "c2"):
            s.on_heartbeat(c, 0, 10.63, sent=ts)
    # c0 computes the request from 10.61 to 11.40 (deadline 11.61); c1, c2 keep heartbeating
    t = 10.65; found = None
    while t < 11.45:
        t = round(t + 0.01, 3)
        if abs((t * 10) - round(t * 10)) < 1e-9:
            for c in ("c1", "c2"):
                s.on_heartbeat(c, 0, t, sent=t)
        if t == 11.41:
            s.on_work_done("c0", 1, 11.41, sent=11.40)
        for x in s.tick(t):
            found = found or (x.channel, x.detected_at, x.detail)
    print(type(s).__module__, "->", found)
