"""The scrubber's registry: the resident protected buffers and one patrol over all of them.

Scheduling is not done here: the daemon's periodic-job runner calls `scrub_all` at the
period its config gives (STYLE.md 8). Metrics are not wired here either: `counts()`
returns the cumulative per-buffer totals for `safemon_ecc_corrected_total{buffer}` and
`safemon_ecc_uncorrectable_total{buffer}`, and `on_result` sees each patrol's result.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from safemon.ecc.protected import ProtectedArray, ScrubResult
from safemon.errors import InvalidInputError

__all__ = ["EccCounts", "ScrubRegistry"]


@dataclass(frozen=True)
class EccCounts:
    """Cumulative ECC counts of one buffer (monotonic, ready for Prometheus counters)."""

    corrected_total: int
    uncorrectable_total: int


class ScrubRegistry:
    """Named `ProtectedArray`s that one patrol checks in registration order.

    Args:
        on_result: called with every `ScrubResult` of `scrub_all`, in order (e.g. to log
            or to increment metrics by `corrected` and `new_uncorrectable`).
    """

    def __init__(self, on_result: Callable[[ScrubResult], None] | None = None) -> None:
        self._buffers: dict[str, ProtectedArray] = {}
        self._lock = threading.Lock()
        self._on_result = on_result

    def register(self, buffer: ProtectedArray) -> None:
        """Add a buffer to the patrol.

        Raises:
            InvalidInputError: not a ProtectedArray, or a buffer of that name is registered.
        """
        if not isinstance(buffer, ProtectedArray):
            raise InvalidInputError(f"only ProtectedArray can be scrubbed, got {type(buffer).__name__}")
        with self._lock:
            if buffer.name in self._buffers:
                raise InvalidInputError(f"a buffer named {buffer.name!r} is already registered")
            self._buffers[buffer.name] = buffer

    def unregister(self, name: str) -> None:
        """Remove a buffer. Raises `InvalidInputError` (a `ValueError`) for an unknown name."""
        with self._lock:
            if name not in self._buffers:
                raise InvalidInputError(f"no buffer named {name!r} is registered")
            del self._buffers[name]

    def names(self) -> list[str]:
        """Registered buffer names, in patrol order."""
        with self._lock:
            return list(self._buffers)

    def __len__(self) -> int:
        with self._lock:
            return len(self._buffers)

    def scrub_all(self) -> list[ScrubResult]:
        """Scrub every registered buffer once, in registration order; one result each.

        An uncorrectable buffer does not stop the patrol: it is reported in its result
        (and its next `verified()` raises). Other exceptions (a CUDA failure) propagate.
        """
        with self._lock:
            buffers = list(self._buffers.values())
        results = []
        for buf in buffers:
            res = buf.scrub()
            if self._on_result is not None:
                self._on_result(res)
            results.append(res)
        return results

    def counts(self) -> dict[str, EccCounts]:
        """Cumulative corrected / uncorrectable counts per registered buffer name."""
        with self._lock:
            return {
                name: EccCounts(b.corrected_total, b.uncorrectable_total)
                for name, b in self._buffers.items()
            }
