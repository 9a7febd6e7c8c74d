"""The safe-state controller: a sans-IO state machine from faults to the system's reaction.

It decides the mode (NORMAL → DEGRADED → SAFE, SAFE latched until an operator `Reset`),
each channel's state, and the voting set and policy the voter must use (the policy table in
README.md). It never reads a clock, sleeps, restarts a process or publishes anything: the
daemon shell stamps every event with `now` (seconds, one monotonic clock), calls
`SafeStateController.handle(event)` and carries out the instructions in order.

Contract
--------
Events in (frozen dataclasses):

- `Fault(channel, kind, detected_at, now, occurred_at=None, detail="")`: a fault found by
  the voter, the scheduler or the supervisor. `channel=None` means it could not be pinned
  on one channel (e.g. a 2oo2/1oo2D mismatch: both suspect; any 1oo3D mismatch).
- `ChannelStarted(channel, now)`: the channel's process (or stream) is up and can run a
  self-test.
- `SelfTestResult(channel, passed, now)`: a self-test finished. A pass is the rejoin gate;
  a failure is handled exactly like `Fault(channel, SELFTEST_FAILED, detected_at=now)`.
- `Reset(now)`: the operator's reset (see below).

Instructions out (frozen dataclasses), in the order the shell must carry them out:

- `SetMode(mode, reason)`, `SetChannelState(channel, state, reason)`: every change is
  checked with `safemon.states.check_transition` before it is emitted.
- `SetVoting(channels, policy)`: the voter must use exactly these channels under `policy`
  from now on; `len(channels) == policy.channels`, except `channels=()` on entering SAFE.
- `RestartChannel(channel, delay)`: restart the channel's process after `delay` seconds
  (exponential backoff, `backoff_delay`), then send `ChannelStarted`.
- `IsolateChannel(channel)`: take the channel out of service (no work, no self-tests)
  until an operator reset; the shell may stop its process.
- `RequestSelfTest(channel)`: run a self-test of the channel now (the scheduler's `RunNow`).
- `Notify(event_type, payload)`: publish on the events PUB socket (when `notify` is on).
  `event_type` is one of "fault", "mode", "channel", "mismatch_unexplained", "reset".
- `RunHook(event_type, payload)`: run the configured hook command (when `hook` is on);
  only for mode changes, which is what an operator must hear about at once.
- `RecordReaction(kind, fdti_seconds, frti_seconds)`: one per fault that led to a reaction
  (quarantine/restart, isolation, SAFE; or a 1oo2D/1oo3D mismatch when its diagnosis isolates a
  channel or goes SAFE). FDTI = detected_at - occurred_at (None when the occurrence time is
  unknown); FRTI = `now` of the handling - detected_at. The shell exports FRTI as
  `safemon_fault_reaction_seconds`.

Channel life and the voting set
-------------------------------
All channels start STARTING and the mode starts NORMAL with no voting set (the voter
answers every request with an error). `ChannelStarted` of a STARTING channel asks for a
self-test; a pass makes it UP. The voting set is *formed* once every channel is UP or
ISOLATED: then, and after every later change, it is the UP channels under the effective
policy of the table below; NORMAL iff that is the configured policy with every channel,
else DEGRADED. If too few channels are UP for any policy, the system goes SAFE.

| configured | 3 UP  | 2 UP            | 1 UP                                         |
|------------|-------|-----------------|----------------------------------------------|
| 1oo1D      | —     | —               | 1oo1D                                        |
| 2oo2       | —     | 2oo2            | SAFE                                         |
| 1oo2D      | —     | 1oo2D           | 1oo1D (DEGRADED)                             |
| 2oo3       | 2oo3  | degraded_policy | 1oo1D if degraded_policy is 1oo2D, else SAFE |
| 1oo3D      | 1oo3D | 1oo2D           | 1oo1D                                        |

Fault rules (by the policy in effect when the fault arrives)
------------------------------------------------------------
- In SAFE every event except `Reset` is absorbed: nothing changes.
- A fault of a channel that is already out of the vote and being dealt with (QUARANTINED,
  RESTARTING, ISOLATED) is absorbed (the second report of one failure changes nothing).
- `channel=None`: a disagreement under an effective 1oo2D or 1oo3D starts a diagnosis
  (below); anything else cannot be localised and goes SAFE (under 2oo3 an unresolved
  disagreement means no majority exists).
- A voting channel's fault (any kind, crash and heartbeat_lost included):
  1oo1D, 2oo2 → SAFE (no redundancy left to continue safely);
  1oo2D → isolate it, survivor runs 1oo1D (DEGRADED);
  1oo3D → isolate it, the other two run 1oo2D (DEGRADED), whose rules apply from then on;
  2oo3 → quarantine it and restart it with backoff; the other two vote under
  degraded_policy (DEGRADED); it rejoins after a passed self-test, NORMAL when all three
  are UP again. A second fault while DEGRADED follows the degraded policy's rule.
- A fault of a STARTING channel (not voting yet, or rejoining) follows the configured
  policy's recovery: 2oo3 → restart (same budget), 1oo2D and 1oo3D → isolate,
  2oo2/1oo1D → SAFE.
- 1oo2D / 1oo3D diagnosis: every voting channel gets `RequestSelfTest` and keeps voting
  meanwhile (both policies release only when every voting channel agrees, so suspects
  cannot release a wrong result while one healthy channel votes). A failing self-test
  isolates that channel (1oo3D → 1oo2D on the other two, 1oo2D → 1oo1D on the other); a
  second failure follows the rule of the policy then in effect, down to SAFE when 1oo1D
  fails. Under 1oo3D the two channels that agreed are not trusted over the one that
  differed: two faulty channels can agree. If every self-test passes, nothing changes and
  `unexplained_mismatches` counts it (Notify "mismatch_unexplained").
- Restart budget: at most `max_restarts` restarts of one channel within `restart_window`
  seconds. One more is not attempted: the channel is ISOLATED instead, because it has
  shown a persistent fault and the remaining channels still vote under the degraded
  policy, whose own rules go SAFE when they must. With restart disabled the same
  isolation happens at once. With isolation disabled, any isolation becomes SAFE: a
  faulty channel that cannot be taken out of service leaves no safe way to continue.

Reset
-----
From SAFE: mode NORMAL, every channel STARTING (UP and QUARANTINED pass through
RESTARTING, as the transition table has no direct edge to STARTING), the voting set is
formed again only after every channel passes a self-test, and the restart budgets start
afresh. Each channel gets a `RequestSelfTest`, except that ISOLATED channels are restarted
first (when restart is enabled: `RestartChannel(channel, 0.0)`) and channels whose restart
is still pending get their self-test on `ChannelStarted`.
From NORMAL or DEGRADED: ISOLATED channels are re-admitted the same way (STARTING, rejoin
after a passed self-test); everything else is left as it is.

A self-test pass counts only for a STARTING (or QUARANTINED) channel that is not waiting
for a restart, so that the result of a test begun in a process that has since been
restarted is never credited to the new one. (The shell should also make the scheduler
forget that process's tests: `ChannelLeft` + `ChannelJoined`.)

Bad events raise `InvalidInputError` and leave the controller unchanged: time going
backwards, a non-finite time, an unknown channel, a `kind` that is not a `FaultKind`,
`detected_at > now` or `occurred_at > detected_at`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TypeAlias

from safemon.errors import ConfigError, InvalidInputError
from safemon.states import (
    CHANNEL_TRANSITIONS,
    MODE_TRANSITIONS,
    ChannelState,
    Mode,
    Policy,
    check_transition,
)

__all__ = [
    "METRIC_KINDS",
    "ChannelStarted",
    "ControllerConfig",
    "ControllerEvent",
    "ControllerInstruction",
    "Fault",
    "FaultKind",
    "IsolateChannel",
    "Notify",
    "RecordReaction",
    "RequestSelfTest",
    "Reset",
    "RestartChannel",
    "RunHook",
    "SafeStateController",
    "SelfTestResult",
    "SetChannelState",
    "SetMode",
    "SetVoting",
    "backoff_delay",
    "effective_policy",
]

JsonValue: TypeAlias = str | int | float | bool | list[str] | None


class FaultKind(StrEnum):
    """What went wrong. The values are the `kind` label of metrics and events."""

    DISAGREEMENT_MINORITY = "disagreement_minority"
    DISAGREEMENT_UNRESOLVED = "disagreement_unresolved"
    DEADLINE_MISS = "deadline_miss"
    SELFTEST_FAILED = "selftest_failed"
    DTI_OVERRUN = "dti_overrun"
    HEARTBEAT_LOST = "heartbeat_lost"
    CRASH = "crash"
    ECC_UNCORRECTABLE = "ecc_uncorrectable"
    CHANNEL_ERROR = "channel_error"

    @property
    def metric_kind(self) -> str:
        """The coarser `kind` label of the fault-reaction metrics
        (`safemon_fault_reaction_seconds`, `..._detection_seconds`, `safemon_faults_total`):
        one of `METRIC_KINDS`."""
        return _METRIC_KIND[self]


_METRIC_KIND: dict[FaultKind, str] = {
    FaultKind.DISAGREEMENT_MINORITY: "disagreement",
    FaultKind.DISAGREEMENT_UNRESOLVED: "disagreement",
    FaultKind.DEADLINE_MISS: "deadline_miss",
    FaultKind.SELFTEST_FAILED: "selftest_fail",
    FaultKind.DTI_OVERRUN: "selftest_fail",
    FaultKind.HEARTBEAT_LOST: "heartbeat_lost",
    FaultKind.CRASH: "channel_crash",
    FaultKind.ECC_UNCORRECTABLE: "ecc_uncorrectable",
    # A channel that reports it cannot compute is, for the reaction, a failed channel.
    FaultKind.CHANNEL_ERROR: "channel_crash",
}

#: Every value of `FaultKind.metric_kind`, in a fixed order (the metrics' label set).
METRIC_KINDS: tuple[str, ...] = ("disagreement", "selftest_fail", "deadline_miss",
                                 "heartbeat_lost", "ecc_uncorrectable", "channel_crash")


_DISAGREEMENTS = frozenset({FaultKind.DISAGREEMENT_MINORITY, FaultKind.DISAGREEMENT_UNRESOLVED})
#: Policies whose mismatches are localised by self-tests, and whose faulty channels are
#: isolated (not restarted): the survivors vote under the next policy down.
_DIAGNOSED = frozenset({Policy.ONE_OO_TWO_D, Policy.ONE_OO_THREE_D})


def _is_seconds(value: object) -> bool:
    # bool is an int; True seconds is a bug, not one second.
    return not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(value)


@dataclass(frozen=True)
class ControllerConfig:
    """What the controller protects and how it may react. Durations in seconds.

    Attributes:
        channels: channel names, as in the deployment config; `len == policy.channels`.
        policy: the configured voter policy.
        degraded_policy: for 2oo3 only: TWO_OO_TWO or ONE_OO_TWO_D, the policy of the two
            channels left when one is out.
        max_restarts: restarts of one channel allowed within `restart_window` (int >= 0).
        restart_window: seconds, > 0.
        backoff_initial, backoff_factor, backoff_max: restart delays are
            `min(backoff_max, backoff_initial * backoff_factor**n)` with n the restarts of
            that channel already inside the window; initial >= 0, factor >= 1,
            max >= initial.
        restart, isolate, notify, hook: which actions are enabled.

    Raises:
        ConfigError: naming each bad field.
    """

    channels: tuple[str, ...]
    policy: Policy
    degraded_policy: Policy = Policy.TWO_OO_TWO
    max_restarts: int = 3
    restart_window: float = 600.0
    backoff_initial: float = 0.5
    backoff_factor: float = 2.0
    backoff_max: float = 30.0
    restart: bool = True
    isolate: bool = True
    notify: bool = True
    hook: bool = False

    def __post_init__(self) -> None:
        problems: list[str] = []
        if isinstance(self.channels, str) or not isinstance(self.channels, Sequence):
            problems.append(f"channels must be a sequence of names, got {self.channels!r}")
        else:
            names = tuple(self.channels)
            # Lossless: a YAML list and a tuple name the same channels.
            object.__setattr__(self, "channels", names)
            if not all(isinstance(n, str) and n for n in names):
                problems.append(f"channel names must be non-empty strings, got {names!r}")
            elif len(set(names)) != len(names):
                problems.append(f"channel names must be unique, got {names!r}")
        if not isinstance(self.policy, Policy):
            problems.append(f"policy must be a Policy, got {self.policy!r}")
        elif isinstance(self.channels, tuple) and len(self.channels) != self.policy.channels:
            problems.append(
                f"policy {self.policy.value} needs {self.policy.channels} channel(s), got {len(self.channels)}"
            )
        if self.degraded_policy not in (Policy.TWO_OO_TWO, Policy.ONE_OO_TWO_D):
            problems.append(f"degraded_policy must be 2oo2 or 1oo2D, got {self.degraded_policy!r}")
        if (
            isinstance(self.max_restarts, bool)
            or not isinstance(self.max_restarts, int)
            or self.max_restarts < 0
        ):
            problems.append(f"max_restarts must be an int >= 0, got {self.max_restarts!r}")
        if not _is_seconds(self.restart_window) or self.restart_window <= 0:
            problems.append(
                f"restart_window must be a finite number of seconds > 0, got {self.restart_window!r}"
            )
        if not _is_seconds(self.backoff_initial) or self.backoff_initial < 0:
            problems.append(
                f"backoff_initial must be a finite number of seconds >= 0, got {self.backoff_initial!r}"
            )
        if not _is_seconds(self.backoff_factor) or self.backoff_factor < 1:
            problems.append(
                f"backoff_factor must be a finite number >= 1, got {self.backoff_factor!r}"
            )
        if not _is_seconds(self.backoff_max) or (
            _is_seconds(self.backoff_initial) and self.backoff_max < self.backoff_initial
        ):
            problems.append(
                f"backoff_max must be a finite number of seconds >= backoff_initial, got {self.backoff_max!r}"
            )
        for name in ("restart", "isolate", "notify", "hook"):
            if not isinstance(getattr(self, name), bool):
                problems.append(f"{name} must be a bool, got {getattr(self, name)!r}")
        if problems:
            raise ConfigError("invalid controller config: " + "; ".join(problems))


def backoff_delay(config: ControllerConfig, attempt: int) -> float:
    """Seconds to wait before restart number `attempt` (0-based, within the window).

    Returns `min(backoff_max, backoff_initial * backoff_factor**attempt)`.

    Raises:
        InvalidInputError: `attempt` is not an int >= 0.
    """
    if isinstance(attempt, bool) or not isinstance(attempt, int) or attempt < 0:
        raise InvalidInputError(f"attempt must be an int >= 0, got {attempt!r}")
    # Compare exponents before multiplying: factor**attempt overflows a float for big attempts.
    if config.backoff_initial == 0:
        return 0.0
    if config.backoff_factor > 1 and attempt * math.log(config.backoff_factor) > math.log(
        config.backoff_max / config.backoff_initial
    ):
        return config.backoff_max
    return min(config.backoff_max, config.backoff_initial * config.backoff_factor**attempt)


def effective_policy(config: ControllerConfig, n_up: int) -> Policy | None:
    """The policy `n_up` UP channels vote under (module docstring table); None = SAFE."""
    match config.policy, n_up:
        case Policy.ONE_OO_ONE_D, 1:
            return Policy.ONE_OO_ONE_D
        case Policy.TWO_OO_TWO, 2:
            return Policy.TWO_OO_TWO
        case Policy.ONE_OO_TWO_D, 2:
            return Policy.ONE_OO_TWO_D
        case Policy.ONE_OO_TWO_D, 1:
            return Policy.ONE_OO_ONE_D
        case Policy.TWO_OO_THREE, 3:
            return Policy.TWO_OO_THREE
        case Policy.TWO_OO_THREE, 2:
            return config.degraded_policy
        case Policy.TWO_OO_THREE, 1 if config.degraded_policy is Policy.ONE_OO_TWO_D:
            return Policy.ONE_OO_ONE_D
        case Policy.ONE_OO_THREE_D, 3:
            return Policy.ONE_OO_THREE_D
        case Policy.ONE_OO_THREE_D, 2:
            return Policy.ONE_OO_TWO_D
        case Policy.ONE_OO_THREE_D, 1:
            return Policy.ONE_OO_ONE_D
    return None


# ---------------------------------------------------------------------------- events in


@dataclass(frozen=True, kw_only=True)
class Fault:
    """A fault. Times in seconds on the shell's clock.

    Attributes:
        channel: the faulty channel, or None when it cannot be pinned on one.
        kind: what went wrong.
        detected_at: when it was detected (<= now).
        now: when the shell hands it to the controller.
        occurred_at: when it happened, if known (<= detected_at); e.g. an injected fault.
        detail: free text for logs and events.
    """

    channel: str | None
    kind: FaultKind
    detected_at: float
    now: float
    occurred_at: float | None = None
    detail: str = ""


@dataclass(frozen=True)
class ChannelStarted:
    """`channel`'s process (or stream) is up."""

    channel: str
    now: float


