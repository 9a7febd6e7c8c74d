"""One simulated daemon trajectory driving BOTH supervisors in lockstep: old (6a30a80, no
stamps: counted at read) and new (c89f912, stamps = channel send times). Process channels:
heartbeat every HB while idle and before each item if due, none while computing, result at the
end of each item. Daemon: timers (postpone reported, maybe send work, tick), poll (stretch
reported at start_listening; optional stall inside the poll = late return), handle messages
(on_* then attend -> postpone; optional stall while handling one). Stalls each <= MAXSTALL.
HANG mode: c2 hangs at a random time (its messages stamped at/after it are never sent).
Reports: healthy losses new-only / old-only; for the hung c2, detection time new vs old."""
import random, sys, os, tempfile, logging, structlog
from pathlib import Path
structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.ERROR))
sys.path.insert(0, "/tmp/review-sup2")
from safemon.channels.supervisor import Supervisor as NewSup
from oldsup import OldSupervisor
from safemon.loop_attention import LoopAttention
from tests.channels.test_supervisor import FakeLauncher
from tests.runtime.helpers import make_config

HB = 0.05
NAMES = ("c0", "c1", "c2")
MULTI = bool(os.environ.get("MULTI")); MAXSTALL = float(os.environ.get("MAXSTALL", "1.0"))
HANG = bool(os.environ.get("HANG")); MINSTALL = float(os.environ.get("MINSTALL", "0.06"))
COSTS = [float(c) for c in os.environ.get("COSTS", "0.01,0.04,0.2,0.6,1.2").split(",")]
PSTALL = os.environ.get("PSTALL", "none,none,timers,handle,poll").split(",")

class Chan:
    def __init__(s, name):
        s.name = name; s.queue = []; s.out = []
        s.busy_until = 0.0; s.next_hb = 0.0; s.t = 0.0
    def advance(s, until):
        while True:
            if s.queue and s.queue[0][0] <= max(s.t, s.busy_until):
                recv, key, cost = s.queue.pop(0)
                start = max(recv, s.busy_until, s.t)
                if start > until: s.queue.insert(0, (recv, key, cost)); break
                if start >= s.next_hb:
                    s.out.append((start, "hb", None)); s.next_hb = start + HB
                end = start + cost
                if end > until: s.queue.insert(0, (recv, key, cost)); break
                s.out.append((end, "res", key)); s.busy_until = end; s.t = end
                continue
            nxt = max(s.next_hb, s.busy_until, s.t)
            nxt2 = max(s.queue[0][0], s.busy_until) if s.queue else float("inf")
            if nxt <= until and nxt <= nxt2:
                s.out.append((nxt, "hb", None)); s.next_hb = nxt + HB; s.t = nxt
                continue
            if nxt2 <= until:
                s.t = nxt2; continue
            s.t = until; break

