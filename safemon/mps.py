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
the app, with its own environment, uses it. Pure apart from one `stat`; no CUDA call.
"""

from __future__ import annotations

import collections
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
    """Whether `pipe_directory(env)` holds the control daemon's pipe (a FIFO or a socket
    named `control`): True while `nvidia-cuda-mps-control -d` runs there. A stale pipe
    left by a killed control daemon also counts (the CUDA processes then fail to start
    or fall back, as CUDA decides); an unreadable directory counts as not found."""
    try:
        mode = (pipe_directory(env) / _CONTROL).stat().st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


def shared_gpus(gpus: Iterable[int | None]) -> list[int]:
    """The CUDA device indices that more than one channel uses, ascending, from each
    channel's configured `gpu` (None: the default device 0)."""
    per_gpu = collections.Counter(0 if g is None else g for g in gpus)
    return sorted(g for g, n in per_gpu.items() if n > 1)
