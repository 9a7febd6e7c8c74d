"""The busy-wait of `TimingConfig.spin_s`: `spin_until` and `recv_message(spin_to=...)`."""

from __future__ import annotations

import threading
import time

import pytest
import zmq

from safemon.config import TimingConfig
from safemon.errors import ConfigError
from safemon.transport import Kind, Limits, encode, make_socket, recv_message
from safemon.transport.sockets import spin_until


def test_spin_until_returns_when_ready_and_gives_up_at_the_instant() -> None:
    calls = []

    def ready() -> bool:
        calls.append(1)
        return len(calls) >= 3

    assert spin_until(ready, time.monotonic() + 10.0)
    assert len(calls) == 3
    assert not spin_until(lambda: False, time.monotonic() + 0.005)
    assert not spin_until(lambda: True, time.monotonic() - 1.0)  # a window already over


@pytest.mark.parametrize("delay_s", [0.0, 0.02, 0.2])
def test_recv_message_with_a_spin_window_gets_messages_sent_before_during_and_after_it(
        delay_s: float) -> None:
    """Sent at once (already queued), inside the 0.1 s spin window, or after it (the
    blocking wait takes over): the message arrives whole in every case."""
    ctx = zmq.Context()
    a = make_socket(ctx, zmq.PAIR, "inproc://spin-test", bind=True)
    b = make_socket(ctx, zmq.PAIR, "inproc://spin-test", bind=False)
    try:
        frames = encode(Kind.EVENT, epoch=1, seq=7, meta={"event": "x"})

        def send() -> None:
            time.sleep(delay_s)
            b.send_multipart(frames)

        t = threading.Thread(target=send)
        t.start()
        got = recv_message(a, limits=Limits(), timeout_ms=5000, spin_to=time.monotonic() + 0.1)
        t.join()
        assert got is not None and got.message.seq == 7 and got.message.meta == {"event": "x"}
        # Nothing sent: the spin window, then the blocking wait, end in None; and a spin
        # window past the deadline stops at the deadline (a generous bound: it must not
        # hang, whatever the machine's speed).
        assert recv_message(a, limits=Limits(), timeout_ms=20,
                            spin_to=time.monotonic() + 0.01) is None
        t0 = time.monotonic()
        assert recv_message(a, limits=Limits(), timeout_ms=20,
                            spin_to=time.monotonic() + 600.0) is None
        assert time.monotonic() - t0 < 30.0
    finally:
        a.close(0)
        b.close(0)
        ctx.term()


def test_spin_s_is_off_by_default_and_bounded() -> None:
    assert TimingConfig().spin_s == 0.0
    assert TimingConfig(spin_s=0.003).spin_s == 0.003
    for bad in (-0.001, 2.0):
        with pytest.raises((ConfigError, ValueError)):
            TimingConfig(spin_s=bad)
