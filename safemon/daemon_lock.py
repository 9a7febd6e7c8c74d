"""One daemon per name: an exclusive `flock` on `<runtime_dir>/daemon.lock`.

The daemon takes the lock before it binds (or unlinks) any socket file and holds it for
its whole life; the kernel releases it when the process exits, however it exits. A second
`safemon run` with the same name (so the same runtime dir) fails with `DaemonLockedError`
naming the holder's pid and leaves the first daemon's sockets alone.

Only deployments with an `ipc://` endpoint need it: inproc:// lives in one process, and a
second bind of a tcp:// port fails on its own without touching anything of the first.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from safemon.config import Config
from safemon.errors import ConfigError
from safemon.transport.sockets import ensure_private_dir

__all__ = ["DaemonLock", "DaemonLockedError", "needs_lock"]

LOCK_NAME = "daemon.lock"


class DaemonLockedError(ConfigError):
    """Another daemon with the same name (same runtime dir) is running."""


def needs_lock(config: Config) -> bool:
    """Whether `config` binds socket files (an ipc:// endpoint or process channels)."""
    return config.endpoints.runtime_dir is not None and any(
        a.startswith("ipc://") for a in config.endpoints.addresses().values()
    )


class DaemonLock:
    """The held lock. `acquire` creates the runtime dir 0700 (or refuses a non-private
    one), then takes the lock; `release` drops it (idempotent)."""

    def __init__(self, fd: int, path: Path) -> None:
        self._fd: int | None = fd
        self.path = path

    @classmethod
    def acquire(cls, runtime_dir: Path, name: str) -> DaemonLock:
        """Raises DaemonLockedError (held elsewhere) or KeyPermissionError (bad dir)."""
        ensure_private_dir(runtime_dir)
        path = runtime_dir / LOCK_NAME
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise DaemonLockedError(
                f"another safemon daemon named {name!r} is running (pid {holder}, lock "
                f"{path}); stop it first or choose another name"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        return cls(fd, path)

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None
