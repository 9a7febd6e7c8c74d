"""Finding 2 (category 1): late work is dropped from the minimum, so a LATER deadline of
non-late work sent after it excuses a hung channel. Production timing (timeout 0.5, ftti 2)."""
import common
(old, new), cfg = common.both(common.PROD, t0=0.0)
for s in (old, new):
    t = 0.1
    while t <= 10.0 + 1e-9:
        for c in ("c0", "c1", "c2"):
            s.on_heartbeat(c, 0, round(t, 3), sent=round(t, 3))
        s.tick(round(t, 3)); t += 0.1
    # request read at 10.01 (deadline 10.01 + 0.25 + 0.02); the daemon stalls 0.6 s in handle;
    # sent at clock() 10.61: c0 looks silent 0.61 s -> late (new rule)
    s.on_work_sent("c0", 1, 10.28, 10.61)
    s.postpone(10.0, 0.62, 10.62)      # next _attend reports the stall (moves deadline 1 too)
    for k in range(1, 7):              # heartbeats c0 sent during the stall; c0 hangs at 10.605
        s.on_heartbeat("c0", 0, 10.625, sent=round(10.0 + k / 10, 3))
    s.on_work_sent("c0", ("weight", "w"), 11.70, 10.63)  # register_weight: not late, later deadline
    found = None; t = 10.63
    while found is None and t < 14:
        t = round(t + 0.01, 3)
        for c in ("c1", "c2"):
            s.on_heartbeat(c, 0, t, sent=t)
        for x in s.tick(t):
            found = (x.channel, x.detected_at, x.detail)
    print(type(s).__module__, "->", found)
