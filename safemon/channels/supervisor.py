"""The channel supervisor: starts channels, watches their liveness, restarts them on request.

It decides nothing about safety: the safe-state controller says *when* a channel is
restarted (with backoff) or isolated, and the daemon shell forwards those instructions
here. The supervisor carries them out through an injected `Launcher` and reports what it
observes: a channel registered (`Started`, the controller's `ChannelStarted`; it then
votes again only after passing a self-test, which is the controller's rule), or a channel
lost (`Lost`: its process/thread exited - kind "crash" - or it was silent for
`timing.heartbeat_timeout_s` - kind "heartbeat_lost").

A channel's loop is single-threaded: while it computes a product (or compiles the kernels a
new shape needs, or stores a weight) it sends no heartbeat, and it sends one between two
items of work. Work sent to it and not answered yet (`on_work_sent` / `on_work_done`: a
request or self-test until its result, a weight to store until its acknowledgement)
therefore excuses its silence until the *earliest* deadline of that work still due after its
last heartbeat: the heartbeat timeout runs from that deadline (or from the last heartbeat
when there is none). The answer to work it was sent is heard as a heartbeat: its loop is
alive then, and its next heartbeat may still be on its way (until 2026-12-06 the answer only
ended the excuse, so a channel that had stored a weight for longer than the timeout was
lost in the moment between its acknowledgement and its next heartbeat, and one client's
registration of a large weight drove a CPU daemon to SAFE). A channel still silent then is
lost as before; a missed request or
self-test deadline (or weight acknowledgement) has blamed it in the meantime. Only the
earliest deadline counts, so work that keeps arriving (self-tests every DTI) never keeps a
hung channel alive, and work sent after a channel's silence has run out excuses nothing until
a message the channel sent at or after it is read (a silence that had already run out is not
the work's).

Time is passed in (`now`, monotonic seconds), so every rule is testable without sleeping
(STYLE.md item 9). Not thread-safe: the daemon's loop thread owns it.
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

import structlog

from safemon.channels.launcher import ChannelHandle, Launcher
from safemon.config import Config
from safemon.seconds import postponed

__all__ = ["Lost", "Started", "Supervisor"]

log = structlog.get_logger("safemon.supervisor")

#: How long a channel asked to stop may take before it is killed (seconds).
STOP_GRACE_S = 1.0
#: A freshly spawned interpreter imports numpy, pydantic and zmq (and CuPy compiles kernels)
#: before it can register: much longer than a heartbeat timeout, but still bounded.
STARTUP_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Started:
    """Channel `channel` (incarnation `incarnation`) registered at `now`."""

    channel: str
    incarnation: int
    now: float


@dataclass(frozen=True)
class Lost:
    """Channel `channel` is gone: `kind` "crash" (exited) or "heartbeat_lost" (silent)."""

    channel: str
    kind: str
    detected_at: float
    detail: str


@dataclass
class _Slot:
    incarnation: int = -1
    handle: ChannelHandle | None = None
    started_at: float = 0.0
    # When its heartbeat timeout starts to run, unless its work excuses more: when it was
    # last known alive (`alive`), moved later by `postpone`. None until it registers.
    last_seen: float | None = None
    heard: float | None = None  # when it was last heard (as read; never moved)
    # The latest send time of a message read from it (never after that message was read):
    # when it was last known alive. A message that waited in its socket is as old as this
    # says, however late it is read.
    alive: float | None = None
    # Work sent to this incarnation and not answered: key (the work's) -> deadline. Entries
    # due before `heard` are dropped as they are met (they excuse nothing any more).
    work: dict[Hashable, float] = field(default_factory=dict)
    # key -> seconds `postpone` moved that work's deadline in all (at most `ftti_s`)
    work_moved: dict[Hashable, float] = field(default_factory=dict)
    # Work sent when its silence had already run out (key -> when it was sent): it excuses
    # nothing until a message sent at or after that time is read from the channel.
    work_late: dict[Hashable, float] = field(default_factory=dict)
    watching: bool = False  # a loss is reported once, then watching stops
    # Seconds `postpone` moved its registration or heartbeat clock past when it started or
    # was last known alive (at most `ftti_s`)
    moved: float = 0.0
    restart_at: float | None = None
    wanted: bool = True  # False once isolated / stopped


@dataclass
class Supervisor:
    """Starts and watches the configured channels.

    Args:
        config: the deployment (channel names, heartbeat timeout).
        launcher: starts one channel (process or stream).
        epoch: the daemon epoch handed to each channel.
        startup_timeout_s: how long a started channel may take to register.
    """

    config: Config
    launcher: Launcher
    epoch: int
    startup_timeout_s: float = STARTUP_TIMEOUT_S
    _slots: dict[str, _Slot] = field(default_factory=dict)
    #: Handles asked to stop: [handle, kill-after time, killed yet]. `tick` reaps them and
    #: SIGKILLs (without waiting) those still alive past their grace.
    _stopping: list[list[Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._slots = {name: _Slot() for name in self.config.channel_names}

    # -------------------------------------------------------------- commands

    def start_all(self, now: float) -> None:
        """Start every channel (incarnation 0)."""
        for name in self._slots:
            self._start(name, now)

    def restart(self, channel: str, delay: float, now: float) -> None:
        """Restart `channel` `delay` seconds from `now` (the controller's backoff)."""
        slot = self._slots[channel]
        slot.wanted = True
        slot.watching = False  # its faults are already being handled
        slot.restart_at = now + delay

    def isolate(self, channel: str, now: float) -> None:
        """Stop `channel` and keep it stopped (until a `restart`). Returns at once: the
        channel is asked to stop now and killed by `tick` if it is still running
        `STOP_GRACE_S` later, so a hung channel never stalls the daemon's reaction."""
        slot = self._slots[channel]
        slot.wanted = False
        slot.watching = False
        slot.restart_at = None
        self._kill(slot, now)

    def stop_all(self, timeout_s: float = 2.0) -> None:
        """Stop every channel (shutdown)."""
        for slot in self._slots.values():
            slot.wanted = False
            slot.restart_at = None
            if slot.handle is not None:
                slot.handle.stop(timeout_s)
        for handle, _deadline, _killed in self._stopping:
            handle.stop(timeout_s)
        self._stopping.clear()

    # -------------------------------------------------------------- observations

    def running(self, channel: str) -> bool:
        """Whether `channel` runs or is about to (a restart pending); False once it exited
        or was stopped with nothing planned."""
        slot = self._slots[channel]
        return slot.restart_at is not None or (slot.handle is not None and slot.handle.alive())

    def lost(self, channel: str) -> bool:
        """Whether the current incarnation was reported lost (or stopped) and nothing is
        planned for it: no restart pending and no longer watched. Such a channel will
        never register again by itself (a hung process may still be alive)."""
        slot = self._slots[channel]
        return slot.restart_at is None and not slot.watching

    def registered(self, channel: str) -> bool:
        """Whether the current incarnation registered and is still watched (running)."""
        slot = self._slots[channel]
        return slot.wanted and slot.watching and slot.last_seen is not None

    def awaiting_registration(self, channel: str) -> bool:
        """Whether the current incarnation was started and has not registered yet."""
        slot = self._slots[channel]
        return slot.handle is not None and slot.watching and slot.last_seen is None

    def process_alive(self, channel: str) -> bool:
        """Whether the current incarnation's process (or thread) exists and has not exited;
        False when it was stopped (isolated) or has none yet. Watched or not: a channel
        reported lost for its silence may still run."""
        handle = self._slots[channel].handle
        return handle is not None and handle.alive()

    def has_process(self, channel: str) -> bool:
        """Whether `channel` has a current incarnation that was not asked to stop (False
        once isolated or stopped, until a restart starts another)."""
        return self._slots[channel].handle is not None

    def last_heard(self, channel: str) -> float | None:
        """When a message of the current incarnation was last read (`now` of the read;
        None: not since it started). Kept after the channel was reported lost: what it
        sends is still read, though it is no longer watched."""
        return self._slots[channel].heard

    def incarnation(self, channel: str) -> int:
        """The incarnation currently running (or being started) for `channel`."""
        return self._slots[channel].incarnation

    def on_register(self, channel: str, incarnation: int, now: float,
                    sent: float | None = None) -> Started | None:
        """A REGISTER, sent at `sent` (the channel's stamp, same monotonic clock; None: at
        `now`), was read at `now`; `Started` if it is from the current incarnation."""
        slot = self._slots.get(channel)
        if slot is None or incarnation != slot.incarnation or not slot.wanted:
            return None
        self._heard(slot, now, sent)
        slot.watching = True
        return Started(channel, incarnation, now)

    def on_heartbeat(self, channel: str, incarnation: int, now: float,
                     sent: float | None = None) -> Started | None:
        """A HEARTBEAT, sent at `sent` (None: at `now`), was read at `now` (only the current
        incarnation's count). The first one of an incarnation whose REGISTER was lost (sent
        before the daemon's socket connected) stands for the registration: `Started` is
        returned then."""
        slot = self._slots.get(channel)
        if slot is None or incarnation != slot.incarnation or not slot.wanted:
            return None
        if slot.last_seen is None:
            return self.on_register(channel, incarnation, now, sent)
        self._heard(slot, now, sent)
        return None

    def on_work_sent(self, channel: str, key: Hashable, deadline: float, now: float) -> None:
        """Work `key` (its sequence number, or a weight's id) with this `deadline` (same
        clock) went to `channel`'s current incarnation: it may be silent until then. `now`
        is when the work is judged: the latest time up to which the daemon's time away has
        been reported (`postpone`), the time of the stimulus that sent it or later; the
        actual send may come later, and a stall between the two is not yet counted.

        Work sent after the channel's silence has run out (at `now` it has been silent for
        longer than the heartbeat timeout) is late: it cannot explain a silence that had run
        out before it. Late work excuses nothing until a message the channel sent at or after
        `now` is read, and while some of its work is late, its other work excuses it until
        the earliest deadline of all its work, late or not, as before (`_silent_since`)."""
        slot = self._slots.get(channel)
        if slot is None or not slot.watching:
            return
        late = (slot.last_seen is not None
                and now - self._silent_since(slot) > self.config.timing.heartbeat_timeout_s)
        slot.work[key] = deadline
        slot.work_moved.pop(key, None)
        if late:
            slot.work_late[key] = now
        else:
            slot.work_late.pop(key, None)

    def on_work_done(self, channel: str, key: Hashable, now: float,
                     sent: float | None = None) -> None:
        """`channel` answered work `key` (a result, a weight acknowledgement), sent at `sent`
        (None: at `now`) and read at `now`: the work's excuse ends, and, when that work was
        sent to its current incarnation and is still awaited, the answer counts as a
        heartbeat sent then."""
        slot = self._slots.get(channel)
        if slot is None:
            return
        slot.work_moved.pop(key, None)
        slot.work_late.pop(key, None)
        if slot.work.pop(key, None) is not None and slot.watching:
            self._heard(slot, now, sent)

    @staticmethod
    def _heard(slot: _Slot, now: float, sent: float | None) -> None:
        """`slot`'s channel was heard at `now` through a message it sent at `sent` (never
        taken as later than `now`; None: at `now`). The message shows it alive when it was
        sent, not when it was read: its silence runs from the latest send time read so far,
        and a message that waited in its socket while the daemon was away (`postpone`)
        gives back none of the time that moved its clock since then. Its heartbeat clock
        (`last_seen`) never goes back, and the part of it past that send time stays
        counted against `ftti_s` (`moved`)."""
        alive = now if sent is None else min(sent, now)
        slot.heard = now
        if slot.alive is None or alive > slot.alive:
            slot.alive = alive
        for key in [k for k, at in slot.work_late.items() if at <= slot.alive]:
            del slot.work_late[key]  # heard since it was sent: it excuses again
        if slot.last_seen is None or slot.alive > slot.last_seen:
            slot.last_seen = slot.alive
        slot.moved = slot.last_seen - slot.alive

    def postpone(self, since: float, seconds: float, now: float) -> None:
        """The daemon read no channel message for `seconds` of the time after `since` (its
        loop was busy, stalled or descheduled; `safemon.loop_attention`): that time is not
        counted as any channel's silence. A channel whose silence would expire after `since`
        (its registration, or its heartbeat timeout, which runs from when it was last known
        alive or the deadline of its unanswered work) has that clock moved later:
        - its registration or heartbeat clock by the part of the stretch after it (all of
          `seconds` for a clock before `since`; a clock inside the stretch was set by a
          message sent, or for an inline channel taken, then), never past `now`, and never more than `timing.ftti_s` past
          when the channel started or was last known alive (the send time of the latest
          message read from it: `_heard`);
        - each deadline of its unanswered work by as much as the clock may still move
          before this stretch, and by no more than `ftti_s` in all
          (`safemon.seconds.postponed`).
        So a daemon that is away most of the time still finds a channel that went silent,
        and a message of a hung channel that waited in its socket through stretches away
        excuses nothing past its own send time plus `ftti_s` (docs/SAFETY.md, "Who is
        late")."""
        timing = self.config.timing
        for slot in self._slots.values():
            if not slot.watching:
                continue
            left = max(0.0, min(seconds, timing.ftti_s - slot.moved))  # the clock may move
            if slot.last_seen is None:
                if slot.started_at + self.startup_timeout_s > since:
                    slot.started_at = self._moved(slot, slot.started_at, since, seconds, left,
                                                  now)
            elif self._silent_since(slot) + timing.heartbeat_timeout_s > since:
                slot.last_seen = self._moved(slot, slot.last_seen, since, seconds, left, now)
                for key, deadline in slot.work.items():  # the whole clock moves
                    slot.work[key], slot.work_moved[key] = postponed(
                        deadline, slot.work_moved.get(key, 0.0), since=-math.inf,
                        seconds=left, limit=timing.ftti_s)

    @staticmethod
    def _moved(slot: _Slot, clock: float, since: float, seconds: float, left: float,
               now: float) -> float:
        """`clock` (`slot`'s registration start or heartbeat clock) after `postpone(since,
        seconds, now)`: moved to the end of the stretch (`seconds` later when it lies
        before `since`; a clock inside the stretch was set by a message sent then, and
        moves by the rest of the stretch only), never past `now`, and by no more than
        `left` (what `ftti_s` less `slot.moved` allows). The step is added to
        `slot.moved`."""
        rest = seconds - min(max(0.0, clock - since), seconds)  # the stretch after `clock`
        step = max(0.0, min(left, rest, now - clock))
        slot.moved += step
        return clock + step

    @staticmethod
    def _silent_since(slot: _Slot) -> float:
        """When the heartbeat timeout of a registered channel starts to run: its heartbeat
        clock (`last_seen`), or the earliest deadline of its unanswered work due after it
        was last heard, if that is later. Late work (`on_work_sent`) never moves it later
        than without it: when all its work is late, the heartbeat clock alone counts, and
        otherwise the earliest deadline of all its work, late or not. Work due before it
        was heard is dropped."""
        assert slot.last_seen is not None and slot.heard is not None
        heard = slot.heard
        for key in [k for k, d in slot.work.items() if d <= heard]:
            del slot.work[key]
            slot.work_moved.pop(key, None)
            slot.work_late.pop(key, None)
        if all(k in slot.work_late for k in slot.work):  # none, or all of it late
            return slot.last_seen
        return max(slot.last_seen, min(slot.work.values()))

    def tick(self, now: float) -> list[Lost]:
        """Carry out due restarts and report channels found lost at `now`."""
        out: list[Lost] = []
        timeout = self.config.timing.heartbeat_timeout_s
        still: list[list[Any]] = []
        for entry in self._stopping:
            handle, deadline, killed = entry
            if not handle.alive():
                continue
            if killed and now >= deadline + STOP_GRACE_S:
                # Killed and still running (a stream thread stuck in native code): no
                # longer waited for, so the channel's restart goes ahead.
                log.error("channel_abandoned", channel=handle.name, incarnation=handle.incarnation)
                continue
            if now >= deadline and not killed:
                log.warning("channel_killed", channel=handle.name, incarnation=handle.incarnation)
                handle.kill()
                entry[2] = True
            still.append(entry)
        self._stopping = still
        for name, slot in self._slots.items():
            if slot.restart_at is not None and now >= slot.restart_at:
                # The old incarnation must be gone before the new one binds its address: it
                # is asked to stop (and killed after STOP_GRACE_S by the reaping above);
                # `next_wakeup` asks the old one whether it is alive on every loop turn, so
                # the start follows its exit without blocking.
                self._kill(slot, now)
                if self._still_stopping(name, now):
                    continue
                slot.restart_at = None
                self._start(name, now)
                continue
            if not slot.watching or slot.handle is None:
                continue
            if not slot.handle.alive():
                slot.watching = False
                out.append(Lost(name, "crash", now, f"incarnation {slot.incarnation} exited"))
            elif slot.last_seen is None and now - slot.started_at > self.startup_timeout_s:
                slot.watching = False
                out.append(Lost(name, "heartbeat_lost", now, "never registered"))
            elif (slot.last_seen is not None
                  and now - (since := self._silent_since(slot)) > timeout):
                slot.watching = False
                busy = (f", {now - since:.3f} s past its work's deadline"
                        if since > slot.last_seen else "")
                out.append(Lost(name, "heartbeat_lost", now,
                                f"silent for {now - slot.last_seen:.3f} s{busy}"))
        return out

    def next_wakeup(self) -> float | None:
        """The earliest time `tick` has something to do: restarts, kills, registration and
        heartbeat expiries, and at once for a watched process that has exited (each call
        asks every watched process whether it is alive, so that a crash is noticed on the
        daemon's next loop turn however busy the loop is)."""
        times = [s.restart_at for n, s in self._slots.items()
                 if s.restart_at is not None and not self._still_stopping(n)]
        times += [deadline if not killed else deadline + STOP_GRACE_S
                  for _h, deadline, killed in self._stopping]
        timeout = self.config.timing.heartbeat_timeout_s
        times += [self._silent_since(s) + timeout for s in self._slots.values()
                  if s.watching and s.last_seen is not None]
        times += [s.started_at + self.startup_timeout_s for s in self._slots.values()
                  if s.watching and s.handle is not None and s.last_seen is None]
        times += [s.started_at for s in self._slots.values()  # in the past: due now
                  if s.watching and s.handle is not None and not s.handle.alive()]
        return min(times) if times else None

    # -------------------------------------------------------------- internals

    def _start(self, name: str, now: float) -> None:
        slot = self._slots[name]
        slot.incarnation += 1
        slot.started_at = now
        slot.last_seen = slot.heard = slot.alive = None
        slot.moved = 0.0
        slot.work.clear()
        slot.work_moved.clear()
        slot.work_late.clear()
        slot.watching = True
        slot.handle = self.launcher.start(name, slot.incarnation, self.epoch)
        log.info("channel_started", channel=name, incarnation=slot.incarnation)

    def _kill(self, slot: _Slot, now: float) -> None:
        if slot.handle is not None:
            slot.handle.request_stop()
            self._stopping.append([slot.handle, now + STOP_GRACE_S, False])
            slot.handle = None

    def _still_stopping(self, name: str, now: float | None = None) -> bool:
        """Whether an earlier incarnation of `name` is still running (asked to stop) and is
        still waited for. A killed one is waited for at most `STOP_GRACE_S` more (until
        `now` passes that; with `now` None, as long as it runs): a process dies at SIGKILL,
        but a stream thread that ignores its stop flag cannot be killed at all, and waiting
        for it would leave the channel RESTARTING for ever. Each stream incarnation binds
        its own inproc:// address, so the new one never collides with an abandoned thread."""
        return any(
            h.name == name and h.alive()
            and not (killed and now is not None and now >= kill_at + STOP_GRACE_S)
            for h, kill_at, killed in self._stopping
        )
