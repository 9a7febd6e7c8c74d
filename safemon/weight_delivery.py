"""Acknowledged weight delivery to one channel incarnation (sans-IO: no sockets, no clock).

A channel keeps every registered weight resident. Sending them fire-and-forget through a
bounded socket queue loses some when there are many (the send fails at the high-water
mark), and the channel then fails requests it should serve. Instead each weight is sent,
the channel answers `EVENT event="weight"` with `ok`, and at most `window` weights are
unacknowledged at once. The daemon lets a (re)started channel join the self-test schedule,
and so the vote, only once `idle` (every weight acknowledged), and answers a client's
`register_weight` once every running channel acknowledged the new weight.

A weight that is refused (`ok=False`) or not acknowledged by its deadline is evidence of a
channel fault; the daemon reports it as such.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable

from safemon.seconds import postponed

__all__ = ["WeightDelivery"]


class WeightDelivery:
    """The weights owed to one channel incarnation.

    Args:
        window: most weights sent and not yet acknowledged (>= 1).
    """

    def __init__(self, window: int = 16) -> None:
        if window < 1:
            raise ValueError(f"window must be >= 1, got {window}")
        self.window = window
        self._queue: collections.deque[str] = collections.deque()
        self._pending: dict[str, float] = {}  # weight id -> ack deadline (seconds)
        self._postponed: dict[str, float] = {}  # weight id -> how much `postpone` moved it

    def begin(self, weight_ids: Iterable[str]) -> None:
        """Start afresh (a new incarnation): owe every weight in `weight_ids`."""
        self._queue = collections.deque(dict.fromkeys(weight_ids))
        self._pending.clear()
        self._postponed.clear()

    def add(self, weight_id: str) -> None:
        """Owe one more weight (registered while the channel runs)."""
        if weight_id not in self._pending and weight_id not in self._queue:
            self._queue.append(weight_id)

    def next_to_send(self) -> str | None:
        """The next weight to send now (window permitting), or None; call `sent` or
        `send_failed` with it."""
        if len(self._pending) >= self.window or not self._queue:
            return None
        return self._queue[0]

    def sent(self, weight_id: str, deadline: float) -> None:
        """`weight_id` (the one `next_to_send` gave) is on its way; ack due by `deadline`."""
        if self._queue and self._queue[0] == weight_id:
            self._queue.popleft()
        self._pending[weight_id] = deadline
        self._postponed.pop(weight_id, None)

    def send_failed(self, weight_id: str) -> None:
        """The send of `weight_id` (marked `sent`) did not leave: owe it again, first in
        line, with no acknowledgement awaited. Unknown ids are ignored."""
        self._postponed.pop(weight_id, None)
        if self._pending.pop(weight_id, None) is not None:
            self._queue.appendleft(weight_id)

    def ack(self, weight_id: str) -> bool:
        """The channel acknowledged `weight_id`; False if it was not awaited."""
        self._postponed.pop(weight_id, None)
        return self._pending.pop(weight_id, None) is not None

    def overdue(self, now: float) -> list[str]:
        """Weights whose acknowledgement is late at `now` (they stay pending)."""
        return [w for w, d in self._pending.items() if d <= now]

    def postpone(self, since: float, seconds: float, limit: float) -> None:
        """The daemon read no channel message for `seconds` after `since`: every
        acknowledgement due after `since` is due `seconds` later, none more than `limit` in
        all."""
        for w, d in self._pending.items():
            self._pending[w], self._postponed[w] = postponed(
                d, self._postponed.get(w, 0.0), since=since, seconds=seconds, limit=limit)

    def owes(self, weight_id: str) -> bool:
        """Whether `weight_id` is still queued or unacknowledged."""
        return weight_id in self._pending or weight_id in self._queue

    def next_deadline(self) -> float | None:
        return min(self._pending.values(), default=None)

    def pending(self) -> list[str]:
        """The weights sent and not yet acknowledged, oldest send first."""
        return list(self._pending)

    @property
    def idle(self) -> bool:
        """Every owed weight was acknowledged."""
        return not self._queue and not self._pending
