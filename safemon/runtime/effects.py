"""What the daemon shell must do: the effects `RuntimeCore.handle` returns, in order.

Each is a frozen dataclass carrying the `stimulus_id` of the stimulus that caused it. The
shell (`safemon.daemon`) carries them out in the order given: sockets, the supervisor's
processes, the hook, the log, systemd. Nothing here performs anything.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy.typing as npt

from safemon.patterns.controller import FaultKind
from safemon.transport.wire import Kind

__all__ = [
    "Effect",
    "IsolateChannel",
    "Log",
    "Publish",
    "ReactionDone",
    "Reply",
    "ReplyStatus",
    "RestartChannel",
    "RunHook",
    "SendToChannel",
    "SystemdReady",
    "SystemdStatus",
]


@dataclass(frozen=True)
class SendToChannel:
    """Send one message to `channel`'s current incarnation (the shell adds its link
    token). A failed send is dropped (the deadline or overrun reports it), except a
    weight's (`weight_id` set): the shell reports that back as `WeightSendFailed`, and a
    `drop_weight` command's (`drops_weight` set, the evicted weight's id): reported back as
    `DropSendFailed`.
    `busy_until` (core clock, seconds): work or a weight keeps the channel's loop busy, and
    so without heartbeats, until at most then; the shell tells the supervisor."""

    channel: str
    kind: Kind
    seq: int
    meta: Mapping[str, Any]
    arrays: tuple[npt.NDArray[Any], ...] = ()
    weight_id: str | None = None
    stimulus_id: str = ""
    busy_until: float | None = None
    drops_weight: str | None = None


@dataclass(frozen=True)
class Reply:
    """Answer a client on `socket` ("ingress" or "control") at ROUTER address `identity`."""

    socket: Literal["ingress", "control"]
    identity: bytes
    kind: Kind
    seq: int
    meta: Mapping[str, Any]
    arrays: tuple[npt.NDArray[Any], ...] = ()
    stimulus_id: str = ""


@dataclass(frozen=True)
class ReplyStatus:
    """Answer the operator's `status` command with the operator view (built by the shell,
    which adds what only it knows: processes, endpoints, the reactions it carried out)."""

    identity: bytes
    seq: int
    stimulus_id: str = ""


@dataclass(frozen=True)
class RestartChannel:
    """Restart `channel` `delay` seconds after `now` (the supervisor)."""

    channel: str
    delay: float
    now: float
    stimulus_id: str = ""


@dataclass(frozen=True)
class IsolateChannel:
    """Stop `channel` and keep it stopped (the supervisor)."""

    channel: str
    now: float
    stimulus_id: str = ""


@dataclass(frozen=True)
class Publish:
    """Publish a typed event on the events PUB socket."""

    event_type: str
    payload: Mapping[str, Any]
    stimulus_id: str = ""


@dataclass(frozen=True)
class RunHook:
    """Run the configured hook command with the event as JSON on its stdin."""

    event_type: str
    payload: Mapping[str, Any]
    stimulus_id: str = ""


@dataclass(frozen=True)
class Log:
    """One structured log line (`level`: a structlog method name)."""

    level: Literal["debug", "info", "warning", "error"]
    event: str
    fields: Mapping[str, Any] = field(default_factory=dict)
    stimulus_id: str = ""


@dataclass(frozen=True)
class SystemdReady:
    """A voting set exists: `ready` is set and systemd hears READY=1 (once)."""

    stimulus_id: str = ""


@dataclass(frozen=True)
class SystemdStatus:
    """Mode or channel states may have changed: systemd's STATUS= line (sent on change)."""

    stimulus_id: str = ""


@dataclass(frozen=True)
class ReactionDone:
    """A fault led to a reaction (the controller's `RecordReaction`); emitted after the
    reaction's other effects, so the shell measures FRTI once they are carried out:
    max(`frti_floor`, clock - `detected_at`) seconds."""

    kind: FaultKind
    fdti_seconds: float | None
    frti_floor: float
    detected_at: float
    fault_class: str
    channel: str | None
    detail: str
    steps: tuple[tuple[str, float], ...] = ()
    stimulus_id: str = ""


Effect = (SendToChannel | Reply | ReplyStatus | RestartChannel | IsolateChannel | Publish | RunHook | Log
          | SystemdReady | SystemdStatus | ReactionDone)
