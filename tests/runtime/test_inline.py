"""Inline channels (placement "inline", `safemon.channels.inline`) on the NumPy backend: the
daemon's loop drives them with no socket and no thread. The same guarantees as socket
channels: clean requests release the reference's bits, no fault kind gets a wrong result
released, an outvoted channel is restarted and rejoins; plus the lockstep contract (every
channel's work queued before any is waited for), a `slow` channel that does not hold up
the loop, and per-lane read-back buffers."""

from __future__ import annotations

import time
from collections.abc import Generator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from safemon.channels import inline
from safemon.channels.faults import FAULT_KINDS
from safemon.channels.worker import Reply
from safemon.kernels.pinned import PinnedBuffer, lane
from safemon.transport import Kind
from safemon.transport.wire import RejectReason

from .helpers import make_config, operands, reference, same_bits, system, wait_for
from .test_system_inproc import check_no_wrong_result


def test_inline_channels_release_the_reference_result(tmp_path: Path) -> None:
    """2oo3 on three inline channels: every request released bit for bit, no socket per
    channel, every channel UP and registered once."""
    cfg = make_config(tmp_path, "2oo3", placement="inline")
    x, w = operands()
    with system(cfg) as (daemon, client):
        assert daemon._chan_socks == {}  # no channel socket at all
        wid = client.register_weight(w)
        for i in range(5):
            xi = (x + np.float32(i)).astype(np.float32)
            assert same_bits(client.matmul(xi, wid, timeout=2.0), reference(xi, w, cfg))
        st = client.status()
        assert st["mode"] == "NORMAL"
        assert [(c["state"], c["incarnation"]) for c in st["channels"]] == [("UP", 0)] * 3


@pytest.mark.parametrize("policy", ["2oo3", "1oo2D"])
@pytest.mark.parametrize("fault", FAULT_KINDS)
def test_no_wrong_result_is_released_by_inline_channels(tmp_path: Path, policy: str,
                                                         fault: str) -> None:
    """Every fault kind in one inline channel: the app gets the clean result or a typed
    error, never a wrong C, and the fault is noticed (the stream channels' test, inline)."""
    check_no_wrong_result(tmp_path, policy, fault, "inline")


def test_a_corrupted_inline_result_counts_as_a_bad_crc(tmp_path: Path) -> None:
    """`corrupt-frame` spoils c0's RESULT: it never reaches the core, 2oo3 releases the
    others' agreement, and the drop is counted as the transport counts a bad CRC."""
    cfg = make_config(tmp_path, "2oo3", placement="inline", injection=True)
    x, w = operands(4)
    with system(cfg) as (daemon, client):
        wid = client.register_weight(w)
        client.inject("c0", "corrupt-frame")
        assert same_bits(client.matmul(x, wid, timeout=1.0), reference(x, w, cfg))
        assert wait_for(lambda: daemon._rejects[RejectReason.BAD_CRC] >= 1)


def test_an_outvoted_inline_channel_is_restarted_and_rejoins(tmp_path: Path) -> None:
    """A stuck bit in c1: the majority's C is released, c1 gets a new incarnation (a new
    `InlineChannel`), passes its self-tests and votes again."""
    cfg = make_config(tmp_path, "2oo3", placement="inline", injection=True)
    x, w = operands(2)
    ref = reference(x, w, cfg)
    with system(cfg) as (daemon, client):
        wid = client.register_weight(w)
        first = daemon._inline._current["c1"] if daemon._inline else None
        client.inject("c1", "stuck")
        assert same_bits(client.matmul(x, wid, timeout=1.0), ref)
        assert wait_for(lambda: client.status()["channels"][1]["incarnation"] >= 1)
        assert wait_for(lambda: client.status()["mode"] == "NORMAL"
                        and client.status()["channels"][1]["state"] == "UP")
        assert daemon._inline is not None and daemon._inline._current["c1"] is not first
        assert first is not None and not first.running
        for _ in range(3):
            assert same_bits(client.matmul(x, wid, timeout=1.0), ref)


