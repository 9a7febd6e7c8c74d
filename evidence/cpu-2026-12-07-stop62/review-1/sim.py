"""Lockstep simulator: old (94abb59) and new (687947d) Supervisor driven by one event stream
that follows the daemon's order of calls (safemon/daemon.py: run, _advance, _feed/_attend,
_poll_once, _channel_message, _client_message, _send_channel).

Channels are process channels (stamped messages), single-threaded like ChannelWorker._loop:
a heartbeat at the loop top when due, then one message (work) taken and computed to the end.
A healthy channel finishes every item within its deadline (actual time <= priced cost, FIFO).
A hung channel sends nothing after `hang_at`.

The daemon: loop turns of poll (<= 50 ms), _advance when timers are due (TimerTick sends
self-tests and scrubs, THEN supervisor.tick(now) with the turn's `now`), client requests
sent to all three channels. Stalls (process descheduled / stopped) land at random places:
  poll    - inside the poll (counted away only past its timeout, reported at next attend)
  handle  - inside a client request's core.handle, between _attend(stim.now) and the sends
  timer   - inside TimerTick's handle, between _attend(now) and the sends
  top     - between the loop's `now = clock()` and _advance (sends at clock() later)
  after   - after the tick, before the next poll (reported by _start_listening)
Lockstep: both supervisors get identical calls; timers_at uses the min of both wakeups.

Usage: sim.py MODE N [SEED0] [MAX_STALL] [CLIENT_RATE/s] [LONG_P] [WEIGHT_P] [STALL_P per loop turn]   (MODE healthy|hung; prints one line per finding + summary)
"""
from __future__ import annotations

import math
import random
import sys
from collections import deque

import common
from safemon.loop_attention import LoopAttention

NAMES = ("c0", "c1", "c2")
TIMER_PERIOD = 0.05


class Chan:
    def __init__(self, name, interval, hang_at=None):
        self.name, self.interval, self.hang_at = name, interval, hang_at
        self.t = 0.0
        self.next_hb = 0.0
        self.queue: deque = deque()  # (arrival, key, dur)
        self.cur = None  # (key, finish)
        self.out: deque = deque()  # (stamp, kind, key)

    def _emit(self, stamp, kind, key):
        if self.hang_at is None or stamp < self.hang_at:
            self.out.append((stamp, kind, key))

    def advance(self, until):
        while True:
            if self.cur is not None:
                key, fin = self.cur
                if fin > until:
                    return
                self.t = fin
                self.cur = None
                self._emit(fin, "result", key)
                continue
            if self.t >= self.next_hb:
                self._emit(self.t, "hb", None)
                self.next_hb = self.t + self.interval
            arr = self.queue[0][0] if self.queue else math.inf
            start = max(self.t, arr)
            if start < self.next_hb:
                if start > until:
                    return
                _, key, dur = self.queue.popleft()
                self.t = start
                self.cur = (key, start + dur)
            else:
                if self.next_hb > until:
                    return
                self.t = self.next_hb


