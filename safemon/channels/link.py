"""Channel-link authentication: every message between a daemon and one channel
incarnation carries a token only those two know.

The daemon (its `RealLauncher`) draws a fresh random key at each start. The token of
channel `name`, incarnation `i` is HMAC-SHA256(key, "name:i"), handed to a process channel
on its stdin (never on the command line or in the environment) and to a stream channel in
memory. Both ends put it in the header meta (`LINK_FIELD`) of every message they send and
drop, count and log every message without the right one: a local process that connects to
a channel's socket cannot upload weights or inject faults, and one that binds a channel's
address cannot answer in its place (its results are dropped, the channel misses its budget
and is restarted). What it does not give: confidentiality. A process that binds a channel's
address still receives what the daemon sends there (the weights); the runtime dir's 0700
mode and the daemon lock are what keep other users out.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Mapping

__all__ = ["LINK_FIELD", "link_ok", "link_token", "new_link_key"]

#: The header meta key that carries the token.
LINK_FIELD = "link"


def new_link_key() -> bytes:
    """A fresh 32-byte random key (one per daemon start)."""
    return os.urandom(32)


def link_token(key: bytes, channel: str, incarnation: int) -> str:
    """The token of `channel`'s incarnation `incarnation` (64 hex characters)."""
    return hmac.new(key, f"{channel}:{incarnation}".encode(), hashlib.sha256).hexdigest()


def link_ok(meta: Mapping[str, object], token: str) -> bool:
    """Whether `meta` carries `token` (constant-time comparison)."""
    got = meta.get(LINK_FIELD)
    return isinstance(got, str) and hmac.compare_digest(got, token)