def run(seed, tmp, horizon=20.0, trace=False):
    rng = random.Random(seed)
    hang_t = rng.uniform(1.0, 10.0) if HANG else 1e9
    cfg = make_config(Path(tmp), "2oo3")
    sups = {"old": OldSupervisor(cfg, FakeLauncher(), epoch=1), "new": NewSup(cfg, FakeLauncher(), epoch=1)}
    for s in sups.values():
        s.start_all(0.0)
        for n in NAMES: s.on_register(n, 0, 0.0)
    chans = {n: Chan(n) for n in NAMES}
    att = LoopAttention(0.0)
    now = 0.0; seq = 0
    lost = {"old": {}, "new": {}}
    def clock_adv(dt):
        nonlocal now
        now = round(now + dt, 6)
        for c in chans.values():
            c.advance(now)
            if c.name == "c2": c.out = [m for m in c.out if m[0] < hang_t]
    def attend(t, gone=None):
        if gone is None: gone = att.away(t)
        if gone is not None:
            if trace: print(f"  postpone since={gone.since:.4f} s={gone.seconds:.4f} now={t:.4f}")
            for s in sups.values(): s.postpone(gone.since, gone.seconds, t)
    def tick(t):
        for k, s in sups.items():
            for x in s.tick(t):
                lost[k].setdefault(x.channel, (t, x.detail))
    timers_ran = 0.0
    while now < horizon:
        stall_at = rng.choice(PSTALL)
        stall = round(rng.uniform(MINSTALL, MAXSTALL), 3)
        send = rng.random() < 0.3; cost = rng.choice(COSTS); hpick = rng.choice(NAMES)
        wakes = [w for s in sups.values() if (w := s.next_wakeup()) is not None]
        if now >= min([timers_ran + 0.05] + wakes):
            timers_ran = now; t0 = now
            attend(t0)
            if send:
                seq += 1
                for n in NAMES:
                    c = chans[n]
                    ahead = sum(k[2] for k in c.queue) + max(0.0, c.busy_until - now)
                    dl = now + 0.3 + cost + ahead
                    c.queue.append((now, seq, cost))
                    for s in sups.values(): s.on_work_sent(n, seq, dl)
                    if trace and n == "c0": print(f"  sent seq={seq} cost={cost} dl={dl:.4f} at {now:.4f}")
            clock_adv(0.001)
            if stall_at == "timers": clock_adv(stall)
            tick(t0)
            if trace: print(f" tick {t0:.4f}", {k: (round(s._slots['c0'].last_seen, 4), round(s._slots['c0'].moved, 3)) for k, s in sups.items()})
        while (g := att.away(now)) is not None:
            attend(now, g)
        attend(now, att.start_listening(now))
        start = now
        if not any(c.out for c in chans.values()):
            while now < start + 0.05 and not any(c.out for c in chans.values()):
                clock_adv(0.005)
        if stall_at == "poll": clock_adv(stall)
        att.stop_listening(now, timeout_s=0.05)
        for n in NAMES:
            c = chans[n]
            first = True
            while c.out:
                st, kind, key = c.out.pop(0)
                t = now
                if trace and n == "c0": print(f"  read {n} {kind} {key} sent={st:.4f} at {t:.4f}")
                for k, s in sups.items():
                    kw = (st,) if k == "new" else ()
                    if kind == "hb": s.on_heartbeat(n, 0, t, *kw)
                    else: s.on_work_done(n, key, t, *kw)
                attend(t)
                clock_adv(0.0005)
                if stall_at == "handle" and first and n == (rng.choice(NAMES) if MULTI else hpick):
                    clock_adv(stall); stall_at = "handle" if MULTI else "done"
                first = False
        if HANG and all("c2" in lost[k] for k in lost): break
    return lost, hang_t

if __name__ == "__main__":
    n0, n1 = int(sys.argv[1]), int(sys.argv[2])
    with tempfile.TemporaryDirectory() as tmp:
        if len(sys.argv) > 3:
            print(run(n0, tmp, trace=True)); sys.exit()
        new_only = old_only = both = 0; later = []; diffs = []
        for seed in range(n0, n1):
            lost, hang_t = run(seed, tmp)
            h = {k: {c: v for c, v in lost[k].items() if c != "c2" or not HANG} for k in lost}
            if h["new"] and not h["old"]:
                new_only += 1
                if new_only <= 5: print("NEW-ONLY healthy loss seed", seed, h["new"])
            elif h["old"] and not h["new"]: old_only += 1
            elif h["old"] and h["new"]: both += 1
            if HANG:
                to = lost["old"].get("c2", (1e9,))[0]; tn = lost["new"].get("c2", (1e9,))[0]
                diffs.append(tn - to)
                if tn > to + 1e-9:
                    later.append((seed, round(to - hang_t, 3), round(tn - hang_t, 3)))
        print(f"seeds {n0}-{n1} MULTI={MULTI} MAXSTALL={MAXSTALL} HANG={HANG} healthy: new-only {new_only} old-only {old_only} both {both}")
        if HANG:
            print(f"  hung c2 found later by new: {len(later)} {later[:5]}; new-old min {min(diffs):.3f} max {max(diffs):.3f}")