class Run:
    def __init__(self, seed, mode, timing=None, duration=20.0, stall_p=0.02, long_p=0.15,
                 trace=False, max_stall=1.5, rate=4.0, weight_p=0.0):
        self.rng = rng = random.Random(seed)
        self.timing = timing or common.PROD
        (self.old, self.new), self.cfg = common.both(self.timing, t0=0.0)
        self.sups = (self.old, self.new)
        tm = self.cfg.timing
        self.tm = tm
        self.mode = mode
        self.hang = None
        if mode == "hung":
            self.hang = (rng.choice(NAMES), rng.uniform(1.0, duration - 6.0))
        self.chans = {n: Chan(n, tm.heartbeat_interval_s,
                              self.hang[1] if self.hang and self.hang[0] == n else None)
                      for n in NAMES}
        self.duration = duration
        self.stall_p = stall_p
        self.long_p = long_p
        self.trace = trace
        self.log = []
        self.T = 0.0
        self.att = LoopAttention(0.0)
        self.timers_ran = -math.inf
        self.next_test = {n: rng.uniform(0.2, tm.dti_s) for n in NAMES}
        self.next_scrub = {n: rng.uniform(0.5, 10.0) for n in NAMES}
        self.queued = {n: {} for n in NAMES}  # key -> (priced cost, deadline)
        self.rate = rate
        self.weight_p = weight_p
        self.next_client = rng.expovariate(rate)
        self.seq = 0
        self.lost = [{}, {}]  # per sup: channel -> (time, detail)
        self.pending_stall = None
        self.max_stall = max_stall
        self.qmoved = {}
        self.late_marks = []
        self.stalls = []

    # -------------------------------------------------------------- helpers
    def L(self, *a):
        if self.trace:
            self.log.append(" ".join(str(x) for x in a))

    def stall(self, where):
        if self.pending_stall == where:
            self.pending_stall = None
            d = self.rng.choice([self.rng.uniform(0.06, 0.6), self.rng.uniform(0.3, 1.5),
                                 self.rng.uniform(0.06, self.max_stall)])
            self.stalls.append((where, self.T, d))
            self.L(f"{self.T:.4f} STALL {where} {d:.3f}")
            self.T += d

    def ahead(self, ch, now):
        return sum(c for c, d in self.queued[ch].values() if d >= now)

    def attend(self, now, gone=None):
        if gone is None:
            gone = self.att.away(now)
        if gone is None:
            return
        self.L(f"{now:.4f} postpone since={gone.since:.4f} s={gone.seconds:.4f}")
        for s in self.sups:
            s.postpone(gone.since, gone.seconds, now)
        # the core's LoopAway: open deadlines after `since` move by the stretch, ftti in all
        for ch in NAMES:
            for key, (c, d) in list(self.queued[ch].items()):
                if d > gone.since:
                    m = self.qmoved.get((ch, key), 0.0)
                    step = max(0.0, min(gone.seconds, self.tm.ftti_s - m))
                    self.qmoved[(ch, key)] = m + step
                    self.queued[ch][key] = (c, d + step)

    def send(self, ch, key, cost, dur, deadline):
        self.T += 0.0003  # encode + zmq send
        t = self.T
        self.queued[ch][key] = (cost, deadline)
        self.qmoved.pop((ch, key), None)
        self.chans[ch].queue.append((t + 0.0002, key, dur))
        self.L(f"{t:.4f} send {ch} {key} deadline={deadline:.4f} dur={dur:.4f}")
        for s in self.sups:
            s.on_work_sent(ch, key, deadline, t)
        if self.new._slots[ch].work_late.get(key) == t:
            # marked late by the new rule: how much daemon time was still unreported then
            unrep = t - self.att.listened_at
            kind = self.stalls[-1][0] if self.stalls and self.stalls[-1][1] + self.stalls[-1][2] >= self.att.listened_at - 1e-9 else None
            self.late_marks.append((ch, key, t, unrep, kind))
            self.L(f"{t:.4f} LATE-MARK {ch} {key} unreported={unrep:.3f} stall={kind}")

    def tick(self, now):
        for i, s in enumerate(self.sups):
            for x in s.tick(now):
                if x.channel not in self.lost[i]:
                    self.lost[i][x.channel] = (now, x.detail)
                    self.L(f"{now:.4f} LOST[{'old' if i == 0 else 'new'}] {x.channel} {x.detail}")

    def wakeup(self):
        ws = [w for s in self.sups if (w := s.next_wakeup()) is not None]
        at = self.timers_ran + TIMER_PERIOD
        ws += [min(self.next_test.values()), min(self.next_scrub.values())]
        return min([at, *ws])

    # -------------------------------------------------------------- stimuli
    def timer_tick(self, now):
        self.attend(now)
        self.stall("timer")
        for ch in NAMES:
            if any(isinstance(k, tuple) for k in self.queued[ch]):
                continue  # storing a weight: out of the self-test schedule (core._register_weight)
            if now >= self.next_test[ch]:
                self.next_test[ch] = now + self.tm.dti_s * self.rng.uniform(0.9, 1.0)
                self.seq += 1
                ahead = self.ahead(ch, now)
                dl = now + self.tm.selftest_deadline_s + max(0.0, ahead - self.tm.selftest_deadline_s / 2)
                self.send(ch, self.seq, 0.01, self.rng.uniform(0.002, 0.02), dl)
            if now >= self.next_scrub[ch]:
                self.next_scrub[ch] = now + 10.0
                ahead = self.ahead(ch, now)
                dl = now + ahead + self.tm.request_deadline_s + 0.05
                self.send(ch, "scrub", 0.05, self.rng.uniform(0.005, min(0.05, self.tm.heartbeat_interval_s)), dl)

    def client_request(self):
        now = self.T
        self.attend(now)
        self.stall("handle")
        if self.rng.random() < self.weight_p:
            # register_weight: stored by every channel, acknowledged within ack_by
            self.seq += 1
            for ch in NAMES:
                a = self.ahead(ch, now)
                self.send(ch, ("weight", self.seq), 0.8, self.rng.uniform(0.3, 0.8),
                          now + a + self.tm.request_deadline_s + 0.8)
            return
        long = self.rng.random() < self.long_p
        cost = self.rng.uniform(0.3, 1.2) if long else self.rng.uniform(0.002, 0.03)
        ahead = max(self.ahead(ch, now) for ch in NAMES)
        if ahead > 1.0:
            return  # admission refuses (BusyError)
        self.seq += 1
        for ch in NAMES:
            a = self.ahead(ch, now)
            dl = now + self.tm.request_deadline_s + a + cost
            self.send(ch, self.seq, cost, cost * self.rng.uniform(0.3, 1.0), dl)

    def read_channels(self):
        for ch in NAMES:
            c = self.chans[ch]
            c.advance(self.T)
            while c.out and c.out[0][0] + 0.0002 <= self.T + 1e-9:
                stamp, kind, key = c.out.popleft()
                self.T += 0.0001
                now = self.T
                self.L(f"{now:.4f} read {ch} {kind} {key} sent={stamp:.4f}")
                for s in self.sups:
                    if kind == "hb":
                        s.on_heartbeat(ch, 0, now, sent=stamp)
                    else:
                        s.on_work_done(ch, key, now, sent=stamp)
                if kind == "result":
                    self.queued[ch].pop(key, None)
                self.attend(now)  # _feed(ChannelMessage) after the supervisor calls

    def next_arrival(self):
        t = math.inf
        for c in self.chans.values():
            c.advance(self.T)
            if c.out:
                t = min(t, c.out[0][0] + 0.0002)
            # what it sends next (bounded look-ahead: its next heartbeat or result)
            if c.cur:
                nxt = c.cur[1]
            elif c.queue and max(c.t, c.queue[0][0]) < c.next_hb:
                nxt = max(c.t, c.queue[0][0]) + c.queue[0][2]
            else:
                nxt = c.next_hb
            if c.hang_at is None or nxt < c.hang_at:
                t = min(t, max(nxt, c.t) + 0.0002)
        return t

    # -------------------------------------------------------------- loop
    def run(self):
        rng = self.rng
        while self.T < self.duration:
            if self.hang and all(self.hang[0] in lost for lost in self.lost):
                break  # both found the hung channel
            if self.pending_stall is None and rng.random() < self.stall_p:
                self.pending_stall = rng.choice(["poll", "handle", "timer", "top", "after"])
            now = self.T
            if now >= self.wakeup():
                self.stall("top")
                self.timers_ran = now
                self.timer_tick(now)
                self.tick(now)
                self.T += 0.0005
            self.stall("after")
            # _poll_once
            gone = self.att.start_listening(self.T)
            self.attend(self.T, gone)
            wait = max(0.0, min(0.05, math.ceil((self.wakeup() - self.T) * 1000 + 1) / 1000))
            end = min(self.T + wait, self.next_arrival(), max(self.T, self.next_client))
            self.T = max(self.T, end)
            self.stall("poll")
            self.att.stop_listening(self.T, timeout_s=wait)
            self.read_channels()
            n = 0
            while self.next_client <= self.T and n < 8:
                n += 1
                self.next_client += rng.expovariate(self.rate)
                self.client_request()
        return self


