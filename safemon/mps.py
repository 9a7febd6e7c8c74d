"""Whether the channels' CUDA processes will run under CUDA MPS, and why it matters.

Several processes that use one GPU (channel processes, and the inference app that stages
its x and takes its output beside inline channels) get their own CUDA contexts, which the
driver time-slices: the GPU switches context at the first wait of one process after the
other's kernels. Under CUDA MPS (the Multi-Process Service) their work shares one context
on the GPU instead. Measured on one H100 (evidence/h100-2026-12-06-stop53/, three pairs
with MPS off and on alternated in one call), MPS made 25 of 27 pairs of device-resident
2oo3 request medians faster (process, stream and inline channels; 80³, 1024×1024×64 and the
4-layer MLP): process channels 0.72-0.79× at 80³, inline channels 0.82-0.89× for the MLP;
the two others were 1.01× (deploy/README.md, "Several channels on one GPU").

A CUDA process becomes an MPS client when, as CUDA starts in it, a control daemon
(`nvidia-cuda-mps-control -d`) is listening in the pipe directory its environment names:
`CUDA_MPS_PIPE_DIRECTORY`, `/tmp/nvidia-mps` when unset. The channel processes inherit the
daemon's environment, so `control_pipe_found(os.environ)` tells whether they will find
one. What it does not tell: whether that server accepts this user's processes (an MPS
server runs for one user at a time; a client of another user waits or fails), and whether
the app, with its own environment, uses it. No CUDA call: one `stat` of the control pipe
and, when it is a socket, one connection attempt that is closed at once.
"""

from __future__ import annotations

import collections
import errno
import socket
import stat
from collections.abc import Iterable, Mapping
from pathlib import Path

__all__ = ["DEFAULT_PIPE_DIRECTORY", "control_pipe_found", "pipe_directory", "shared_gpus"]

DEFAULT_PIPE_DIRECTORY = Path("/tmp/nvidia-mps")
"""Where CUDA looks for the MPS control daemon's pipes when `CUDA_MPS_PIPE_DIRECTORY` is
unset (NVIDIA's MPS documentation)."""

#: The control daemon's named pipe in the pipe directory.
_CONTROL = "control"


def pipe_directory(env: Mapping[str, str]) -> Path:
    """The MPS pipe directory a CUDA process started with `env` would use."""
    named = env.get("CUDA_MPS_PIPE_DIRECTORY", "")
    return Path(named) if named else DEFAULT_PIPE_DIRECTORY


def control_pipe_found(env: Mapping[str, str]) -> bool:
    """Whether a control daemon (`nvidia-cuda-mps-control -d`) serves `pipe_directory(env)`:
    its pipe `control` is a socket that accepts a connection (or has a full backlog), or a
    FIFO (which cannot be probed without a command; it counts as found). A socket left by
    a killed control daemon refuses the connection and does not count, nor does one this
    user may not connect to (CUDA's processes could not either), nor an unreadable
    directory."""
    path = pipe_directory(env) / _CONTROL
    try:
        mode = path.stat().st_mode
    except OSError:
        return False
    if stat.S_ISFIFO(mode):
        return True
    return stat.S_ISSOCK(mode) and _accepts(path)


#: Socket types a control pipe is tried as, in order: a connection of the wrong type fails
#: with EPROTOTYPE before reaching the listener. CUDA 13's control daemon listens on a
#: SOCK_SEQPACKET socket (evidence/h100-2026-12-06-stop54/, call 4); the probe's connection
#: leaves "Unable to accept connection" in its control.log, and nothing else.
_SOCKET_TYPES = (socket.SOCK_SEQPACKET, socket.SOCK_STREAM)


def _accepts(path: Path) -> bool:
    """Whether the Unix socket `path` has a listener: a non-blocking connect of each type in
    `_SOCKET_TYPES` until one is not the wrong type, closed at once."""
    for kind in _SOCKET_TYPES:
        with socket.socket(socket.AF_UNIX, kind) as probe:
            probe.setblocking(False)
            try:
                probe.connect(str(path))
            except BlockingIOError:  # EAGAIN: listening, its backlog full
                return True
            except OSError as exc:
                if exc.errno == errno.EPROTOTYPE:
                    continue
                return False  # refused (stale), no permission, path too long for AF_UNIX
        return True
    return False


def shared_gpus(gpus: Iterable[int | None]) -> list[int]:
    """The CUDA device indices that more than one channel uses, ascending, from each
    channel's configured `gpu` (None: the default device 0)."""
    per_gpu = collections.Counter(0 if g is None else g for g in gpus)
    return sorted(g for g, n in per_gpu.items() if n > 1)