@dataclass(frozen=True)
class SelfTestResult:
    """A self-test of `channel` finished at `now`; `passed` = it matched the golden pattern."""

    channel: str
    passed: bool
    now: float


@dataclass(frozen=True)
class Reset:
    """The operator's reset."""

    now: float


ControllerEvent: TypeAlias = Fault | ChannelStarted | SelfTestResult | Reset


# ---------------------------------------------------------------------- instructions out


@dataclass(frozen=True)
class SetMode:
    """The system mode is now `mode`."""

    mode: Mode
    reason: str


@dataclass(frozen=True)
class SetChannelState:
    """`channel` is now in `state`."""

    channel: str
    state: ChannelState
    reason: str


@dataclass(frozen=True)
class SetVoting:
    """From now on the voter uses exactly `channels` under `policy`; `()` only in SAFE."""

    channels: tuple[str, ...]
    policy: Policy


@dataclass(frozen=True)
class RestartChannel:
    """Restart `channel`'s process after `delay` seconds, then report `ChannelStarted`."""

    channel: str
    delay: float


@dataclass(frozen=True)
class IsolateChannel:
    """Take `channel` out of service until an operator reset."""

    channel: str


@dataclass(frozen=True)
class RequestSelfTest:
    """Run a self-test of `channel` now."""

    channel: str


