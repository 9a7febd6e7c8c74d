"""Which occurrences of a repeated warning are logged: the first ten, then every power of two.

A peer can make the daemon repeat a warning as fast as it can send (a message the transport
rejects, a handshake ZAP denies, replies to a client that never reads them). One line per
occurrence turns its flood into a flood of the log: 47,000 lines (10 MB) in 5 s for
`reply_undeliverable` before 2026-12-06. Each logged line carries the running count, so the
n-th line still says how many happened; the metrics count every one where one exists.
"""

from __future__ import annotations

__all__ = ["sampled"]


def sampled(n: int) -> bool:
    """Whether the `n`-th occurrence (1-based) of a warning is logged: n <= 10 or n a power of
    two (so at most 10 + log2(n) lines for n occurrences)."""
    return n <= 10 or n & (n - 1) == 0
