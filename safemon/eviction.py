"""Which registered entries to evict so that a new one fits a budget (pure; no daemon state).

A daemon runs for months beside applications that come and go and load new models. Every
registered weight stays resident in every channel, and `limits.max_weights` /
`limits.max_weight_total_bytes` (and `model_registry.MAX_MODELS` for models) bound what is
held. Until 2026-12-06 a full budget refused every later registration until the daemon
restarted, whoever had filled it. Now the budget is a cache: the least recently used
entries that no request in flight needs are evicted to make room. A client whose weight or
model was evicted gets `UnknownWeightError` / `UnknownModelError` on its next request, and
`Client` registers its own copy again and retries within the same timeout (as after a
daemon restart), so an eviction costs a client a registration, never a wrong or lost result.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

__all__ = ["choose_evictions"]


def choose_evictions(lru: Iterable[str], sizes: Mapping[str, int], in_use: set[str] | frozenset[str],
                     *, new_bytes: int, max_count: int, max_bytes: int) -> list[str] | None:
    """The entries to evict, oldest first, so that one more entry of `new_bytes` fits.

    Args:
        lru: the registered ids, least recently used first.
        sizes: bytes of each registered id (every id of `lru`).
        in_use: ids that must stay (needed by a request in flight, or still being
            delivered); never chosen.
        new_bytes: size of the entry to add (>= 0).
        max_count / max_bytes: the budget: at most `max_count` entries of at most
            `max_bytes` bytes in all, the new one included.

    Returns:
        [] when it fits already; the ids to evict (the fewest, oldest first, skipping
        `in_use`) when that makes it fit; None when even evicting every id not in use
        would not (then nothing should be evicted).
    """
    order = list(lru)
    count = len(order)
    total = sum(sizes[i] for i in order)
    chosen: list[str] = []
    for wid in order:
        if count < max_count and total + new_bytes <= max_bytes:
            break
        if wid in in_use:
            continue
        chosen.append(wid)
        count -= 1
        total -= sizes[wid]
    if count < max_count and total + new_bytes <= max_bytes:
        return chosen
    return None