@dataclass(frozen=True)
class Notify:
    """Publish `event_type` with a JSON-serialisable `payload` on the events socket."""

    event_type: str
    payload: Mapping[str, JsonValue]


@dataclass(frozen=True)
class RunHook:
    """Run the configured hook command for `event_type` (a mode change) with `payload`."""

    event_type: str
    payload: Mapping[str, JsonValue]


@dataclass(frozen=True)
class RecordReaction:
    """Fault detection time (None = occurrence unknown) and reaction time, in seconds."""

    kind: FaultKind
    fdti_seconds: float | None
    frti_seconds: float


ControllerInstruction: TypeAlias = (
    SetMode
    | SetChannelState
    | SetVoting
    | RestartChannel
    | IsolateChannel
    | RequestSelfTest
    | Notify
    | RunHook
    | RecordReaction
)


# ------------------------------------------------------------------------------ the core


@dataclass
class _Diagnosis:
    """A 1oo2D or 1oo3D mismatch whose self-tests are outstanding."""

    fault: Fault
    waiting: set[str] = field(default_factory=set)


class SafeStateController:
    """From faults and self-test results to mode, channel states and voting set.

    See the module docstring for the full contract.

    Args:
        config: channels, policy and enabled actions.
    """

    def __init__(self, config: ControllerConfig) -> None:
        self._config = config
        self._mode = Mode.NORMAL
        self._states: dict[str, ChannelState] = dict.fromkeys(
            config.channels, ChannelState.STARTING
        )
        self._formed = False
        self._voting: tuple[str, ...] = ()
        self._policy = config.policy
        self._restarts: dict[str, list[float]] = {c: [] for c in config.channels}
        self._awaiting_start: set[str] = set()
        self._diagnosis: _Diagnosis | None = None
        self._now: float | None = None
        self.unexplained_mismatches = 0

    # -- read-only views

    @property
    def config(self) -> ControllerConfig:
        return self._config

    @property
    def mode(self) -> Mode:
        return self._mode

    @property
    def voting(self) -> tuple[str, ...]:
        """The voting set last sent with `SetVoting` (`()` before it is formed and in SAFE)."""
        return self._voting

    @property
    def policy(self) -> Policy:
        """The effective policy (the configured one until a degradation)."""
        return self._policy

    @property
    def formed(self) -> bool:
        """Whether a voting set has been formed since start or the last reset from SAFE."""
        return self._formed

    def channel_state(self, channel: str) -> ChannelState:
        """Raises KeyError for an unknown channel."""
        return self._states[channel]

    def restart_times(self, channel: str) -> tuple[float, ...]:
        """When `channel` was restarted by this controller (kept while inside the window)."""
        return tuple(self._restarts[channel])

    # -- the state machine

    def handle(self, event: ControllerEvent) -> list[ControllerInstruction]:
        """Apply one event; return the instructions it causes, in order.

        Raises:
            InvalidInputError: see the module docstring; the controller is then unchanged.
        """
        self._validate(event)
        self._now = event.now
        out: list[ControllerInstruction] = []
        match event:
            case Fault():
                self._on_fault(event, out)
            case SelfTestResult(channel=c, passed=True, now=now):
                self._on_pass(c, now, out)
            case SelfTestResult(channel=c, passed=False, now=now):
                self._on_fault(
                    Fault(
                        channel=c,
                        kind=FaultKind.SELFTEST_FAILED,
                        detected_at=now,
                        now=now,
                        detail="self-test did not match its golden pattern",
                    ),
                    out,
                )
            case ChannelStarted(channel=c, now=now):
                self._on_started(c, now, out)
            case Reset(now=now):
                self._on_reset(now, out)
        return out

    def _validate(self, event: ControllerEvent) -> None:
        if not _is_seconds(event.now):
            raise InvalidInputError(f"now must be a finite number of seconds, got {event.now!r}")
        if self._now is not None and event.now < self._now:
            raise InvalidInputError(f"time went backwards: event at {event.now} after {self._now}")
        channel = getattr(event, "channel", None)
        if channel is not None and channel not in self._states:
            raise InvalidInputError(
                f"unknown channel {channel!r}; configured: {', '.join(self._config.channels)}"
            )
        if isinstance(event, SelfTestResult) and not isinstance(event.passed, bool):
            raise InvalidInputError(f"passed must be a bool, got {event.passed!r}")
        if isinstance(event, Fault):
            if not isinstance(event.kind, FaultKind):
                raise InvalidInputError(f"kind must be a FaultKind, got {event.kind!r}")
            if not _is_seconds(event.detected_at) or event.detected_at > event.now:
                raise InvalidInputError(
                    f"detected_at must be finite and <= now ({event.now}), got {event.detected_at!r}"
                )
            if event.occurred_at is not None and (
                not _is_seconds(event.occurred_at) or event.occurred_at > event.detected_at
            ):
                raise InvalidInputError(
                    f"occurred_at must be None or finite and <= detected_at ({event.detected_at}), "
                    f"got {event.occurred_at!r}"
                )
            if not isinstance(event.detail, str):
                raise InvalidInputError(f"detail must be a str, got {event.detail!r}")

    # -- small emitters; every change is checked against the transition tables

    def _notify(
        self, out: list[ControllerInstruction], event_type: str, **payload: JsonValue
    ) -> None:
        if self._config.notify:
            out.append(Notify(event_type, payload))

    def _set_state(
        self, out: list[ControllerInstruction], channel: str, new: ChannelState, reason: str
    ) -> None:
        old = self._states[channel]
        check_transition(CHANNEL_TRANSITIONS, old, new)
        if old == new:
            return
        self._states[channel] = new
        out.append(SetChannelState(channel, new, reason))
        self._notify(out, "channel", channel=channel, old=old.value, state=new.value, reason=reason)

    def _set_mode(self, out: list[ControllerInstruction], new: Mode, reason: str) -> None:
        old = self._mode
        check_transition(MODE_TRANSITIONS, old, new)
        if old == new:
            return
        self._mode = new
        out.append(SetMode(new, reason))
        payload: dict[str, JsonValue] = {"old": old.value, "mode": new.value, "reason": reason}
        self._notify(out, "mode", **payload)
        if self._config.hook:
            out.append(RunHook("mode", payload))

    @staticmethod
    def _record(out: list[ControllerInstruction], fault: Fault, now: float) -> None:
        fdti = None if fault.occurred_at is None else fault.detected_at - fault.occurred_at
        out.append(RecordReaction(fault.kind, fdti, now - fault.detected_at))

    def _up(self) -> tuple[str, ...]:
        return tuple(c for c in self._config.channels if self._states[c] is ChannelState.UP)

    # -- reactions

    def _enter_safe(self, out: list[ControllerInstruction], reason: str) -> None:
        # Mode first: the voter must stop releasing before anything else happens.
        self._set_mode(out, Mode.SAFE, reason)
        self._voting = ()
        out.append(SetVoting((), self._policy))
        self._diagnosis = None

    def _reconfigure(self, out: list[ControllerInstruction], reason: str) -> None:
        """Voting set := the UP channels under their effective policy (once formed)."""
        if not self._formed:
            if any(
                s not in (ChannelState.UP, ChannelState.ISOLATED) for s in self._states.values()
            ):
                return  # still waiting for a channel's first self-test
            self._formed = True
        up = self._up()
        policy = effective_policy(self._config, len(up))
        if policy is None:
            self._enter_safe(
                out, f"{reason}; {len(up)} channel(s) up is too few for {self._config.policy.value}"
            )
            return
        full = policy is self._config.policy
        # Degrading: mode first, then the smaller set; upgrading: the fuller set, then the
        # mode. Either way no instant shows NORMAL with less than the full set.
        if not full:
            self._set_mode(out, Mode.DEGRADED, reason)
        if (up, policy) != (self._voting, self._policy):
            self._voting, self._policy = up, policy
            out.append(SetVoting(up, policy))
        if full:
            self._set_mode(out, Mode.NORMAL, reason)

    def _isolate(self, out: list[ControllerInstruction], c: str, reason: str) -> bool:
        """Isolate `c`; False (and SAFE) when isolation is disabled."""
        if not self._config.isolate:
            self._enter_safe(out, f"{reason}; isolation is disabled, so {c} cannot be taken out")
            return False
        self._set_state(out, c, ChannelState.ISOLATED, reason)
        self._awaiting_start.discard(c)
        out.append(IsolateChannel(c))
        return True

    def _restart(self, out: list[ControllerInstruction], c: str, reason: str, now: float) -> bool:
        """Quarantine and restart `c` (or isolate it when over budget); False if SAFE."""
        if not self._config.restart:
            return self._isolate(out, c, f"{reason}; restart is disabled")
        window_start = now - self._config.restart_window
        times = [t for t in self._restarts[c] if t > window_start]
        self._restarts[c] = times
        if len(times) >= self._config.max_restarts:
            return self._isolate(
                out,
                c,
                f"{reason}; restart budget spent ({len(times)} restarts within {self._config.restart_window} s)",
            )
        delay = backoff_delay(self._config, len(times))
        times.append(now)
        if self._states[c] is ChannelState.UP:
            self._set_state(out, c, ChannelState.QUARANTINED, reason)
        self._set_state(out, c, ChannelState.RESTARTING, f"restart in {delay:g} s")
        self._awaiting_start.add(c)
        out.append(RestartChannel(c, delay))
        return True

    def _on_fault(self, f: Fault, out: list[ControllerInstruction]) -> None:
        self._notify(
            out,
            "fault",
            channel=f.channel,
            kind=f.kind.value,
            detail=f.detail,
            detected_at=f.detected_at,
            mode=self._mode.value,
        )
        if self._mode is Mode.SAFE:
            return  # latched: only Reset changes anything
        c, now, policy = f.channel, f.now, self._policy
        what = f"{f.kind.value}" + (f" on {c}" if c else "")
        if c is None:
            if self._formed and policy in _DIAGNOSED and f.kind in _DISAGREEMENTS:
                self._diagnose(f, out)
            else:
                self._enter_safe(
                    out, f"{what} cannot be pinned on one channel under {policy.value}"
                )
                self._record(out, f, now)
            return
        state = self._states[c]
        if state in (ChannelState.QUARANTINED, ChannelState.RESTARTING, ChannelState.ISOLATED):
            return  # already out of the vote and being dealt with
        voting = c in self._voting
        rule = policy if voting else self._config.policy
        if rule in (Policy.ONE_OO_ONE_D, Policy.TWO_OO_TWO):
            self._enter_safe(
                out, f"{what} under {rule.value}: no redundancy left to continue safely"
            )
        else:
            if rule in _DIAGNOSED:
                done = self._isolate(out, c, f"{what} under {rule.value}")
            else:
                done = self._restart(out, c, f"{what} under 2oo3", now)
            if done:
                self._resolve_diagnosis(out, c, now)
                self._reconfigure(out, what)
        self._record(out, f, now)

    def _diagnose(self, f: Fault, out: list[ControllerInstruction]) -> None:
        if self._diagnosis is None:
            self._diagnosis = _Diagnosis(fault=f)
        # A later mismatch re-arms the wait for both: passes before it prove nothing about it.
        self._diagnosis.waiting = set(self._voting)
        for c in self._voting:
            out.append(RequestSelfTest(c))

    def _resolve_diagnosis(self, out: list[ControllerInstruction], c: str, now: float) -> None:
        """Channel `c` was taken out: a pending mismatch is explained by it."""
        d = self._diagnosis
        if d is not None and c in self._voting:
            self._diagnosis = None
            self._record(out, d.fault, now)

    def _on_pass(self, c: str, now: float, out: list[ControllerInstruction]) -> None:
        if self._mode is Mode.SAFE:
            return
        state = self._states[c]
        if state is ChannelState.UP:
            d = self._diagnosis
            if d is not None and c in d.waiting:
                d.waiting.discard(c)
                if not d.waiting:
                    self._diagnosis = None
                    self.unexplained_mismatches += 1
                    self._notify(
                        out,
                        "mismatch_unexplained",
                        channels=list(self._voting),
                        kind=d.fault.kind.value,
                        count=self.unexplained_mismatches,
                    )
            return
        if (
            state in (ChannelState.STARTING, ChannelState.QUARANTINED)
            and c not in self._awaiting_start
        ):
            self._set_state(out, c, ChannelState.UP, "passed its self-test")
            self._reconfigure(out, f"{c} rejoined after a passed self-test")

    def _on_started(self, c: str, now: float, out: list[ControllerInstruction]) -> None:
        # Remembered even in SAFE, so that a Reset knows the process is already up.
        self._awaiting_start.discard(c)
        if self._mode is Mode.SAFE:
            return
        state = self._states[c]
        if state is ChannelState.RESTARTING:
            self._set_state(out, c, ChannelState.STARTING, "process started; must pass a self-test")
            out.append(RequestSelfTest(c))
        elif state is ChannelState.STARTING:
            out.append(RequestSelfTest(c))
        elif state is ChannelState.UP:
            # A voting channel that started again lost its state behind our back.
            self._on_fault(
                Fault(
                    channel=c,
                    kind=FaultKind.CRASH,
                    detected_at=now,
                    now=now,
                    detail="channel restarted while voting",
                ),
                out,
            )

    def _readmit(self, out: list[ControllerInstruction], c: str, reason: str) -> None:
        """ISOLATED → STARTING; restart its process when we may, else test it as it is."""
        self._set_state(out, c, ChannelState.STARTING, reason)
        self._restarts[c] = []
        if self._config.restart:
            self._awaiting_start.add(c)
            out.append(RestartChannel(c, 0.0))
        else:
            out.append(RequestSelfTest(c))

    def _on_reset(self, now: float, out: list[ControllerInstruction]) -> None:
        self._notify(out, "reset", mode=self._mode.value)
        if self._mode is not Mode.SAFE:
            for c in self._config.channels:
                if self._states[c] is ChannelState.ISOLATED:
                    self._readmit(out, c, "operator reset: re-admitted, must pass a self-test")
            return
        self._set_mode(out, Mode.NORMAL, "operator reset")
        self._formed = False
        self._voting = ()
        self._policy = self._config.policy
        self._diagnosis = None
        reason = "operator reset: must pass a self-test before voting"
        for c in self._config.channels:
            state = self._states[c]
            if state is ChannelState.ISOLATED:
                self._readmit(out, c, reason)
                continue
            self._restarts[c] = []
            if state in (ChannelState.UP, ChannelState.QUARANTINED):
                # No UP/QUARANTINED → STARTING edge in the table: pass through RESTARTING.
                self._set_state(out, c, ChannelState.RESTARTING, reason)
            self._set_state(out, c, ChannelState.STARTING, reason)
            if c not in self._awaiting_start:
                out.append(RequestSelfTest(c))
