"""Small pieces the runtime core is built from: what it knows of a request in flight, of
a self-test in flight, of the golden patterns and of the channels' processes, and the
total helpers that turn client content into safe text and numbers."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import numpy.typing as npt

from safemon.config import Config
from safemon.errors import PatternError
from safemon.kernels.catalog import Variant
from safemon.model_registry import RegisteredModel
from safemon.patterns import scheduler as sch
from safemon.patterns.controller import FaultKind
from safemon.states import Policy

if TYPE_CHECKING:
    from safemon.runtime.device_requests import DeviceIo

__all__ = [
    "FAIL_ERRORS",
    "MAX_QUOTE",
    "RETESTED",
    "GoldenPatternLike",
    "Live",
    "ProcessView",
    "SelfTestInFlight",
    "assign_patterns",
    "client_deadline_s",
    "digest",
    "quote",
    "scheduler_config",
]

#: error_type names on the wire → what the client raises (see `safemon.client`).
FAIL_ERRORS: dict[str, str] = {
    "safe_state": "SafeStateError",
    "timeout": "VoteTimeoutError",
    "disagreement": "DisagreementError",
    # A channel reported it could not compute and no agreeing quorum is left: no
    # trustworthy result could be formed, which is what VoteTimeoutError means.
    "channel_error": "VoteTimeoutError",
}

#: Error texts built from request content are cut to this many characters, so an error
#: reply always fits the header limit (a long weight id or command cannot break it).
MAX_QUOTE = 80

#: Faults classified by retest before the reaction (`safemon.fault_classes`).
RETESTED = frozenset({FaultKind.SELFTEST_FAILED, FaultKind.DISAGREEMENT_MINORITY})


def quote(value: object) -> str:
    """repr(value), cut to `MAX_QUOTE` characters: safe to put in any error reply."""
    text = repr(value)
    return text if len(text) <= MAX_QUOTE else text[: MAX_QUOTE - 3] + "..."


def digest(a: npt.NDArray[Any]) -> bytes:
    """A 16-byte BLAKE2b digest of `a`'s dtype, shape and bytes (what the voter compares)."""
    h = hashlib.blake2b(digest_size=16)
    h.update(f"{a.dtype.str}{a.shape}".encode())
    h.update(np.ascontiguousarray(a).reshape(-1).view(np.uint8).data)
    return h.digest()


def client_deadline_s(deadline_ms: object, budget_s: float) -> float:
    """The client's own deadline in seconds (capped by the channel budget `budget_s`);
    anything that is not a positive finite number of milliseconds means "no own deadline".
    Total: never raises, whatever the client sent."""
    if isinstance(deadline_ms, bool) or not isinstance(deadline_ms, int | float):
        return budget_s
    ms = float(deadline_ms)
    if not (ms > 0.0 and ms < float("inf")):
        return budget_s
    return min(budget_s, ms / 1000.0)


class GoldenPatternLike(Protocol):
    """What the runtime needs of `safemon.patterns.golden.GoldenPattern`."""

    @property
    def id(self) -> str: ...
    @property
    def a(self) -> npt.NDArray[np.float32]: ...
    @property
    def b(self) -> npt.NDArray[np.float32]: ...
    @property
    def variant(self) -> Variant: ...

    def check(self, c: Any, es: Any) -> bool: ...


class ProcessView(Protocol):
    """What the core reads of the channels' processes (`safemon.channels.supervisor.Supervisor`,
    owned by the shell; the core changes them only through effects)."""

    def incarnation(self, channel: str) -> int: ...
    def registered(self, channel: str) -> bool: ...
    def running(self, channel: str) -> bool: ...
    def lost(self, channel: str) -> bool: ...
    def awaiting_registration(self, channel: str) -> bool: ...


@dataclass
class Live:
    """A client request in flight."""

    identity: bytes
    client_seq: int
    submitted: float
    #: x as received; None for a device-resident request (x stays in the client's buffer)
    x: npt.NDArray[np.float32] | None
    weight_id: str
    policy: Policy
    #: per voting channel, the incarnation the work was sent to: a fresh incarnation is
    #: never blamed for what its predecessor left unanswered.
    incarnations: dict[str, int] = field(default_factory=dict)
    results: dict[str, npt.NDArray[np.float32]] = field(default_factory=dict)
    kernel_seconds: dict[str, float] = field(default_factory=dict)
    #: a whole-model request's model (None: a matmul request on `weight_id`)
    model: RegisteredModel | None = None
    #: a device-resident request's buffers and answers (None: x and C travel as frames)
    device: DeviceIo | None = None
    #: per channel that answered `input_invalid` (the request's values held or made NaN or
    #: infinity in a product), its text (`RuntimeCore._on_input_invalid`)
    invalid: dict[str, str] = field(default_factory=dict)


@dataclass
class SelfTestInFlight:
    """A self-test sent to `channel` (daemon seq → this) and not yet answered."""

    channel: str
    test_id: int
    pattern: GoldenPatternLike
    started: float


def assign_patterns(config: Config, patterns: Sequence[GoldenPatternLike],
                    sm_count: int | None) -> tuple[dict[str, list[GoldenPatternLike]], tuple[str, ...]]:
    """Per channel, the patterns of its own variant (its own covering shape, sized for its
    tile), and the scheduler's pattern ids that index them ("p0", "p1", ...).

    Raises:
        PatternError: a channel has no pattern of its variant and dims.
    """
    assert config.channels is not None
    from safemon.patterns.golden import channel_pattern_shapes

    by_channel: dict[str, list[GoldenPatternLike]] = {}
    for ch in config.channels:
        shapes = channel_pattern_shapes(config, ch, sm_count)
        mine: list[GoldenPatternLike] = []
        for m, n, k in shapes:
            v = ch.variant.to_variant(m, n, k)
            mine += [p for p in patterns
                     if p.variant == v and p.a.shape == (m, k) and p.b.shape == (k, n)]
        if not mine:
            raise PatternError(
                f"no golden pattern for channel {ch.name!r} (variant "
                f"{ch.variant.to_variant(*shapes[0]).name}, dims {config.patterns.dims})"
            )
        by_channel[ch.name] = mine
    n = min(len(v) for v in by_channel.values())
    return by_channel, tuple(f"p{i}" for i in range(n))


def scheduler_config(config: Config, pattern_ids: tuple[str, ...]) -> sch.SchedulerConfig:
    """The DTI scheduler's settings from the deployment (scrubs only with weights ECC)."""
    t = config.timing
    return sch.SchedulerConfig(
        dti=t.dti_s, selftest_deadline=t.selftest_deadline_s, patterns=pattern_ids,
        jitter=t.dti_jitter,
        scrub_interval=t.scrub_interval_s if config.weights.ecc else None,
    )
