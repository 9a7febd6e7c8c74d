"""Which CUDA stream priority a channel's stream gets: the quorum's channels first.

Inline channels (`safemon.channels.inline`) queue their device steps side by side on one GPU,
each on its own stream, and the daemon answers a vote as soon as a quorum of results agrees
(docs/RUNTIME.md, "Answering at the quorum"). With equal priorities the GPU's block scheduler
shares itself among all the channels' kernels, so the quorum's passes end at about the time
the last pass does. Giving the first `quorum` channels the greatest priority lets their
blocks go first; the other channels' blocks fill what is left and end later. Their results
are still computed in the same lockstep round and voted on as any other (a late
disagreement faults the late channel), so nothing is left out of the vote: only the order
in which the GPU serves the channels changes.

The rule applies only where it can pay: every channel inline (one CUDA context, one round)
and a policy whose quorum is smaller than its channel count (2oo3). Everywhere else every
channel keeps the least priority, which is CUDA's default (0), as before. A restarted
channel keeps its place: the rule reads the configuration, not the channel's state. A
priority is a scheduling hint: CUDA does not preempt blocks already running, and copies are
not affected. Measured on an H200: the quorum's GPU time for the 4-layer MLP request fell
9-20 % (docs/RUNTIME.md, "The quorum's streams first").
"""

from __future__ import annotations

from safemon.config import Config
from safemon.states import Policy

#: Far outside any device's priority range: CUDA clamps a stream created at such a priority
#: to the nearest end of the range (`cudaStreamCreateWithPriority`).
_FAR = 1 << 20
_NON_BLOCKING = 1  # cudaStreamNonBlocking


def device_priority_range() -> tuple[int, int]:
    """(least, greatest) stream priority of the current CUDA device, as
    `cudaDeviceGetStreamPriorityRange` gives them (CuPy does not wrap that call): two probe
    streams are created far outside the range on either side, CUDA clamps each to the
    nearest end, and their priorities are read back; the streams are destroyed before
    returning. least is 0 (the default) on every GPU CUDA supports; greatest is numerically
    lower (-5 on the H200 of evidence/h200-2026-12-07-stop62/).

    Raises:
        ImportError: CuPy is not installed.
        cupy.cuda.runtime.CUDARuntimeError: no usable device.
    """
    from safemon.kernels.compiler import import_cupy

    runtime = import_cupy().cuda.runtime
    ends = []
    for asked in (_FAR, -_FAR):
        stream = runtime.streamCreateWithPriority(_NON_BLOCKING, asked)
        try:
            ends.append(int(runtime.streamGetPriority(stream)))
        finally:
            runtime.streamDestroy(stream)
    return ends[0], ends[1]


def stream_priority(config: Config, name: str, least: int, greatest: int) -> int:
    """The CUDA stream priority for channel `name`'s stream.

    Args:
        config: the deployment; its `channels` are resolved (a list, in configured order).
        name: a configured channel's name.
        least: the device's least priority (`device_priority_range`, first value;
            0 on every GPU CUDA supports, and the default stream's priority).
        greatest: the device's greatest priority (second value; numerically lower, e.g. -5).

    Returns:
        `greatest` for the first `quorum` channels of an all-inline deployment whose policy
        needs fewer agreeing results than it has channels; `least` for every other channel
        and every other deployment.

    Raises:
        ValueError: `name` is not a configured channel.
    """
    channels = list(config.channels or ())
    names = [ch.name for ch in channels]
    if name not in names:
        raise ValueError(f"no channel named {name!r} in the configuration ({names})")
    quorum = Policy(config.policy).quorum
    all_inline = all(ch.placement == "inline" for ch in channels)
    if not all_inline or quorum >= len(channels):
        return least
    return greatest if names.index(name) < quorum else least
