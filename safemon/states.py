"""State enums and their allowed transitions. Dependency-free on purpose.

Every role (voter, controller, scheduler, supervisor, daemon) speaks these names, and the
metrics and logs print their `.value`. Transitions are checked with `check_transition`,
so an illegal jump is a bug that fails loudly instead of a silent state corruption.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = [
    "CHANNEL_TRANSITIONS",
    "MODE_TRANSITIONS",
    "ChannelState",
    "IllegalTransition",
    "Mode",
    "Policy",
    "check_transition",
]


class Mode(StrEnum):
    """The system mode. SAFE is latched: only an operator reset leaves it."""

    NORMAL = "NORMAL"
    DEGRADED = "DEGRADED"
    SAFE = "SAFE"


class Policy(StrEnum):
    """Voter policies (README.md, "Deployments (HFT)")."""

    ONE_OO_ONE_D = "1oo1D"
    TWO_OO_TWO = "2oo2"
    ONE_OO_TWO_D = "1oo2D"
    TWO_OO_THREE = "2oo3"
    ONE_OO_THREE_D = "1oo3D"

    @property
    def channels(self) -> int:
        """How many channels the policy needs when nothing is degraded."""
        return _CHANNELS[self]

    @property
    def quorum(self) -> int:
        """How many agreeing channel results release a request (the voter's rule)."""
        return _QUORUM[self]

    @property
    def hft(self) -> int:
        """Declared hardware fault tolerance (IEC 61508); `safemon.hft` owns the rule."""
        from safemon.hft import declared_hft  # late: safemon.hft imports this module

        return declared_hft(self)


# Read on every vote: a dict built once, keyed by member (not `.value`, a slow property).
_CHANNELS = {Policy.ONE_OO_ONE_D: 1, Policy.TWO_OO_TWO: 2, Policy.ONE_OO_TWO_D: 2,
             Policy.TWO_OO_THREE: 3, Policy.ONE_OO_THREE_D: 3}
_QUORUM = {Policy.ONE_OO_ONE_D: 1, Policy.TWO_OO_TWO: 2, Policy.ONE_OO_TWO_D: 2,
           Policy.TWO_OO_THREE: 2, Policy.ONE_OO_THREE_D: 3}


class ChannelState(StrEnum):
    """The life of one channel as the voter and supervisor see it.

    STARTING: launched, not yet passed its first self-test; does not vote.
    UP: votes.
    QUARANTINED: outvoted or failed a check; does not vote; waits for restart or self-test.
    RESTARTING: its process is being restarted (backoff running).
    ISOLATED: permanently out of the vote until an operator reset.
    """

    STARTING = "STARTING"
    UP = "UP"
    QUARANTINED = "QUARANTINED"
    RESTARTING = "RESTARTING"
    ISOLATED = "ISOLATED"


class IllegalTransition(RuntimeError):
    """A state machine was asked to make a transition its table does not allow."""


MODE_TRANSITIONS: frozenset[tuple[Mode, Mode]] = frozenset(
    {
        (Mode.NORMAL, Mode.DEGRADED),
        (Mode.NORMAL, Mode.SAFE),
        (Mode.DEGRADED, Mode.NORMAL),  # a quarantined channel rejoined after a passed self-test
        (Mode.DEGRADED, Mode.SAFE),
        (Mode.SAFE, Mode.NORMAL),  # operator reset only
    }
)

CHANNEL_TRANSITIONS: frozenset[tuple[ChannelState, ChannelState]] = frozenset(
    {
        (ChannelState.STARTING, ChannelState.UP),
        (ChannelState.STARTING, ChannelState.QUARANTINED),
        (ChannelState.STARTING, ChannelState.RESTARTING),
        (ChannelState.STARTING, ChannelState.ISOLATED),
        (ChannelState.UP, ChannelState.QUARANTINED),
        (ChannelState.UP, ChannelState.RESTARTING),
        (ChannelState.UP, ChannelState.ISOLATED),
        (ChannelState.UP, ChannelState.STARTING),  # operator reset: must pass a self-test again
        (ChannelState.QUARANTINED, ChannelState.UP),  # passed its self-test
        (ChannelState.QUARANTINED, ChannelState.RESTARTING),
        (ChannelState.QUARANTINED, ChannelState.ISOLATED),
        (ChannelState.QUARANTINED, ChannelState.STARTING),  # operator reset
        (ChannelState.RESTARTING, ChannelState.STARTING),
        (ChannelState.RESTARTING, ChannelState.ISOLATED),
        (ChannelState.ISOLATED, ChannelState.STARTING),  # operator reset only
    }
)


def check_transition(
    table: frozenset[tuple[Mode, Mode]] | frozenset[tuple[ChannelState, ChannelState]],
    old: Mode | ChannelState,
    new: Mode | ChannelState,
) -> None:
    """Raise `IllegalTransition` unless `old → new` is in `table` (staying put is always allowed)."""
    if old == new:
        return
    if (old, new) not in table:
        raise IllegalTransition(f"{type(old).__name__} {old.value} -> {new.value} is not allowed")
