"""Which registered entries to evict so that a new one fits a budget (pure; no daemon state).

A daemon runs for months beside applications that come and go and load new models. Every
registered weight stays resident in every channel, and `limits.max_weights` /
`limits.max_weight_total_bytes` (and `model_registry.MAX_MODELS` and
`limits.max_model_total_bytes` for models) bound what is held. Until 2026-12-06 a full
budget refused every later registration until the daemon restarted, whoever had filled it. Now the budget is a cache: the least recently used
entries that no request in flight needs are evicted to make room. A client whose weight or
model was evicted gets `UnknownWeightError` / `UnknownModelError` on its next request, and
`Client` registers its own copy again and retries within the same timeout (as after a
daemon restart), so an eviction costs a client a registration, never a wrong or lost result.

A per-client quota (`limits.max_client_weight_bytes`, off by default) bounds what one client
can push the others out with. Each registered weight is *held* by the clients that
registered it, and counts against each holder's quota (its bytes, at least
`max_weight_total_bytes / max_weights`). A client whose holdings would exceed the quota
gives up its own least recently used holds first (`holds_to_release`): the weights stay
registered, but a weight nobody holds is evicted before any held one (`eviction_order`).
While the quotas of the clients holding weights fit the budget together, a registration
never evicts a held weight, unless the weights nobody holds are in use (by requests in
flight, or still being delivered to a channel, as after a channel restart).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

__all__ = ["choose_evictions", "eviction_order", "holds_to_release"]


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


def eviction_order(lru: Iterable[str], held: Mapping[str, object],
                   also_unheld: set[str] | frozenset[str] = frozenset()) -> list[str]:
    """`lru` (least recently used first) with the ids nobody holds first: the order
    `choose_evictions` takes them in under a per-client quota. `held`: id -> its holders
    (an id absent or with no holders is held by nobody); `also_unheld`: ids to count as
    held by nobody (their only holder is giving them up)."""
    order = list(lru)
    unheld = [i for i in order if not held.get(i) or i in also_unheld]
    taken = set(unheld)
    return unheld + [i for i in order if i not in taken]


def holds_to_release(held_lru: Iterable[str], sizes: Mapping[str, int], *, new_bytes: int,
                     quota_bytes: int) -> list[str] | None:
    """The holds one client gives up, oldest first, so that a new weight counting `new_bytes`
    fits its quota.

    Args:
        held_lru: the ids this client holds, least recently used first.
        sizes: what each id of `held_lru` counts against the quota (bytes; the core's
            `_charge`: a weight's bytes, at least its share of the count budget).
        new_bytes: what the weight it registers counts (>= 0; not among `held_lru`).
        quota_bytes: `limits.max_client_weight_bytes`.

    Returns:
        [] when it fits already; the fewest oldest holds to give up otherwise; None when the
        new weight alone is over the quota (then nothing should be given up).
    """
    if new_bytes > quota_bytes:
        return None
    order = list(held_lru)
    total = sum(sizes[i] for i in order)
    released: list[str] = []
    for wid in order:
        if total + new_bytes <= quota_bytes:
            break
        released.append(wid)
        total -= sizes[wid]
    return released
