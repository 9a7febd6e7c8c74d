"""Random daemon-order simulation: healthy process channels, daemon stalls <= 0.9 s (ftti 1.0),
at most one stall per loop turn (so each channel socket is drained between two stalls).
Reports any healthy channel declared lost."""
import random, sys, tempfile
from pathlib import Path
from safemon.channels.supervisor import Supervisor
from safemon.loop_attention import LoopAttention
from tests.channels.test_supervisor import FakeLauncher
from tests.runtime.helpers import make_config
import structlog, logging
structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.ERROR))

HB = 0.05
NAMES = ("c0", "c1", "c2")

class Chan:
    """FIFO worker: heartbeats every HB while idle, and right after an item longer than HB."""
    def __init__(s, name):
        s.name = name; s.queue = []; s.out = []  # out: (send_time, kind, key)
        s.busy_until = 0.0; s.next_hb = 0.0; s.t = 0.0
    def advance(s, until):
        while True:
            # next thing: heartbeat when idle & due, or start next item
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
            if s.queue: nxt2 = max(s.queue[0][0], s.busy_until)
            else: nxt2 = float("inf")
            if nxt <= until and nxt <= nxt2:
                s.out.append((nxt, "hb", None)); s.next_hb = nxt + HB; s.t = nxt
                continue
            if nxt2 <= until:
                s.t = nxt2; continue
            s.t = until; break

def run(seed, tmp, horizon=20.0):
    rng = random.Random(seed)
    cfg = make_config(Path(tmp), "2oo3")
    sup = Supervisor(cfg, FakeLauncher(), epoch=1)
    sup.start_all(0.0)
    chans = {n: Chan(n) for n in NAMES}
    for n in NAMES: sup.on_register(n, 0, 0.0)
    att = LoopAttention(0.0)
    now = 0.0; seq = 0; lost = []
    def clock_adv(dt):
        nonlocal now
        now = round(now + dt, 6)
        for c in chans.values(): c.advance(now)
    def attend(t, gone=None):
        if gone is None: gone = att.away(t)
        if gone is not None:
            if TRACE: print(f'  postpone since={gone.since:.4f} s={gone.seconds:.4f} now={t:.4f} c0(last_seen={sup._slots["c0"].last_seen}, heard={sup._slots["c0"].heard}, moved={sup._slots["c0"].moved:.3f}, work={sup._slots["c0"].work})')
            sup.postpone(gone.since, gone.seconds, t)
    timers_ran = 0.0
    while now < horizon:
        stall_at = rng.choice(["none", "none", "timers", "handle", "poll"])
        stall = round(rng.uniform(0.06, 0.9), 3)
        # timers
        wake = sup.next_wakeup()
        if now >= min(timers_ran + 0.05, wake if wake is not None else 1e9):
            timers_ran = now; t0 = now
            attend(t0)
            # maybe send work (self-test/requests) from the timers
            if rng.random() < 0.3:
                seq += 1
                cost = rng.choice([0.01, 0.04, 0.2, 0.6, 1.2])
                for n in NAMES:
                    c = chans[n]
                    ahead = sum(k[2] for k in c.queue) + max(0.0, c.busy_until - now)
                    dl = now + 0.3 + cost + ahead
                    c.queue.append((now, seq, cost))
                    sup.on_work_sent(n, seq, dl)
            clock_adv(0.001)
            if stall_at == "timers": clock_adv(stall)
            for x in sup.tick(t0):
                lost.append((t0, x.channel, x.detail)); return lost
        # poll
        while (g := att.away(now)) is not None:
            attend(now, g)
        attend(now, att.start_listening(now))
        start = now
        timeout = 0.05
        pending = any(m for c in chans.values() for m in c.out)
        if not pending:
            # listen until first message or timeout
            nxt = min([m[0] for c in chans.values() for m in c.out] + [start + timeout])
            step = 0.005
            while now < start + timeout and not any(c.out for c in chans.values()):
                clock_adv(step)
        if stall_at == "poll": clock_adv(stall)
        att.stop_listening(now, timeout_s=timeout)
        for n in NAMES:
            c = chans[n]
            first = True
            while c.out:
                st, kind, key = c.out.pop(0)
                t = now
                if TRACE and n == 'c0': print(f'  read c0 {kind} {key} sent={st:.4f} at {t:.4f}')
                if kind == "hb": sup.on_heartbeat(n, 0, t)
                else: sup.on_work_done(n, key, t)
                attend(t)
                clock_adv(0.0005)
                if stall_at == "handle" and first and n == rng.choice(NAMES):
                    clock_adv(stall); stall_at = MODE
                first = False
    return lost

TRACE = len(sys.argv) > 4
MODE = sys.argv[3] if len(sys.argv) > 3 else "done"
with tempfile.TemporaryDirectory() as tmp:
    n0, n1 = int(sys.argv[1]), int(sys.argv[2])
    bad = 0
    for seed in range(n0, n1):
        l = run(seed, tmp)
        if l:
            bad += 1
            if bad <= 5: print("seed", seed, l)
    print("seeds", n0, n1, "lost-runs", bad)
