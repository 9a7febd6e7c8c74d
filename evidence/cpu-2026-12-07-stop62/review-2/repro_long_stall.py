"""A: a stall longer than ftti_s + heartbeat_timeout_s - (heartbeat age), reported by
TimerTick's _attend: the self-test sent in that TimerTick is late for a healthy channel
(its clock moved only ftti_s), so new loses it at the same _advance's tick; old keeps it
(excused by the fresh self-test), but loses the channels that were sent nothing.
Production timing (timeout 0.5, ftti 2.0). Daemon: poll ends 10.0; stalled until the
loop top at 12.6; _advance(12.6): TimerTick -> _attend(12.6) -> postpone(10.0, 2.6, 12.6);
self-test to c0 (deadline 12.8) judged at 12.6; supervisor.tick(12.6)."""
import common
(old, new), cfg = common.both(common.PROD, t0=0.0)
for s in (old, new):
    t = 0.1
    while t <= 10.0 + 1e-9:
        for c in ("c0", "c1", "c2"):
            s.on_heartbeat(c, 0, round(t, 3), sent=round(t, 3))
        assert s.tick(round(t, 3)) == []
        t += 0.1
    s.postpone(10.0, 2.6, 12.6)
    s.on_work_sent("c0", 1, 12.8, 12.6)
    lost = sorted(x.channel for x in s.tick(12.6))
    print(type(s).__module__, "lost at 12.6:", lost,
          "| c0 late:", getattr(s._slots["c0"], "work_late", None))
