"""The DTI scheduler: a sans-IO state machine that plans periodic self-tests and ECC scrubs.

Every channel runs at least one golden self-test per DTI (docs/SAFETY.md). The shell
carries out the plan by putting a SELFTEST (or SCRUB) job into the channel's *own* input
queue, so the diagnosis interleaves with live work and tests the same path the work takes.
This module never reads a clock, sleeps or touches a socket: the shell stamps every event
with `now` (seconds, one monotonic clock) and calls `Scheduler.handle(event)`.

Contract
--------
Events in (frozen dataclasses):

- `Tick(now)`: time passes.
- `ChannelJoined(channel, now, selftest_due=None, scrub_due=None)`: start scheduling
  `channel`. Its first self-test is due at `next_due(config, Job.SELFTEST, now, u)`, i.e.
  within one DTI, or at `selftest_due` when that is earlier (a channel that left for a
  while, to store a weight, keeps the self-test it was due; one already due starts at once),
  and its first scrub likewise with `scrub_due`; an immediate test (a rejoining channel must
  pass one before it votes) is asked for with `RunNow`.
- `ChannelLeft(channel, now)`: stop scheduling `channel`; its outstanding self-tests become
  stale (their results are ignored, no overrun is reported for them). Leaving an unknown
  channel does nothing. A restarted channel process should leave and join again, so that
  results of the old process can never count for the new one.
- `SelfTestDone(channel, test_id, passed, now, sms=(), sm_count=None, failing_sms=())`: a
  self-test finished; a self-test build that records `%smid` also reports the SMs that ran
  its blocks, the device's SM count and, on a failure, the SMs of the failing blocks.
- `ScrubDone(channel, corrected, uncorrectable, now)`: an ECC scrub of the channel's
  resident weights finished; counts are numbers of words (int >= 0).
- `RunNow(channel, now)`: start a self-test now (1oo2D mismatch, rejoin gate). It counts as a
  started self-test for the DTI bound, so the next periodic one is planned from it.
- `SelfTestDelayed(channel, test_id, seconds, now)`: the shell enqueued self-test `test_id`
  behind work that its deadline does not allow for: the deadline moves `seconds` later
  (finite, >= 0; the shell bounds it, `safemon.admission.selftest_extension_s`). A test
  already settled, or unknown, is left alone.
- `Postpone(since, seconds, now, limit)`: the shell read no channel message for `seconds`
  of the time after `since` (`0 <= seconds <= now - since`; its loop was busy, stalled or
  descheduled). Every outstanding self-test and scrub deadline after `since` moves
  `seconds` later, but none more than `limit` (>= 0) in all, and no scrub deadline past the
  next scrub's start (where the next scrub would replace it unjudged), so that a result the
  shell could not read in that time is not the channel's overrun. Due times are not moved:
  a start the shell reaches late is `DtiLate`, as below. A `Postpone` neither needs nor
  moves the scheduler's clock (it is never "time going backwards"); the next other event
  catches up.

Instructions out (frozen dataclasses), in the order they happen:

- `StartSelfTest(channel, test_id, pattern_id, deadline)`: enqueue a golden self-test.
  `test_id` is unique for the scheduler's life; `deadline` is absolute (seconds, same clock).
- `StartScrub(channel, deadline)`: enqueue an ECC scrub.
- `SelfTestPassed(channel, test_id, latency)`: latency = completion `now` - start, seconds.
- `SelfTestFailed(channel, test_id, detected_at, failing_sms)`: the result did not match the
  golden pattern: a fault, detected at `detected_at`, on the SMs named (empty if unknown).

SM coverage (`sm_coverage(channel)`): the share of the channel's SMs that ran a block of a
*passed* self-test within the last DTI (`safemon.patterns.sm_coverage.SmCoverage`); None
until the channel reports an SM count.
- `DtiOverrun(channel, test_id, deadline)`: the test had not completed before `deadline`: a
  fault. Reported exactly once per test; a completion that arrives later is stale.
- `ScrubFindings(channel, corrected, uncorrectable)`: only when either count is nonzero.
- `ScrubOverrun(channel, deadline)`: a scrub had not completed before its deadline.
- `DtiLate(channel, due, now)`: a periodic self-test started after its due time because the
  shell ticked late (`now > due`): the DTI bound was broken by the shell's timer, not by the
  channel (the test still gets its full deadline from `now`). A shell that sends
  `Tick(next_wakeup())` (or earlier) never sees it.

Timing rules (all pure functions of the config, `next_due` and `deadline_for`):

- Self-test starts of one channel are at most `dti` apart (join → first start included);
  jitter draws `u` in [0, 1) from the injected `random.Random` and plans the next start at
  `last_start + dti * (1 - jitter * u)`: only ever earlier than the DTI bound.
- A self-test started at `t` must complete with `now < t + selftest_deadline` (plus what
  `SelfTestDelayed` added); the first event at or past that reports the overrun. Because
  `selftest_deadline <= dti`, a periodic test is settled before the next one is due, unless
  jitter brought the next start closer or `SelfTestDelayed` moved the deadline later: then
  two tests of one channel are pending at once, each judged by its own deadline.
- Scrubs start every `scrub_interval` (no jitter) and must complete before
  `start + scrub_deadline` (default: `scrub_interval`).
- Every event first advances the scheduler's clock to `event.now` (the catch-up rule, which
  belongs here and not in the shell): every timer due at or before `event.now` is settled
  earliest first (ties: overruns, then scrub overruns, then starts; then channel join
  order), before the event itself is applied. An overrun is reported with its own
  deadline, so a result stamped at or after its deadline is stale. A start is never placed
  in the past: a self-test or scrub that fell due before `event.now` starts at
  `event.now`, with its full deadline from then (plus `DtiLate` for a self-test), so a shell
  that is late before a self-test starts never shortens that channel's allowance. (A shell
  that stalls while a test is in flight stamps the result late; it says so with `Postpone`
  first, or the scheduler, which sees only the stamp, reports the channel's overrun:
  docs/SAFETY.md, "Who is late".)
  Missed periodic starts are not replayed: a shell late by many DTIs gets one.

Bad events raise `InvalidInputError` and leave the scheduler unchanged: time going
backwards, a non-finite time, joining a channel twice, `RunNow` for an unknown channel,
negative scrub counts, a `Postpone` whose `seconds` lie outside [0, now - since] or whose
`limit` is negative. Results the protocol produces in normal operation are counted, never
raised: results for unknown, already settled or another channel's test ids
(`stale_results`), scrub results from unknown channels (`stale_scrubs`).
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TypeAlias

from safemon.errors import ConfigError, InvalidInputError
from safemon.patterns.sm_coverage import SmCoverage
from safemon.seconds import check_seconds, is_seconds, postponed

__all__ = [
    "ChannelJoined",
    "ChannelLeft",
    "DtiLate",
    "DtiOverrun",
    "Job",
    "Postpone",
    "RunNow",
    "Scheduler",
    "SchedulerConfig",
    "SchedulerEvent",
    "SchedulerInstruction",
    "ScrubDone",
    "ScrubFindings",
    "ScrubOverrun",
    "SelfTestDelayed",
    "SelfTestDone",
    "SelfTestFailed",
    "SelfTestPassed",
    "StartScrub",
    "StartSelfTest",
    "Tick",
    "deadline_for",
    "next_due",
    "timing_problems",
]


def _check_channel(channel: str) -> None:
    if not isinstance(channel, str) or not channel:
        raise InvalidInputError(f"channel must be a non-empty name, got {channel!r}")


class Job(StrEnum):
    """The named periodic jobs of one channel (STYLE.md item 8)."""

    SELFTEST = "selftest"
    SCRUB = "scrub"


@dataclass(frozen=True)
class SchedulerConfig:
    """Timing of the periodic diagnosis. All durations in seconds.

    Attributes:
        dti: diagnostic test interval; self-test starts of one channel are at most this far
            apart. > 0.
        selftest_deadline: a self-test must complete within this long after its start,
            0 < selftest_deadline <= dti (so, without jitter or `SelfTestDelayed`, a test is
            settled before the next is due).
        patterns: golden pattern ids, used round-robin per channel; non-empty, unique,
            non-empty strings. A list is accepted and stored as a tuple.
        jitter: fraction in [0, 1); each planned interval is `dti * (1 - jitter * u)` with
            u in [0, 1), so tests only ever come earlier. 0 = no jitter and no random draws.
        scrub_interval: period of the ECC scrub of resident weights; None = no scrubbing.
        scrub_deadline: a scrub must complete within this long after its start; None means
            `scrub_interval`; must be in (0, scrub_interval].

    Raises:
        ConfigError: naming each bad field.
    """

    dti: float
    selftest_deadline: float
    patterns: tuple[str, ...]
    jitter: float = 0.0
    scrub_interval: float | None = None
    scrub_deadline: float | None = None

    def __post_init__(self) -> None:
        problems = [
            f"{name} {problem}"
            for name, problem in timing_problems(
                self.dti, self.selftest_deadline, self.jitter, self.scrub_interval,
                self.scrub_deadline,
            )
        ]
        if isinstance(self.patterns, str) or not isinstance(self.patterns, Sequence):
            problems.append(f"patterns must be a sequence of pattern ids, got {self.patterns!r}")
        else:
            pats = tuple(self.patterns)
            if not pats:
                problems.append("patterns must not be empty")
            elif not all(isinstance(p, str) and p for p in pats):
                problems.append(f"patterns must be non-empty strings, got {pats!r}")
            elif len(set(pats)) != len(pats):
                problems.append(f"patterns must be unique, got {pats!r}")
            # Lossless: a YAML list and a tuple name the same rotation.
            object.__setattr__(self, "patterns", pats)
        if problems:
            raise ConfigError("invalid scheduler config: " + "; ".join(problems))


def timing_problems(
    dti: object,
    selftest_deadline: object,
    jitter: object = 0.0,
    scrub_interval: object = None,
    scrub_deadline: object = None,
    *,
    names: Mapping[str, str] | None = None,
) -> list[tuple[str, str]]:
    """The scheduler's timing rules, as (field, problem) pairs; empty when every rule holds.

    The one owner of these rules: `SchedulerConfig` raises on them, and the deployment
    configuration (`safemon.config.TimingConfig`) reports them under its own field names,
    given as `names` (scheduler field -> caller's field; unmapped names are kept):

    - dti > 0 and selftest_deadline in (0, dti], finite seconds;
    - jitter a fraction in [0, 1);
    - scrub_interval None (no scrubbing) or > 0; scrub_deadline None (= scrub_interval) or
      in (0, scrub_interval], and only with a scrub_interval.
    """
    n = {k: (names or {}).get(k, k) for k in (
        "dti", "selftest_deadline", "jitter", "scrub_interval", "scrub_deadline")}
    out: list[tuple[str, str]] = []
    if not is_seconds(dti) or dti <= 0:
        out.append((n["dti"], f"must be a finite number of seconds > 0, got {dti!r}"))
    if not is_seconds(selftest_deadline) or selftest_deadline <= 0:
        out.append((n["selftest_deadline"],
                    f"must be a finite number of seconds > 0, got {selftest_deadline!r}"))
    elif is_seconds(dti) and dti > 0 and selftest_deadline > dti:
        out.append((n["selftest_deadline"], f"must be <= {n['dti']} ({dti}), got {selftest_deadline}"))
    if not is_seconds(jitter) or not 0.0 <= jitter < 1.0:
        out.append((n["jitter"], f"must be a fraction in [0, 1), got {jitter!r}"))
    if scrub_interval is not None and (not is_seconds(scrub_interval) or scrub_interval <= 0):
        out.append((n["scrub_interval"],
                    f"must be None or a finite number of seconds > 0, got {scrub_interval!r}"))
    if scrub_deadline is not None:
        if scrub_interval is None:
            out.append((n["scrub_deadline"],
                        f"is set but {n['scrub_interval']} is None (scrubbing off)"))
        elif not is_seconds(scrub_deadline) or scrub_deadline <= 0:
            out.append((n["scrub_deadline"],
                        f"must be a finite number of seconds > 0, got {scrub_deadline!r}"))
        elif is_seconds(scrub_interval) and 0 < scrub_interval < scrub_deadline:
            out.append((n["scrub_deadline"],
                        f"must be <= {n['scrub_interval']} ({scrub_interval}), got {scrub_deadline}"))
    return out


def next_due(config: SchedulerConfig, job: Job, last_start: float, u: float = 0.0) -> float:
    """When `job` is next due for a channel whose last such job started at `last_start`.

    For a channel that has not run the job yet, `last_start` is its join time.

    Args:
        config: the scheduler config.
        job: SELFTEST (jittered) or SCRUB (not jittered; `u` is ignored).
        last_start: seconds, the scheduler's clock.
        u: the jitter draw, in [0, 1).

    Returns:
        Absolute time in seconds: `last_start + dti * (1 - jitter * u)` for SELFTEST, which
        is in `(last_start + dti * (1 - jitter), last_start + dti]`;
        `last_start + scrub_interval` for SCRUB.

    Raises:
        InvalidInputError: `u` outside [0, 1), a non-finite `last_start`.
        ConfigError: SCRUB asked for while scrubbing is off.
    """
    check_seconds("last_start", last_start)
    if not is_seconds(u) or not 0.0 <= u < 1.0:
        raise InvalidInputError(f"jitter draw u must be in [0, 1), got {u!r}")
    if job is Job.SELFTEST:
        return last_start + config.dti * (1.0 - config.jitter * u)
    if config.scrub_interval is None:
        raise ConfigError("scrubbing is off (scrub_interval is None): no scrub is ever due")
    return last_start + config.scrub_interval


def deadline_for(config: SchedulerConfig, job: Job, start: float) -> float:
    """The absolute time by which a `job` started at `start` must have completed (exclusive).

    Raises:
        InvalidInputError: a non-finite `start`.
        ConfigError: SCRUB asked for while scrubbing is off.
    """
    check_seconds("start", start)
    if job is Job.SELFTEST:
        return start + config.selftest_deadline
    if config.scrub_interval is None:
        raise ConfigError("scrubbing is off (scrub_interval is None): scrubs have no deadline")
    window = config.scrub_deadline if config.scrub_deadline is not None else config.scrub_interval
    return start + window


# ---------------------------------------------------------------------------- events in


@dataclass(frozen=True)
class Tick:
    """Time passes; `now` in seconds."""

    now: float


@dataclass(frozen=True)
class ChannelJoined:
    """Start scheduling `channel` (first self-test due within one DTI, or at `selftest_due`
    when that is earlier)."""

    channel: str
    now: float
    selftest_due: float | None = None
    scrub_due: float | None = None


@dataclass(frozen=True)
class ChannelLeft:
    """Stop scheduling `channel`; its outstanding tests become stale."""

    channel: str
    now: float


@dataclass(frozen=True)
class SelfTestDone:
    """Self-test `test_id` of `channel` finished; `passed` = output matched the golden pattern."""

    channel: str
    test_id: int
    passed: bool
    now: float
    sms: tuple[int, ...] = ()
    sm_count: int | None = None
    failing_sms: tuple[int, ...] = ()


@dataclass(frozen=True)
class ScrubDone:
    """A scrub of `channel` finished; word counts (int >= 0)."""

    channel: str
    corrected: int
    uncorrectable: int
    now: float


@dataclass(frozen=True)
class RunNow:
    """Start an on-demand self-test of `channel` now."""

    channel: str
    now: float


@dataclass(frozen=True)
class SelfTestDelayed:
    """Self-test `test_id` of `channel` waits behind work its deadline does not allow for:
    its deadline moves `seconds` (finite, >= 0) later."""

    channel: str
    test_id: int
    seconds: float
    now: float


@dataclass(frozen=True)
class Postpone:
    """The shell read no channel message for `seconds` of the time after `since`: every
    outstanding self-test and scrub deadline after `since` moves `seconds` later, none more
    than `limit` in all."""

    since: float
    seconds: float
    now: float
    limit: float


SchedulerEvent: TypeAlias = (
    Tick | ChannelJoined | ChannelLeft | SelfTestDone | ScrubDone | RunNow | SelfTestDelayed
    | Postpone
)


# ---------------------------------------------------------------------- instructions out


@dataclass(frozen=True)
class StartSelfTest:
    """Enqueue golden self-test `test_id` with `pattern_id` on `channel`; due before `deadline`."""

    channel: str
    test_id: int
    pattern_id: str
    deadline: float


@dataclass(frozen=True)
class StartScrub:
    """Enqueue an ECC scrub of `channel`'s resident weights; due before `deadline`."""

    channel: str
    deadline: float


@dataclass(frozen=True)
class SelfTestPassed:
    """Self-test `test_id` passed; `latency` = seconds from start to completion."""

    channel: str
    test_id: int
    latency: float


@dataclass(frozen=True)
class SelfTestFailed:
    """Self-test `test_id` failed (a fault), detected at `detected_at` seconds."""

    channel: str
    test_id: int
    detected_at: float
    failing_sms: tuple[int, ...] = ()


@dataclass(frozen=True)
class DtiOverrun:
    """Self-test `test_id` had not completed before `deadline` (a fault)."""

    channel: str
    test_id: int
    deadline: float


@dataclass(frozen=True)
class ScrubFindings:
    """A scrub of `channel` found errors: `corrected` and `uncorrectable` word counts."""

    channel: str
    corrected: int
    uncorrectable: int


@dataclass(frozen=True)
class ScrubOverrun:
    """A scrub of `channel` had not completed before `deadline`."""

    channel: str
    deadline: float


@dataclass(frozen=True)
class DtiLate:
    """A periodic self-test of `channel` due at `due` started only at `now` (shell ticked late)."""

    channel: str
    due: float
    now: float


SchedulerInstruction: TypeAlias = (
    StartSelfTest
    | StartScrub
    | SelfTestPassed
    | SelfTestFailed
    | DtiOverrun
    | ScrubFindings
    | ScrubOverrun
    | DtiLate
)


# ------------------------------------------------------------------------------ the core


@dataclass(frozen=True)
class _Pending:
    started: float
    deadline: float
    postponed: float = 0.0  # moved later by `Postpone`, in all


@dataclass
class _Channel:
    joined_at: float
    next_selftest: float
    next_scrub: float | None
    scrub_deadline: float | None = None  # the outstanding scrub's deadline, if one runs
    scrub_postponed: float = 0.0  # how much `Postpone` moved that deadline, in all
    last_selftest_start: float | None = None
    rotation: int = 0
    pending: dict[int, _Pending] = field(default_factory=dict)
    coverage: SmCoverage | None = None


def _record_sms(ch: _Channel, event: SelfTestDone, *, passed: bool = True) -> None:
    """Only a passed self-test covers its SMs; any result may tell the device's SM count."""
    if event.sm_count is not None and (ch.coverage is None or ch.coverage.sm_count != event.sm_count):
        ch.coverage = SmCoverage(event.sm_count)
    if passed and ch.coverage is not None and event.sms:
        ch.coverage.record(event.sms, event.now)


class Scheduler:
    """Plans self-tests and scrubs for every joined channel (module docstring: contract).

    Args:
        config: timing rules.
        rng: source of the jitter draws. Required when `config.jitter > 0` so that runs are
            reproducible from a seed; unused (and may be None) without jitter.

    Raises:
        ConfigError: jitter without an `rng`.
    """

    def __init__(self, config: SchedulerConfig, rng: random.Random | None = None) -> None:
        if config.jitter > 0 and rng is None:
            raise ConfigError("jitter > 0 needs an injected random.Random (rng=...)")
        self._config = config
        self._rng = rng
        self._channels: dict[str, _Channel] = {}
        self._now: float | None = None
        self._next_test_id = 1
        self.stale_results = 0
        self.stale_scrubs = 0

    # -- read-only views, for the shell's metrics and for tests

    @property
    def config(self) -> SchedulerConfig:
        return self._config

    @property
    def channels(self) -> tuple[str, ...]:
        """Joined channels, in join order."""
        return tuple(self._channels)

    def pending(self, channel: str) -> tuple[int, ...]:
        """Outstanding self-test ids of `channel` (empty for an unknown channel)."""
        ch = self._channels.get(channel)
        return tuple(ch.pending) if ch else ()

    def last_selftest_start(self, channel: str) -> float | None:
        """When `channel`'s latest self-test started, None if none yet or unknown."""
        ch = self._channels.get(channel)
        return ch.last_selftest_start if ch else None

    def sm_coverage(self, channel: str) -> float | None:
        """Share (0..1) of `channel`'s SMs covered by passed self-tests in the last DTI; None
        for an unknown channel or one that never reported its SM count."""
        ch = self._channels.get(channel)
        if ch is None or ch.coverage is None or self._now is None:
            return None
        return ch.coverage.ratio(self._now, self._config.dti)

    def selftest_due(self, channel: str) -> float:
        """When `channel`'s next periodic self-test is due. Raises KeyError if unknown."""
        return self._channels[channel].next_selftest

    def scrub_due(self, channel: str) -> float | None:
        """When `channel`'s next scrub is due (None: no scrubbing). Raises KeyError if
        unknown."""
        return self._channels[channel].next_scrub

    def next_wakeup(self) -> float | None:
        """The earliest time at which a `Tick` has work to do; None with no channel joined.

        A shell that always ticks at (or before) this time keeps every DTI bound exactly.
        """
        times: list[float] = []
        for ch in self._channels.values():
            times.append(ch.next_selftest)
            times.extend(p.deadline for p in ch.pending.values())
            if ch.next_scrub is not None:
                times.append(ch.next_scrub)
            if ch.scrub_deadline is not None:
                times.append(ch.scrub_deadline)
        return min(times) if times else None

    # -- the state machine

    def handle(self, event: SchedulerEvent) -> list[SchedulerInstruction]:
        """Apply one event; return the instructions it causes, in order.

        Raises:
            InvalidInputError: see the module docstring; the scheduler is then unchanged.
        """
        self._validate(event)
        out: list[SchedulerInstruction] = []
        if isinstance(event, Postpone):  # moves deadlines; needs and moves no clock
            self._postpone(event.since, event.seconds, event.limit)
            return out
        self._now = event.now
        self._advance(event.now, out)
        match event:
            case Tick() | Postpone():
                pass
            case ChannelJoined(channel=c, now=now, selftest_due=due, scrub_due=scrub):
                regular = next_due(self._config, Job.SELFTEST, now, self._draw())
                scrub_at = (next_due(self._config, Job.SCRUB, now)
                            if self._config.scrub_interval is not None else None)
                if scrub_at is not None and scrub is not None:
                    scrub_at = min(scrub_at, max(scrub, now))
                self._channels[c] = _Channel(
                    joined_at=now,
                    next_selftest=regular if due is None else min(regular, max(due, now)),
                    next_scrub=scrub_at,
                )
            case ChannelLeft(channel=c):
                self._channels.pop(c, None)
            case SelfTestDone(channel=c, test_id=tid, passed=passed, now=now):
                ch = self._channels.get(c)
                pend = ch.pending.pop(tid, None) if ch else None
                if ch is None or pend is None:
                    # Unknown id, another channel's id, or already settled (overrun at the
                    # advance above, or a duplicate): a result that proves nothing now.
                    self.stale_results += 1
                elif passed:
                    _record_sms(ch, event)
                    out.append(SelfTestPassed(c, tid, now - pend.started))
                else:
                    _record_sms(ch, event, passed=False)
                    out.append(SelfTestFailed(c, tid, now, event.failing_sms))
            case ScrubDone(channel=c, corrected=corr, uncorrectable=unc):
                ch = self._channels.get(c)
                if ch is None:
                    self.stale_scrubs += 1
                else:
                    # Findings are facts about memory even when the scrub overran: report
                    # them rather than drop an uncorrectable word on a timing technicality.
                    ch.scrub_deadline = None
                    if corr or unc:
                        out.append(ScrubFindings(c, corr, unc))
            case RunNow(channel=c, now=now):
                self._start_selftest(c, self._channels[c], now, out)
            case SelfTestDelayed(channel=c, test_id=tid, seconds=sec):
                ch = self._channels.get(c)
                pend = ch.pending.get(tid) if ch else None
                if ch is not None and pend is not None:
                    ch.pending[tid] = _Pending(pend.started, pend.deadline + sec, pend.postponed)
        return out

    def _validate(self, event: SchedulerEvent) -> None:
        check_seconds("now", event.now)
        if self._now is not None and event.now < self._now and not isinstance(event, Postpone):
            raise InvalidInputError(f"time went backwards: event at {event.now} after {self._now}")
        match event:
            case ChannelJoined(channel=c, selftest_due=due, scrub_due=scrub):
                _check_channel(c)
                if due is not None:
                    check_seconds("selftest_due", due)
                if scrub is not None:
                    check_seconds("scrub_due", scrub)
                if c in self._channels:
                    raise InvalidInputError(
                        f"channel {c!r} joined twice; send ChannelLeft first when it restarts"
                    )
            case ChannelLeft(channel=c):
                _check_channel(c)
            case RunNow(channel=c):
                _check_channel(c)
                if c not in self._channels:
                    raise InvalidInputError(f"RunNow for channel {c!r}, which has not joined")
            case SelfTestDone(channel=c, test_id=tid, passed=passed):
                _check_channel(c)
                if isinstance(tid, bool) or not isinstance(tid, int):
                    raise InvalidInputError(f"test_id must be an int, got {tid!r}")
                if not isinstance(passed, bool):
                    raise InvalidInputError(f"passed must be a bool, got {passed!r}")
                n_sm = event.sm_count
                if n_sm is not None and (isinstance(n_sm, bool) or not isinstance(n_sm, int) or n_sm < 1):
                    raise InvalidInputError(f"sm_count must be an int >= 1, got {n_sm!r}")
                limit = n_sm if n_sm is not None else 1 << 30
                if any(isinstance(s, bool) or not isinstance(s, int) or not 0 <= s < limit
                       for s in (*event.sms, *event.failing_sms)):
                    raise InvalidInputError(f"SM ids must be ints in 0..{limit - 1}")
            case ScrubDone(channel=c, corrected=corr, uncorrectable=unc):
                _check_channel(c)
                for name, n in (("corrected", corr), ("uncorrectable", unc)):
                    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
                        raise InvalidInputError(f"{name} must be an int >= 0, got {n!r}")
            case SelfTestDelayed(channel=c, test_id=tid, seconds=sec):
                _check_channel(c)
                if isinstance(tid, bool) or not isinstance(tid, int):
                    raise InvalidInputError(f"test_id must be an int, got {tid!r}")
                check_seconds("seconds", sec)
                if sec < 0:
                    raise InvalidInputError(f"seconds must be >= 0, got {sec!r}")
            case Postpone(since=since, seconds=sec, now=now, limit=limit):
                check_seconds("since", since)
                check_seconds("seconds", sec)
                check_seconds("limit", limit)
                if not 0.0 <= sec <= now - since:
                    raise InvalidInputError(
                        f"postpone: seconds {sec} must lie in [0, now - since = {now - since}]")
                if limit < 0:
                    raise InvalidInputError(f"postpone: limit must be >= 0, got {limit}")
            case Tick():
                pass

    def _postpone(self, since: float, seconds: float, limit: float) -> None:
        for ch in self._channels.values():
            for tid, pend in ch.pending.items():
                ch.pending[tid] = _Pending(pend.started, *postponed(
                    pend.deadline, pend.postponed, since=since, seconds=seconds, limit=limit))
            if ch.scrub_deadline is not None:  # settled before the next scrub replaces it
                ch.scrub_deadline, ch.scrub_postponed = postponed(
                    ch.scrub_deadline, ch.scrub_postponed, since=since, seconds=seconds,
                    limit=limit, until=ch.next_scrub)

    def _draw(self) -> float:
        # No draw without jitter, so a seeded rng shared with other users is not consumed.
        if self._config.jitter == 0 or self._rng is None:
            return 0.0
        return self._rng.random()

    def _start_selftest(
        self, name: str, ch: _Channel, now: float, out: list[SchedulerInstruction]
    ) -> None:
        tid = self._next_test_id
        self._next_test_id += 1
        pats = self._config.patterns
        pattern = pats[ch.rotation % len(pats)]
        ch.rotation += 1
        deadline = deadline_for(self._config, Job.SELFTEST, now)
        ch.pending[tid] = _Pending(started=now, deadline=deadline)
        ch.last_selftest_start = now
        ch.next_selftest = next_due(self._config, Job.SELFTEST, now, self._draw())
        out.append(StartSelfTest(name, tid, pattern, deadline))

    def _advance(self, now: float, out: list[SchedulerInstruction]) -> None:
        """The catch-up rule (module docstring, timing rules): settle every timer due at or
        before `now`, earliest first; a start is never placed in the past."""
        # (due time, rank, join order, test id, channel, what): the sort key is the rule.
        due: list[tuple[float, int, int, int, str, str]] = []
        for order, (name, ch) in enumerate(self._channels.items()):
            due.extend((p.deadline, 0, order, tid, name, "overrun")
                       for tid, p in ch.pending.items() if now >= p.deadline)
            if ch.scrub_deadline is not None and now >= ch.scrub_deadline:
                due.append((ch.scrub_deadline, 1, order, 0, name, "scrub_overrun"))
            if now >= ch.next_selftest:
                due.append((ch.next_selftest, 2, order, 0, name, "selftest"))
            if ch.next_scrub is not None and now >= ch.next_scrub:
                due.append((ch.next_scrub, 3, order, 0, name, "scrub"))
        for at, _, _, tid, name, what in sorted(due):
            self._settle(name, self._channels[name], what, at, tid, now, out)

    def _settle(
        self, name: str, ch: _Channel, what: str, at: float, tid: int, now: float,
        out: list[SchedulerInstruction],
    ) -> None:
        """Carry out one timer of `ch` that fell due at `at` (<= `now`); `tid` for an overrun."""
        if what == "overrun":
            # At the shared instant `deadline == next due` the old test is settled first.
            del ch.pending[tid]
            out.append(DtiOverrun(name, tid, at))
        elif what == "scrub_overrun":
            out.append(ScrubOverrun(name, at))
            ch.scrub_deadline = None
        elif what == "selftest":
            if now > at:
                out.append(DtiLate(name, at, now))
            self._start_selftest(name, ch, now, out)
        else:
            # scrub_deadline <= scrub_interval, so the previous scrub is settled here.
            deadline = deadline_for(self._config, Job.SCRUB, now)
            ch.scrub_deadline = deadline
            ch.scrub_postponed = 0.0
            ch.next_scrub = next_due(self._config, Job.SCRUB, now)
            out.append(StartScrub(name, deadline))
