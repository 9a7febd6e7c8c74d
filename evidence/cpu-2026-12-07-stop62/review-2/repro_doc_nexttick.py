"""C: SAFETY.md "Unless a message of the channel is read first, it is lost at the
supervisor's next tick" does not hold when the stretch reported after the send began
before the judging time (<= 50 ms of unreported time before it). Poll ends at 10.00
(listened_at); c0 last heard (stamp) 9.52, hung. Request read at 10.04: _attend(10.04)
reports nothing (40 ms <= threshold) but _attended_at = 10.04; c0 silent 0.52 > 0.5 there:
its work (deadline 11.0) is late. Stall 0.51 s in handle; next turn's _attend(10.55) ->
postpone(10.00, 0.55, 10.55): c0's clock (9.52 + 0.5 > 10.00) moves to 10.07; tick(10.55)."""
import common
(old, new), _ = common.both(common.PROD)
s = new
for c in ("c0", "c1", "c2"):
    s.on_heartbeat(c, 0, 9.52, sent=9.52)
for c in ("c1", "c2"):
    s.on_heartbeat(c, 0, 10.0, sent=10.0)
assert s.tick(10.0) == []
s.on_work_sent("c0", 1, 11.0, 10.04)
print("late:", s._slots["c0"].work_late)
s.postpone(10.00, 0.55, 10.55)
for c in ("c1", "c2"):
    s.on_heartbeat(c, 0, 10.55, sent=10.5)
print("tick(10.55):", [x.channel for x in s.tick(10.55)], "c0 last_seen", round(s._slots["c0"].last_seen, 3))
t = 10.55
while True:
    t = round(t + 0.01, 3)
    for c in ("c1", "c2"):
        s.on_heartbeat(c, 0, t, sent=t)
    l = s.tick(t)
    if l:
        print("lost at", t, [(x.channel, x.detail) for x in l]); break