def test_a_slow_inline_channel_does_not_hold_up_the_loop(tmp_path: Path) -> None:
    """`slow` in c0 holds back c0's RESULT past the deadline (as a sleeping process would)
    without blocking the daemon's loop: 2oo3 still releases the other two channels'
    agreement, and c0's miss is noticed. (c0 is the first channel of the round: a loop that
    slept for it would reach c1 and c2 only after the request's deadline, and the request
    would be refused, not released.)"""
    cfg = make_config(tmp_path, "2oo3", placement="inline", injection=True)
    x, w = operands(3)
    ref = reference(x, w, cfg)
    with system(cfg) as (_daemon, client):
        wid = client.register_weight(w)
        client.inject("c0", "slow")
        assert same_bits(client.matmul(x, wid, timeout=2.0), ref)
        assert wait_for(lambda: any(f["channel"] == "c0" for f in client.status()["faults"]))


def _recording_channels(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                        install_order: tuple[str, ...]) -> tuple[inline.InlineChannels, list[str]]:
    """Inline channels c0, c1, c2 (configured in that order, installed in `install_order`)
    whose live step records "queue NAME" before its yield and "wait NAME" after it, and
    answers a RESULT carrying its channel's name as its variant."""
    events: list[str] = []

    def steps(self: Any, msg: Any) -> Generator[None, None, Reply]:
        events.append(f"queue {self.name}")
        yield
        events.append(f"wait {self.name}")
        return Reply({"job": "live", "variant": self.name, "ok": False, "kernel_seconds": 0.0,
                      "error": "channel_error: probe"}, (), False, 0.0)

    monkeypatch.setattr(inline._InlineWorker, "_request_steps", steps)
    monkeypatch.setattr(inline._InlineWorker, "_warm_up", lambda self: None)
    cfg = make_config(tmp_path, "2oo3", placement="inline")
    chans = inline.InlineChannels(("c0", "c1", "c2"))
    for name in install_order:
        ch = inline.InlineChannel(cfg, name, incarnation=0, epoch=7, link=None)
        chans.install(ch)
        ch.start()
    return chans, events


