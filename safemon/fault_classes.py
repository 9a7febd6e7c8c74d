"""Fault classification by retest, as OpenDCDiag does: before the reaction to a self-test
failure or a 2oo3 disagreement, the channel is self-tested again `retests` times; a fault
that shows again is *permanent*, one that does not is *transient*. Sans-IO: the daemon asks
for each retest and reports each result.

Only a fault of an UP channel voting under 2oo3 is retested before its reaction: the two
other channels still outvote it meanwhile (nothing it computes can be released alone), and
the retests take a few self-test latencies. Everywhere else (2oo2, 1oo2D, 1oo1D, crashes,
hangs, overruns, ECC) waiting is not safe or not meaningful, and the fault is reported at
once as `unclassified`. The reaction is the controller's in every case (a 2oo3 minority is
quarantined and restarted whatever its class); the class is recorded in the fault event's
detail, in `safemon_fault_classes_total{kind, class}` and in `status`.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Generic, TypeVar

__all__ = ["Classifier", "FaultClass"]

F = TypeVar("F")


class FaultClass(StrEnum):
    TRANSIENT = "transient"
    PERMANENT = "permanent"
    UNCLASSIFIED = "unclassified"


@dataclass
class _Retest(Generic[F]):
    fault: F
    remaining: int
    failed: int = 0


class Classifier(Generic[F]):
    """Retests in progress, per channel. `F` is the caller's fault record.

    Args:
        retests: self-tests to run after the first failure (>= 0; 0 = no retest, every
            fault is reported at once as unclassified).
    """

    def __init__(self, retests: int) -> None:
        if retests < 0:
            raise ValueError(f"retests must be >= 0, got {retests}")
        self.retests = retests
        self._active: dict[str, _Retest[F]] = {}

    def active(self, channel: str) -> bool:
        return channel in self._active

    def begin(self, channel: str, fault: F) -> bool:
        """Start retesting `channel` for `fault`; False (nothing started) if retests is 0
        or one is already running. The caller then asks for a self-test."""
        if self.retests == 0 or channel in self._active:
            return False
        self._active[channel] = _Retest(fault, self.retests)
        return True

    def result(self, channel: str, passed: bool) -> tuple[F, FaultClass] | None:
        """One retest of `channel` finished. None: ask for another; else the fault and
        its class, and the retest is over."""
        r = self._active[channel]
        r.remaining -= 1
        if not passed:
            r.failed += 1
        if r.remaining > 0:
            return None
        del self._active[channel]
        return r.fault, FaultClass.PERMANENT if r.failed else FaultClass.TRANSIENT

    def abandon(self, channel: str) -> F | None:
        """Stop retesting `channel` (it crashed, left, or the mode changed); its fault."""
        r = self._active.pop(channel, None)
        return None if r is None else r.fault