def main():
    mode = sys.argv[1]
    n = int(sys.argv[2])
    seed0 = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    max_stall = float(sys.argv[4]) if len(sys.argv) > 4 else 1.5
    rate = float(sys.argv[5]) if len(sys.argv) > 5 else 4.0
    long_p = float(sys.argv[6]) if len(sys.argv) > 6 else 0.15
    weight_p = float(sys.argv[7]) if len(sys.argv) > 7 else 0.0
    stall_p = float(sys.argv[8]) if len(sys.argv) > 8 else 0.02
    stats = {"runs": 0, "new_only_lost": 0, "old_only_lost": 0, "both_lost": 0,
             "hung_new_later": 0, "hung_new_earlier": 0, "hung_same": 0, "hung_undetected": 0,
             "max_later": 0.0, "max_earlier": 0.0}
    for seed in range(seed0, seed0 + n):
        r = Run(seed, mode, max_stall=max_stall, rate=rate, long_p=long_p, weight_p=weight_p, stall_p=stall_p).run()
        stats["runs"] += 1
        if mode == "healthy":
            lo, ln = set(r.lost[0]), set(r.lost[1])
            if ln - lo:
                stats["new_only_lost"] += 1
                why = []
                for c in sorted(ln - lo):
                    marks = [m for m in r.late_marks if m[0] == c and m[2] <= r.lost[1][c][0]]
                    why.append(marks[-1] if marks else None)
                    cause = "none" if not marks else f"unreported>{0.05}" if marks[-1][3] > 0.05 else "reported"
                    stats.setdefault("cause_" + cause, 0)
                    stats["cause_" + cause] += 1
                print(f"seed {seed}: NEW ONLY lost {sorted(ln - lo)} "
                      f"{[(round(r.lost[1][c][0], 4), r.lost[1][c][1]) for c in sorted(ln - lo)]} "
                      f"late mark (ch, key, sent, unreported away, stall) {why}")
            if lo - ln:
                stats["old_only_lost"] += 1
                print(f"seed {seed}: OLD ONLY lost {sorted(lo - ln)}")
            if lo & ln:
                stats["both_lost"] += 1
        else:
            ch, h = r.hang
            to, tn = r.lost[0].get(ch), r.lost[1].get(ch)
            others = [(i, c) for i in (0, 1) for c in r.lost[i] if c != ch]
            if others:
                stats.setdefault("healthy_lost_too_new_only", 0)
                stats["healthy_lost_too_new_only"] += all(i == 1 for i, _ in others)
                print(f"seed {seed}: healthy lost too: {others}")
            if to is None or tn is None:
                stats["hung_undetected"] += 1
                print(f"seed {seed}: hung {ch}@{h:.3f} undetected old={to} new={tn}")
                continue
            if tn[0] < h or to[0] < h:
                stats.setdefault("lost_before_hang_new", 0)
                stats.setdefault("lost_before_hang_old", 0)
                stats["lost_before_hang_new"] += tn[0] < h
                stats["lost_before_hang_old"] += to[0] < h
                print(f"seed {seed}: hung {ch}@{h:.3f} LOST BEFORE IT HUNG old {to} new {tn}")
                continue
            d = tn[0] - to[0]
            if d > 1e-9:
                stats["hung_new_later"] += 1
                stats["max_later"] = max(stats["max_later"], d)
                print(f"seed {seed}: hung {ch}@{h:.3f} NEW LATER by {d:.3f}: old {to} new {tn}")
            elif d < -1e-9:
                stats["hung_new_earlier"] += 1
                stats["max_earlier"] = max(stats["max_earlier"], -d)
            else:
                stats["hung_same"] += 1
    print("SUMMARY", mode, f"max_stall={max_stall} rate={rate} long_p={long_p} weight_p={weight_p} stall_p={stall_p}", stats)


if __name__ == "__main__":
    main()