def test_a_lockstep_round_queues_every_channel_before_waiting(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The contract of `InlineChannels.run_round`: each channel's step generator runs to
    its yield (work queued) before any is resumed (the wait), and each RESULT carries its
    own channel's reply."""
    chans, events = _recording_channels(tmp_path, monkeypatch, ("c0", "c1", "c2"))

    def deliver_round(first_seq: int) -> None:
        for i, name in enumerate(("c0", "c1", "c2")):
            assert chans.deliver(name, Kind.REQUEST, epoch=7, seq=first_seq + i,
                                 meta={"job": "live", "weight_id": "w", "deadline_ms": 100.0})
        assert chans.has_work

    def results() -> list[tuple[str, int, str]]:
        return [(n, m.seq, m.meta["variant"]) for n, m in chans.take(time.monotonic())
                if m.kind is Kind.RESULT]

    deliver_round(10)
    chans.run_round()
    assert events == ["queue c0", "queue c1", "queue c2", "wait c0", "wait c1", "wait c2"]
    assert not chans.has_work
    assert results() == [("c0", 10, "c0"), ("c1", 11, "c1"), ("c2", 12, "c2")]
    # With `after_finish`, each channel's RESULT can be taken right after its own wait.
    events.clear()
    taken: list[list[tuple[str, int, str]]] = []
    deliver_round(20)
    chans.run_round(after_finish=lambda: taken.append(results()))
    assert events == ["queue c0", "queue c1", "queue c2", "wait c0", "wait c1", "wait c2"]
    assert taken == [[("c0", 20, "c0")], [("c1", 21, "c1")], [("c2", 22, "c2")]]
    # What the callback does to a channel still suspended counts: c2 stopped after c0's
    # RESULT (as the core isolating it would) is never resumed and sends nothing more.
    events.clear()
    taken.clear()
    deliver_round(30)

    def stop_c2_after_c0() -> None:
        taken.append(results())
        if taken == [[("c0", 30, "c0")]]:
            chans._current["c2"].stop()

    chans.run_round(after_finish=stop_c2_after_c0)
    assert events == ["queue c0", "queue c1", "queue c2", "wait c0", "wait c1"]
    assert taken == [[("c0", 30, "c0")], [("c1", 31, "c1")], []]
    assert not chans.has_work and results() == []
    assert not chans.deliver("c2", Kind.REQUEST, epoch=7, seq=33, meta={})  # stopped
    assert not chans.deliver("c9", Kind.REQUEST, epoch=7, seq=1, meta={})  # no such channel


def test_a_round_finishes_channels_in_configured_order_whatever_their_install_order(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Incarnations installed c2, c0, c1 (as restarts may leave them): a round still waits
    for c0 and c1 first, the channels whose streams go first on the GPU
    (`safemon.channels.stream_priority`), so a 2oo3 quorum is not held behind c2."""
    chans, events = _recording_channels(tmp_path, monkeypatch, ("c2", "c0", "c1"))
    for i, name in enumerate(("c0", "c1", "c2")):
        assert chans.deliver(name, Kind.REQUEST, epoch=7, seq=40 + i,
                             meta={"job": "live", "weight_id": "w", "deadline_ms": 100.0})
    chans.run_round()
    assert events == ["queue c0", "queue c1", "queue c2", "wait c0", "wait c1", "wait c2"]


def _record_round_events(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, ...]]:
    """Make every inline channel's live step stop once before its wait, as a device-resident
    step does, and record, in order: each channel's wait ("wait", name), each live RESULT
    the daemon takes ("result", name) and each client reply ("reply",)."""
    from safemon.daemon import Daemon

    events: list[tuple[str, ...]] = []
    real_steps = inline._InlineWorker._request_steps
    real_reply = Daemon._reply
    real_channel_message = Daemon._channel_message

    def steps(self: Any, msg: Any) -> Generator[None, None, Reply]:
        if msg.meta.get("job") == "live":
            yield
            events.append(("wait", self.name))
        return (yield from real_steps(self, msg))

    def reply(self: Any, sock: str, identity: bytes, kind: Kind, *args: Any, **kw: Any) -> None:
        if kind is Kind.REPLY and sock == "ingress":
            events.append(("reply",))
        real_reply(self, sock, identity, kind, *args, **kw)

    def channel_message(self: Any, name: str, msg: Any) -> None:
        if msg.kind is Kind.RESULT and msg.meta.get("job") == "live":
            events.append(("result", name))
        real_channel_message(self, name, msg)

    monkeypatch.setattr(inline._InlineWorker, "_request_steps", steps)
    monkeypatch.setattr(Daemon, "_reply", reply)
    monkeypatch.setattr(Daemon, "_channel_message", channel_message)
    return events


def test_two_agreeing_inline_results_are_answered_before_the_third_wait(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """2oo3 on inline channels: the daemon votes on each RESULT as soon as its channel's
    wait returned, so the client's reply goes out after c1's wait and before c2's; c2's
    RESULT still reaches the core (every channel stays UP, none is blamed). Each channel's
    step is made to stop once before its wait, as a device-resident step does."""
    events = _record_round_events(monkeypatch)
    cfg = make_config(tmp_path, "2oo3", placement="inline")
    x, w = operands(6)
    with system(cfg) as (_daemon, client):
        wid = client.register_weight(w)
        for _ in range(3):
            events.clear()
            assert same_bits(client.matmul(x, wid, timeout=2.0), reference(x, w, cfg))
            assert wait_for(lambda: len(events) == 7)
            # each RESULT is handed to the core right after its channel's wait, the reply
            # goes out on c1's, and c2's late RESULT still reaches the core
            assert events == [("wait", "c0"), ("result", "c0"), ("wait", "c1"), ("result", "c1"),
                              ("reply",), ("wait", "c2"), ("result", "c2")]
        st = client.status()
        assert st["mode"] == "NORMAL" and not st["faults"]
        assert [c["state"] for c in st["channels"]] == ["UP"] * 3


@pytest.mark.parametrize(("fault", "kinds"), [
    ("bitflip-c", {"disagreement_minority"}),
    ("crash", {"crash", "channel_lost"}),
])
def test_a_fault_in_the_channel_answered_after_the_reply_is_still_caught(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fault: str, kinds: set[str]) -> None:
    """The one channel whose RESULT comes after a quorum reply (c2, last in each round) is
    the faulty one: every reply is still the reference product, sent before c2's RESULT
    whenever c2 answers at all, and c2 is then faulted as any late minority is. Steps stop
    once before their wait, as device-resident steps do."""
    events = _record_round_events(monkeypatch)
    cfg = make_config(tmp_path, "2oo3", placement="inline", injection=True)
    x, w = operands(6)
    ref = reference(x, w, cfg)
    with system(cfg) as (_daemon, client):
        wid = client.register_weight(w)
        assert same_bits(client.matmul(x, wid, timeout=2.0), ref)
        client.inject("c2", fault)
        events.clear()
        assert same_bits(client.matmul(x, wid, timeout=2.0), ref)
        assert wait_for(lambda: any(f["channel"] == "c2" for f in client.status()["faults"]))
        assert ("result", "c0") in events and ("result", "c1") in events
        replied = events.index(("reply",))
        assert replied > events.index(("result", "c1"))
        if ("result", "c2") in events:
            assert events.index(("result", "c2")) > replied
        st = client.status()
        assert {f["kind"] for f in st["faults"] if f["channel"] == "c2"} <= kinds, st["faults"]
        assert not any(f["channel"] in ("c0", "c1") for f in st["faults"])
        for _ in range(3):  # the two others keep releasing the reference bits
            assert same_bits(client.matmul(x, wid, timeout=2.0), ref)


def test_messages_to_inline_channels_are_read_only_views() -> None:
    """What the daemon hands an inline channel cannot be written through (as a received
    frame cannot), and it is the sender's bytes, not a copy that could differ."""
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    msg = inline.inline_message(Kind.REQUEST, epoch=1, seq=2, channel="c0", meta={"k": 1},
                                arrays=(a,))
    assert msg.kind is Kind.REQUEST and msg.channel == "c0" and msg.meta == {"k": 1}
    assert np.shares_memory(msg.arrays[0], a) and not msg.arrays[0].flags.writeable
    with pytest.raises(ValueError):
        msg.arrays[0][0, 0] = 1.0
    assert a.flags.writeable


class _FakeCupy:
    """Just what `PinnedBuffer.get` calls: `cuda.alloc_pinned_memory`."""

    class cuda:
        @staticmethod
        def alloc_pinned_memory(nbytes: int) -> bytearray:
            return bytearray(nbytes)


def test_pinned_buffers_are_per_lane() -> None:
    """Inside `lane(key)` a thread gets key's buffer, the same on every call; outside, its
    default one. Nested lanes restore the outer key."""
    buf = PinnedBuffer(np.uint64, 4)
    cp = _FakeCupy()
    default = buf.get(cp, 2)
    with lane("c0"):
        c0 = buf.get(cp, 2)
        with lane("c1"):
            c1 = buf.get(cp, 2)
        assert buf.get(cp, 2) is c0
    assert buf.get(cp, 2) is default
    assert len({id(default), id(c0), id(c1)}) == 3
    with lane("c0"):
        assert buf.get(cp, 3) is c0  # same key, big enough: the same buffer
        bigger = buf.get(cp, 100)
        assert bigger.size >= 100 and bigger is not c0


def test_inline_channels_on_different_gpus_are_refused(tmp_path: Path) -> None:
    """The daemon's one loop thread drives every inline channel: they must share a GPU."""
    from safemon.errors import ConfigError

    channels = [{"name": f"c{i}", "placement": "inline", "gpu": i % 2} for i in range(3)]
    with pytest.raises(ConfigError, match="inline channels must all use the same GPU"):
        make_config(tmp_path, "2oo3", extra={"backend": "cupy", "channels": channels})
    same = [{"name": f"c{i}", "placement": "inline", "gpu": 0} for i in range(3)]
    assert make_config(tmp_path, "2oo3", extra={"backend": "cupy", "channels": same}).channels


def test_an_exception_in_an_inline_channel_is_a_crash_of_that_channel(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An exception escaping a channel's code (here: its scrub) ends that incarnation only:
    the daemon keeps serving, the supervisor restarts the channel, results stay exact."""
    cfg = make_config(tmp_path, "2oo3", placement="inline")
    x, w = operands(5)
    ref = reference(x, w, cfg)
    boom = {"left": 1}
    control = inline._InlineWorker._control

    def failing(self: Any, sock: Any, msg: Any) -> bool:
        if self.name == "c2" and boom["left"] and msg.meta.get("command") == "scrub":
            boom["left"] -= 1
            raise MemoryError("out of device memory")
        return control(self, sock, msg)

    monkeypatch.setattr(inline._InlineWorker, "_control", failing)
    with system(cfg) as (daemon, client):
        wid = client.register_weight(w)
        assert wait_for(lambda: not boom["left"], 10.0)  # a scrub reached c2 and failed
        assert wait_for(lambda: client.status()["channels"][2]["incarnation"] >= 1, 10.0)
        assert wait_for(lambda: client.status()["mode"] == "NORMAL", 10.0)
        for _ in range(3):
            assert same_bits(client.matmul(x, wid, timeout=1.0), ref)
        assert daemon.stopped.is_set() is False


def test_inline_channels_computing_a_request_in_turn_stay_up(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Three inline channels on the NumPy backend compute a request one after another, 0.3 s
    each (default heartbeats: every 0.1 s, lost after 0.5 s): c0 sends its RESULT, then
    waits 0.6 s while the loop runs c1 and c2. That time is not c0's silence. Found by the
    third review of 2026-12-07: with inline messages stamped at their send, c0 was lost
    ("silent for 0.61 s") and restarted after the first request."""
    real = inline._InlineWorker._request_steps

    def steps(self: Any, msg: Any) -> Generator[None, None, Any]:
        if msg.meta.get("job") == "live":
            time.sleep(0.3)  # host compute, in the round's launch
        return (yield from real(self, msg))

    monkeypatch.setattr(inline._InlineWorker, "_request_steps", steps)
    # request_deadline_s 1.5 stands for the price of that compute (admission allows it)
    timing = {"request_deadline_s": 1.5, "dti_s": 1.0, "selftest_deadline_s": 0.2,
              "scrub_interval_s": 10.0, "heartbeat_interval_s": 0.1,
              "heartbeat_timeout_s": 0.5, "ftti_s": 2.0}
    cfg = make_config(tmp_path, "2oo3", placement="inline", extra={"timing": timing})
    x, w = operands()
    with system(cfg) as (_daemon, client):
        wid = client.register_weight(w)
        for _ in range(3):
            assert same_bits(client.matmul(x, wid, timeout=3.0), reference(x, w, cfg))
            time.sleep(0.3)
        st = client.status()
        assert [f for f in st["faults"] if f.get("kind") == "heartbeat_lost"] == []
        assert [c["incarnation"] for c in st["channels"]] == [0, 0, 0]
