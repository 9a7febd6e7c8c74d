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

Whose weights go: the heaviest holder's. Each weight is *held* by the clients that registered
it (its claimants, by connection), and a client's holding is the bytes of the weights it
holds, a weight held by two counting fully for both. To make room for a client's new weight
(counted in its holding), the weights evicted are those of the client holding the most
bytes, least recently used first, one at a time, the holdings recounted after each. With one
client this is plain LRU. With several, a client that registers new weights in a loop (a
leak: a fresh array registered per request) pushes out its own weights once it holds the
most, not the others'; until then it takes room from the heaviest holder. Weights are taken
only from the heaviest holder that has an evictable one (a weight it shares with a lighter
client goes too), so among clients that all want more than the budget holdings tend to even
shares of its bytes.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Set

__all__ = ["MAX_CLAIMANTS", "choose_evictions"]

#: The most clients a weight's claim list keeps (the latest registrants): ingress identities
#: are per connection, and a client that reconnects in a loop must not grow it without bound.
MAX_CLAIMANTS = 64


def choose_evictions(lru: Iterable[str], sizes: Mapping[str, int], in_use: Set[str],
                     *, new_bytes: int, max_count: int, max_bytes: int,
                     claims: Mapping[str, Collection[bytes]] | None = None,
                     newcomer: bytes | None = None) -> list[str] | None:
    """The entries to evict, in the order chosen, so that one more entry of `new_bytes` fits.

    Args:
        lru: the registered ids, least recently used first.
        sizes: bytes of each registered id (every id of `lru`).
        in_use: ids that must stay (needed by a request in flight, or still being
            delivered); never chosen.
        new_bytes: size of the entry to add (>= 0).
        max_count / max_bytes: the budget: at most `max_count` entries of at most
            `max_bytes` bytes in all, the new one included.
        claims: the clients holding each id (ids missing or with no claimant are held by
            nobody and go first). None: every id is one holder's (plain LRU).
        newcomer: the client adding the entry; its `new_bytes` count in its holding.

    Returns:
        [] when it fits already; the ids to evict (the heaviest holder's oldest, one at a
        time, skipping `in_use`) when that makes it fit; None when even evicting every id
        not in use would not (then nothing should be evicted).
    """
    order = list(lru)
    count = len(order)
    total = sum(sizes[i] for i in order)
    held: dict[bytes | None, int] = {}
    holders: dict[str, tuple[bytes | None, ...]] = {}
    for wid in order:
        who = tuple(claims.get(wid, ())) if claims is not None else (b"",)
        holders[wid] = who or (None,)  # None: held by nobody, heavier than anyone
        for c in holders[wid]:
            held[c] = held.get(c, 0) + sizes[wid]
    if newcomer is not None:
        held[newcomer] = held.get(newcomer, 0) + new_bytes
    candidates = [wid for wid in order if wid not in in_use]
    age = {wid: i for i, wid in enumerate(order)}
    chosen: list[str] = []
    while not (count < max_count and total + new_bytes <= max_bytes):
        if not candidates:
            return None
        # the heaviest holder among those with an evictable entry; its oldest such entry
        victim = max(candidates, key=lambda w: (
            max(float("inf") if c is None else held[c] for c in holders[w]),
            -age[w]))
        candidates.remove(victim)
        chosen.append(victim)
        count -= 1
        total -= sizes[victim]
        for c in holders[victim]:
            held[c] -= sizes[victim]
    return chosen
