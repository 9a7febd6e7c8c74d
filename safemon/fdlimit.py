"""Descriptor budget: every client connection holds a file descriptor in the daemon.

At start the daemon refuses to start unless the hard `RLIMIT_NOFILE` covers
`limits.max_connections` client connections plus `RESERVED_FDS` for itself (channel
sockets and their reconnects, the metrics endpoint, hook pipes, log files), and raises its
soft limit to `TARGET_FDS` (or the hard limit if lower). The systemd unit sets
`LimitNOFILE=65536`. Not covered: libzmq aborts the process when an ipc:// accept fails
with EMFILE, so a local process of the daemon's user that opens more connections than the
soft limit at once can still stop the daemon (systemd restarts it); the runtime dir's
0700 mode keeps other users from connecting at all.
"""

from __future__ import annotations

import resource

from safemon.errors import ConfigError

__all__ = ["RESERVED_FDS", "ensure_fd_budget"]

#: Descriptors the daemon keeps for itself beyond the client connections.
RESERVED_FDS = 256
#: The soft limit the daemon raises itself to when the hard limit allows.
TARGET_FDS = 65536


def ensure_fd_budget(max_connections: int) -> int:
    """Raise the soft descriptor limit to cover `max_connections` + `RESERVED_FDS`
    (up to the hard limit); returns the soft limit now in force.

    Raises:
        ConfigError: the hard limit is too low (raise LimitNOFILE / `ulimit -Hn`, or lower
            limits.max_connections).
    """
    need = max_connections + RESERVED_FDS
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < need:
        raise ConfigError(
            f"limits.max_connections: {max_connections} connections need {need} file "
            f"descriptors, but the hard limit is {hard} (raise LimitNOFILE or ulimit -Hn)")
    # As far as allowed (capped at TARGET_FDS): libzmq aborts the process when accepting an
    # ipc:// connection fails with EMFILE, so headroom far beyond the bound is the defence.
    target = TARGET_FDS if hard == resource.RLIM_INFINITY else min(hard, TARGET_FDS)
    if soft != resource.RLIM_INFINITY and soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        soft = target
    return int(soft)
