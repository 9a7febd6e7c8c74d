"""What can happen to the daemon: the stimuli `RuntimeCore.handle` accepts.

Each is a frozen dataclass stamped by the shell with `now` (monotonic seconds, the core's
injected clock) and a `stimulus_id` that every effect it causes carries back, so that a
reaction can be traced to its cause (a log line, a reply, a restart). Messages arrive
decoded and already authenticated (`safemon.transport`: limits, staleness, link token, the
channel a socket belongs to); the core judges their content.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from safemon.transport.wire import Message

__all__ = [
    "ChannelMessage",
    "ChannelRegistered",
    "ChannelReplaced",
    "ControlMessage",
    "DrainFinished",
    "DropSendFailed",
    "IngressMessage",
    "LoopAway",
    "ProcessLost",
    "Stimulus",
    "StopRequested",
    "TimerTick",
    "WeightSendFailed",
    "stimulus_id",
]

_ids = itertools.count(1)


def stimulus_id(prefix: str) -> str:
    """A fresh stimulus id, `<prefix>-<n>` (unique within this process)."""
    return f"{prefix}-{next(_ids)}"


@dataclass(frozen=True)
class IngressMessage:
    """A client's message on the ingress socket (`identity`: its ROUTER address)."""

    identity: bytes
    message: Message
    now: float
    stimulus_id: str


@dataclass(frozen=True)
class ControlMessage:
    """An operator's message on the control socket."""

    identity: bytes
    message: Message
    now: float
    stimulus_id: str


@dataclass(frozen=True)
class ChannelMessage:
    """A message from channel `channel`'s current incarnation (link token checked)."""

    channel: str
    message: Message
    now: float
    stimulus_id: str


@dataclass(frozen=True)
class ChannelRegistered:
    """Channel `channel`'s incarnation `incarnation` registered (the supervisor's
    `Started`): it is owed every weight, then joins the self-test schedule."""

    channel: str
    incarnation: int
    now: float
    stimulus_id: str


@dataclass(frozen=True)
class ChannelReplaced:
    """A new incarnation of `channel` was started: the old one's queue died with it."""

    channel: str
    now: float
    stimulus_id: str


@dataclass(frozen=True)
class ProcessLost:
    """The supervisor found `channel` gone: `kind` "crash" (exited) or "heartbeat_lost"."""

    channel: str
    kind: str
    detected_at: float
    detail: str
    now: float
    stimulus_id: str


@dataclass(frozen=True)
class WeightSendFailed:
    """The sends of `weight_ids` (in the order they were sent) to `channel` failed (socket
    full or gone): they are owed again, in that order, and retried on a later tick."""

    channel: str
    weight_ids: tuple[str, ...]
    now: float
    stimulus_id: str


@dataclass(frozen=True)
class DropSendFailed:
    """The `drop_weight` commands for `weight_ids` could not be queued on `channel`'s socket
    (full or not connected; an inline channel that stopped): the channel still holds those
    evicted weights, beyond what the budget counts. They are sent again on a later tick,
    unless the weight was registered again meanwhile or the channel was replaced (a new
    incarnation holds nothing)."""

    channel: str
    weight_ids: tuple[str, ...]
    now: float
    stimulus_id: str


@dataclass(frozen=True)
class TimerTick:
    """Time passed: voter deadlines, scheduler wakeups, client deadlines, weight acks."""

    now: float
    stimulus_id: str


@dataclass(frozen=True)
class LoopAway:
    """The shell read no channel message for `seconds` after `since` (its loop was busy,
    stalled or descheduled; `safemon.loop_attention`): the open deadlines of the channels'
    work (requests, self-tests, scrubs, weight acknowledgements) after `since` move
    `seconds` later, so that time is not counted against them."""

    since: float
    seconds: float
    now: float
    stimulus_id: str


@dataclass(frozen=True)
class StopRequested:
    """The drain began: new requests are refused, requests in flight are answered."""

    now: float
    stimulus_id: str


@dataclass(frozen=True)
class DrainFinished:
    """The drain ended: what is still open is answered with ShuttingDownError."""

    now: float
    stimulus_id: str


Stimulus = (IngressMessage | ControlMessage | ChannelMessage | ChannelRegistered
            | ChannelReplaced | ProcessLost | WeightSendFailed | DropSendFailed | TimerTick | StopRequested
            | DrainFinished | LoopAway)
