"""Every message of a process or stream channel carries when the channel sent it
(`safemon.channels.sent_stamp`), its own clock's reading at the send; an inline channel's
carry none; the daemon reads the stamp back, and takes anything but a finite number as no
stamp."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import zmq

from safemon.channels import inline
from safemon.channels import worker as worker_module
from safemon.channels.sent_stamp import SENT_FIELD, sent_at
from safemon.channels.worker import ChannelWorker
from safemon.transport.messages import Kind

from ..runtime.helpers import make_config


@pytest.mark.parametrize("meta, want", [
    ({SENT_FIELD: 12.5}, 12.5),
    ({SENT_FIELD: 3}, 3.0),
    ({}, None),
    ({SENT_FIELD: "12.5"}, None),
    ({SENT_FIELD: True}, None),
    ({SENT_FIELD: float("nan")}, None),
    ({SENT_FIELD: float("inf")}, None),
])
def test_the_stamp_is_read_back_only_when_it_is_a_finite_number(meta: dict[str, Any],
                                                                 want: float | None) -> None:
    assert sent_at(meta) == want


def test_a_socket_channels_messages_carry_its_clock_at_the_send(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    encoded: list[dict[str, Any]] = []
    real_encode = worker_module.encode

    def recording_encode(*args: Any, **kwargs: Any) -> Any:
        encoded.append(dict(kwargs["meta"]))
        return real_encode(*args, **kwargs)

    monkeypatch.setattr(worker_module, "encode", recording_encode)
    readings = iter([100.0, 101.5, 102.0, 103.0])
    ctx = zmq.Context()
    try:
        worker = ChannelWorker(ctx, make_config(tmp_path, "2oo3"), "c0", incarnation=0,
                               epoch=1, link="token", clock=lambda: next(readings))
        worker._register(None)
        worker._heartbeat(None)  # reads the clock twice: uptime, then the stamp
    finally:
        ctx.term()
    assert [m[SENT_FIELD] for m in encoded] == [101.5, 103.0]
    assert all(m["link"] == "token" for m in encoded)


def test_an_inline_channels_messages_carry_no_stamp(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An inline channel runs only when the loop runs it: what it sent counts from when the
    loop takes it (no stamp), or it would be charged the other channels' time in a round."""
    monkeypatch.setattr(inline._InlineWorker, "_warm_up", lambda self: None)
    now = [50.0]
    ch = inline.InlineChannel(make_config(tmp_path, "2oo3", placement="inline"), "c0",
                              incarnation=0, epoch=7, link=None, clock=lambda: now[0])
    ch.start()  # queues the REGISTER
    now[0] = 52.0
    ch.tick(52.0)  # a heartbeat due
    got = [(m.kind, SENT_FIELD in m.meta) for m in ch.take(52.0)]
    assert got[0] == (Kind.REGISTER, False)
    assert (Kind.HEARTBEAT, False) in got[1:]
