"""When a channel sent a message: a stamp every message of a process or stream channel
carries, so that the daemon judges a channel's silence by when the channel last spoke, not by
when the daemon got round to reading it (`safemon.channels.supervisor`, docs/SAFETY.md "Who is late").

A message can wait in its socket for as long as the daemon's loop does not read it (a long
message, the process descheduled or stopped, a round of inline channels). Read afterwards, it
proves only that the channel was alive when it sent it. Process and stream channels stamp
every message with their `time.monotonic()`; every channel runs on the daemon's host, a
process the daemon started, so both read the same CLOCK_MONOTONIC. The daemon never takes a
stamp as later than the moment it read the message (`Supervisor._heard`), so a channel
cannot buy time with a wrong stamp, only lose it.

Inline channels (`safemon.channels.inline`) send no stamp: they run only when the daemon's
loop runs them, one after another, so a message an inline channel made before the loop ran
the other channels would make it look silent for their time; what an inline channel sent
counts from when the loop takes it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

__all__ = ["SENT_FIELD", "sent_at"]

#: The header meta key that carries the stamp (monotonic seconds, a float).
SENT_FIELD = "sent_s"


def sent_at(meta: Mapping[str, object]) -> float | None:
    """The send stamp in `meta`, or None when there is none or it is not a finite number
    (the message is then taken as sent when it was read)."""
    got = meta.get(SENT_FIELD)
    if isinstance(got, bool) or not isinstance(got, (int, float)) or not math.isfinite(got):
        return None
    return float(got)
