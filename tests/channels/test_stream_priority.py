"""Which CUDA stream priority each channel's stream gets (`safemon.channels.stream_priority`):
the first `quorum` channels of an all-inline deployment first, everything else at CUDA's
default. No GPU: the rule reads the configuration only."""

from __future__ import annotations

import pytest

from safemon.channels.stream_priority import device_priority_range, stream_priority
from safemon.config import Config

LEAST, GREATEST = 0, -5  # the range read on an H200 (evidence/h200-2026-12-07-stop62/)


def _config(policy: str, placements: list[str]) -> Config:
    return Config.model_validate({
        "policy": policy,
        "channels": [{"name": f"c{i}", "placement": p} for i, p in enumerate(placements)],
    })


def _priorities(config: Config) -> list[int]:
    assert config.channels is not None
    return [stream_priority(config, ch.name, LEAST, GREATEST) for ch in config.channels]


def test_an_inline_2oo3_quorum_goes_first() -> None:
    assert _priorities(_config("2oo3", ["inline"] * 3)) == [GREATEST, GREATEST, LEAST]


@pytest.mark.parametrize("placements", [
    ["process"] * 3,
    ["stream"] * 3,
    ["inline", "inline", "process"],  # mixed: no one lockstep round to order
    ["process", "inline", "inline"],
])
def test_other_placements_keep_the_default(placements: list[str]) -> None:
    assert _priorities(_config("2oo3", placements)) == [LEAST] * 3


@pytest.mark.parametrize("policy, n", [("2oo2", 2), ("1oo2D", 2), ("1oo3D", 3), ("1oo1D", 1)])
def test_policies_whose_reply_waits_for_every_channel_keep_the_default(policy: str,
                                                                      n: int) -> None:
    # their quorum is every channel (`Policy.quorum`): no channel's result comes after the reply
    assert _priorities(_config(policy, ["inline"] * n)) == [LEAST] * n


def test_the_order_is_the_configured_one_not_the_names() -> None:
    config = Config.model_validate({"channels": [{"name": n, "placement": "inline"}
                                                 for n in ("zeta", "alpha", "mid")]})
    assert [stream_priority(config, n, LEAST, GREATEST) for n in ("zeta", "alpha", "mid")] == [
        GREATEST, GREATEST, LEAST]


def test_an_unknown_channel_is_refused() -> None:
    with pytest.raises(ValueError, match="no channel named 'c9'"):
        stream_priority(_config("2oo3", ["inline"] * 3), "c9", LEAST, GREATEST)


@pytest.mark.gpu
def test_the_devices_priority_range_is_read_by_clamping() -> None:
    """`device_priority_range` gives CUDA's default as the least priority and a greater
    (numerically lower) one, and a stream asked for either end gets exactly it back."""
    import cupy as cp

    least, greatest = device_priority_range()
    assert least == 0  # cudaStreamCreate's default, on every GPU CUDA supports
    assert greatest < least
    for want in (least, greatest):
        stream = cp.cuda.Stream(non_blocking=True, priority=want)
        assert cp.cuda.runtime.streamGetPriority(stream.ptr) == want


@pytest.mark.gpu
@pytest.mark.parametrize("placement, want", [("inline", ["greatest", "greatest", "least"]),
                                             ("process", ["least", "least", "least"])])
def test_a_channels_stream_is_created_at_its_priority(placement: str, want: list[str]) -> None:
    """What `ChannelWorker._setup_device` creates, read back from CUDA."""
    import cupy as cp

    from safemon.channels.worker import ChannelWorker

    least, greatest = device_priority_range()
    named = {"least": least, "greatest": greatest}
    config = Config.model_validate({
        "backend": "cupy",
        "channels": [{"name": f"c{i}", "placement": placement} for i in range(3)]})
    got = []
    for i in range(3):
        worker = ChannelWorker(None, config, f"c{i}", incarnation=0, epoch=1)  # type: ignore[arg-type]
        worker._setup_device()
        got.append(cp.cuda.runtime.streamGetPriority(worker._stream.ptr))
    assert got == [named[w] for w in want]
