"""B: where the excuse the late rule removed remains: a stall inside the stimulus, between
its _attend and the send. c0 hangs after its heartbeat of 10.0; a request read at 10.45
(_attend(10.45): nothing to report; c0 silent 0.45 < 0.5 then), the daemon stalls 1.0 s in
core.handle, sends at 11.45 with deadline 10.73 (10.45 + 0.25 + cost 0.03), judged at 10.45:
not late. Next _attend(11.46) -> postpone(10.45, 1.01, 11.46). Compared: new (judged at
10.45), old, and new judged at the send (11.45, 687947d's wiring)."""
import common
def run(s, judged):
    t = 0.1
    while t <= 10.0 + 1e-9:
        for c in ("c0", "c1", "c2"):
            s.on_heartbeat(c, 0, round(t, 3), sent=round(t, 3))
        s.tick(round(t, 3)); t += 0.1
    for k in (1, 2, 3, 4):  # c1, c2 heartbeat until 10.4; tick at 10.42 (nothing due)
        for c in ("c1", "c2"):
            s.on_heartbeat(c, 0, round(10.0 + k / 10, 3), sent=round(10.0 + k / 10, 3))
    assert s.tick(10.42) == []
    s.on_work_sent("c0", 1, 10.73, judged)
    for c in ("c1", "c2"):
        s.on_work_sent(c, 1, 10.73, judged)
    s.postpone(10.45, 1.01, 11.46)
    for k in range(5, 15):  # c1, c2's heartbeats sent during the stall, read at 11.47
        for c in ("c1", "c2"):
            s.on_heartbeat(c, 0, 11.47, sent=round(10.0 + k / 10, 3))
    for c in ("c1", "c2"):
        s.on_work_done(c, 1, 11.47, sent=10.47)  # answered in the stall (sent 11.45, read later; stamp <= now)
    t = 11.46; found = []
    while t < 14 and not found:
        t = round(t + 0.01, 3)
        if abs(t * 10 - round(t * 10)) < 1e-9:
            for c in ("c1", "c2"):
                s.on_heartbeat(c, 0, t, sent=t)
        found = [(x.channel, x.detected_at, x.detail) for x in s.tick(t)]
    return found
(old, new), _ = common.both(common.PROD)
print("old                :", run(old, 10.45))
print("new, judged 10.45  :", run(new, 10.45))
(_, new2), _ = common.both(common.PROD)
print("new, judged at send:", run(new2, 11.45))
