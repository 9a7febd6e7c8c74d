"""How long the daemon's loop went without reading its channels' messages.

The daemon judges channels by the clock: a result after its request's deadline, a self-test
result after the test's deadline, a weight acknowledged late, a heartbeat older than
`timing.heartbeat_timeout_s`. It stamps a message when its loop reads it. Time in which the
loop reads nothing (one long message, its timers, the process descheduled, stopped or
swapped out) would therefore count against channels whose messages wait, unread, in their
sockets: until 2026-12-06 a daemon stopped for 2 s (SIGSTOP) came back, found its healthy
channels late and silent, and latched SAFE (evidence/cpu-2026-12-06-stop59/).

`LoopAttention` measures that time. The loop *listens* while it waits in its poll (for as
long as the poll's timeout allows) and while it runs inline channels (their messages are
handed over as they are made, and their time is theirs to answer for). Any other stretch
is time away. A stretch of at most `AWAY_THRESHOLD_S` is left to the channels' budgets,
which allow for a loop turn; a longer one is reported (`Away`) the next time the loop is
about to judge anything, and the daemon moves the channels' open deadlines and silence
clocks by it (`safemon.runtime.stimuli.LoopAway`, `Supervisor.postpone`), no deadline by
more than `timing.ftti_s` in all and no silence clock by more than that past when the
channel was last known alive (the send stamp of the latest message read from it,
`safemon.channels.sent_stamp`; `Supervisor.postpone`): a daemon away most of the time
(overloaded) must still find a channel that stopped answering.

What this does not cover: a poll that returns late (the process was descheduled inside it)
is counted as away only for the part past its timeout, a lower bound; and the time away
delays the detection of a channel that really failed in it by as much, up to `ftti_s`
(docs/SAFETY.md, "Who is late").

Time is passed in (monotonic seconds), so every rule is testable without sleeping.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["AWAY_THRESHOLD_S", "Away", "LoopAttention"]

#: Stretches away longer than this (seconds) are reported; shorter ones are a loop turn's
#: work, which the channels' budgets allow for. The loop returns to its timers within
#: `safemon.daemon.TIMER_PERIOD_S` (the same 50 ms) when nothing stalls it.
AWAY_THRESHOLD_S = 0.05


@dataclass(frozen=True)
class Away:
    """The loop read no channel message from `since` for `seconds` (until `since + seconds`)."""

    since: float
    seconds: float


class LoopAttention:
    """When the loop last listened to its channels, and how long it has been away since.

    The loop calls `start_listening` before it polls or runs its inline channels (and
    reports the stretch away it returns), `stop_listening` after, and `away` before it
    judges anything (a stimulus for the core, the supervisor's timers).

    Args:
        now: when the loop starts (seconds, monotonic): it counts as having listened then.
        threshold_s: the longest stretch away that is not reported (> 0).
    """

    def __init__(self, now: float, threshold_s: float = AWAY_THRESHOLD_S) -> None:
        if not threshold_s > 0:
            raise ValueError(f"threshold_s must be > 0, got {threshold_s!r}")
        self.threshold_s = threshold_s
        self._listened_at = now
        self._listening = False

    @property
    def listened_at(self) -> float:
        """The end of the last listening stretch, or of the last stretch away reported
        (seconds); while the loop listens, when that began."""
        return self._listened_at

    @property
    def listening(self) -> bool:
        """Whether the loop is in a poll or a pump of its inline channels now."""
        return self._listening

    def start_listening(self, now: float) -> Away | None:
        """The loop starts to listen at `now`: the stretch away before it is returned when
        it is longer than the threshold."""
        gone = self.away(now)
        self._listening = True
        self._listened_at = max(self._listened_at, now)
        return gone

    def stop_listening(self, now: float, *, timeout_s: float | None = None) -> None:
        """The loop stops listening at `now`. For a poll, `timeout_s` is how long it could
        wait: one that came back more than a threshold later than that (the process was
        descheduled inside it) listened only until its timeout ran out, and the rest is
        away (a lower bound: when in the poll the process stopped is not known)."""
        if not self._listening:
            raise RuntimeError("stop_listening without start_listening")
        self._listening = False
        allowed = None if timeout_s is None else self._listened_at + max(0.0, timeout_s)
        late = allowed is not None and now > allowed + self.threshold_s
        self._listened_at = max(self._listened_at, allowed if late and allowed is not None else now)

    def away(self, now: float) -> Away | None:
        """The stretch away up to `now`, if the loop is not listening and it is longer than
        the threshold (the loop then counts as having listened at `now`), else None."""
        seconds = now - self._listened_at
        if self._listening or seconds <= self.threshold_s:
            return None
        gone = Away(self._listened_at, seconds)
        self._listened_at = now
        return gone
