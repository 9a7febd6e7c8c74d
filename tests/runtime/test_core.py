"""The runtime core without sockets, processes or sleeping: stimuli in, effects out.

Each test drives `RuntimeCore.handle` with decoded messages and an injected clock, and reads
the effects it returns (STYLE.md item 15). The processes are an in-memory `ProcessView`
(the supervisor's observations, set by the test); roles, patterns and metrics are real.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy.typing as npt
import pytest
from prometheus_client import CollectorRegistry

import safemon.runtime
from safemon import admission
from safemon.config import Config
from safemon.golden_store import load_patterns
from safemon.kernels.api import run_variant
from safemon.metrics import Metrics
from safemon.patterns import scheduler as sch
from safemon.runtime import effects as fx
from safemon.runtime import stimuli as st
from safemon.runtime.core import RuntimeCore
from safemon.runtime.support import assign_patterns, scheduler_config
from safemon.states import ChannelState, Mode
from safemon.transport.wire import Kind, Limits, Message, decode, encode
from tests.runtime.helpers import make_config, operands, reference, same_bits


@dataclass
class Processes:
    """The supervisor's observations, as the test sets them (a `ProcessView`)."""

    incarnations: dict[str, int]
    up: set[str] = field(default_factory=set)

    def incarnation(self, channel: str) -> int:
        return self.incarnations[channel]

    def registered(self, channel: str) -> bool:
        return channel in self.up

    def running(self, channel: str) -> bool:
        return channel in self.up

    def lost(self, channel: str) -> bool:
        return channel not in self.up

    def awaiting_registration(self, channel: str) -> bool:
        return False


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _msg(kind: Kind, seq: int, meta: dict[str, Any], arrays: tuple[npt.NDArray[Any], ...] = (),
         channel: str = "") -> Message:
    return decode(encode(kind, epoch=1, seq=seq, channel=channel, meta=meta, arrays=arrays), Limits())


def _core(tmp_path: Path, policy: str = "1oo1D",
          timing: dict[str, Any] | None = None) -> tuple[RuntimeCore, Processes, Clock, Config]:
    cfg = make_config(tmp_path, policy, extra={"timing": timing or {}})
    by_channel, ids = assign_patterns(cfg, load_patterns(cfg), None)
    procs = Processes({n: 0 for n in cfg.channel_names})
    clock = Clock()
    metrics = Metrics(cfg, CollectorRegistry(), backend="numpy")
    sched = sch.Scheduler(scheduler_config(cfg, ids), rng=random.Random(0))
    core = RuntimeCore(cfg, sched, by_channel, procs, metrics,
                       "numpy", clock)
    return core, procs, clock, cfg


def _of(effects: list[fx.Effect], kind: type[Any]) -> list[Any]:
    return [e for e in effects if isinstance(e, kind)]


def _pass_selftests(core: RuntimeCore, sent: list[fx.SendToChannel], clock: Clock) -> list[fx.Effect]:
    """Answer each self-test in `sent` with its golden pattern's own result."""
    out: list[fx.Effect] = []
    for s in sent:
        if s.kind is Kind.REQUEST and s.meta.get("job") == "selftest":
            a, b = s.arrays
            ch = next(c for c in core.config.channels or [] if c.name == s.channel)
            r = run_variant(a, b, ch.variant.to_variant(a.shape[0], b.shape[1], a.shape[1]), "numpy")
            reply = _msg(Kind.RESULT, s.seq, {"ok": True, "job": "selftest"}, (r.c, r.es), s.channel)
            out += core.handle(st.ChannelMessage(s.channel, reply, clock(), st.stimulus_id("t")))
    return out


def _form(core: RuntimeCore, procs: Processes, clock: Clock) -> list[fx.Effect]:
    """Register every channel and pass its start-up self-test: the voting set forms."""
    effects: list[fx.Effect] = []
    for name in core.config.channel_names:
        procs.up.add(name)
        effects += core.handle(st.ChannelRegistered(name, 0, clock(), st.stimulus_id("reg")))
    effects += _pass_selftests(core, _of(effects, fx.SendToChannel), clock)
    return effects


def test_every_effect_carries_the_id_of_the_stimulus_that_caused_it(tmp_path: Path) -> None:
    """A client's hello is answered by one Reply stamped with the hello's stimulus id."""
    core, _procs, clock, cfg = _core(tmp_path)
    hello = _msg(Kind.CONTROL, 7, {"command": "hello"})
    effects = core.handle(st.IngressMessage(b"client", hello, clock(), "ingress-hello"))
    admits = admission.client_limits(cfg)  # the hello says what the transport admits
    assert effects == [fx.Reply("ingress", b"client", Kind.REPLY, 7, {
        "ok": True, "outcome": "hello", "max_frame_bytes": admits.max_frame_bytes,
        "max_total_bytes": admits.max_total_bytes}, (), "ingress-hello")]


def test_a_request_before_the_voting_set_forms_is_refused_with_a_typed_error(tmp_path: Path) -> None:
    """No channel has passed its start-up self-test: the request gets VoteTimeoutError and
    nothing is sent to a channel."""
    core, _procs, clock, _cfg = _core(tmp_path)
    x, w = operands(1)
    reg = core.handle(st.IngressMessage(b"c", _msg(Kind.CONTROL, 1, {"command": "register_weight"}, (w,)),
                                        clock(), "r"))
    wid = _of(reg, fx.Reply)[0].meta["outcome"]  # no channel registered: nothing owes it
    effects = core.handle(st.IngressMessage(b"c", _msg(Kind.REQUEST, 2, {"weight_id": wid}, (x,)),
                                            clock(), "q"))
    assert [(e.kind, e.meta["error_type"]) for e in _of(effects, fx.Reply)] == [
        (Kind.ERROR, "VoteTimeoutError")]
    assert not _of(effects, fx.SendToChannel)


def test_a_weight_is_acknowledged_then_a_request_is_voted_and_released(tmp_path: Path) -> None:
    """1oo1D end to end through the core: the channel registers and passes its self-test
    (the voting set forms, systemd hears READY), a weight reaches it and is acknowledged
    before the client's register_weight is answered, and the channel's result is released
    bit-identical to the reference."""
    core, procs, clock, cfg = _core(tmp_path)
    formed = _form(core, procs, clock)
    assert _of(formed, fx.SystemdReady)
    assert core.controller.channel_state("c0") is ChannelState.UP and core.controller.voting == ("c0",)
    x, w = operands(2)
    reg = core.handle(st.IngressMessage(b"c", _msg(Kind.CONTROL, 1, {"command": "register_weight"}, (w,)),
                                        clock(), "reg-w"))
    [send] = _of(reg, fx.SendToChannel)
    assert send.meta["command"] == "weight" and not _of(reg, fx.Reply)  # answered after the ack
    wid = str(send.meta["args"])
    ack = _msg(Kind.EVENT, 2, {"event": "weight", "weight_id": wid, "ok": True}, channel="c0")
    acked = core.handle(st.ChannelMessage("c0", ack, clock(), "ack"))
    assert [r.meta["outcome"] for r in _of(acked, fx.Reply)] == [wid]
    ask = core.handle(st.IngressMessage(b"c", _msg(Kind.REQUEST, 3, {"weight_id": wid}, (x,)),
                                        clock(), "ask"))
    [work] = [s for s in _of(ask, fx.SendToChannel) if s.meta.get("job") == "live"]
    r = run_variant(x, w, cfg.channels[0].variant.to_variant(x.shape[0], w.shape[1], x.shape[1]), "numpy")  # type: ignore[index]
    result = _msg(Kind.RESULT, work.seq, {"ok": True, "job": "live"}, (r.c, r.es), "c0")
    clock.now += 0.001
    done = core.handle(st.ChannelMessage("c0", result, clock(), "res"))
    [reply] = _of(done, fx.Reply)
    assert reply.meta["outcome"] == "released" and reply.seq == 3 and reply.stimulus_id == "res"
    assert same_bits(reply.arrays[0], reference(x, w, cfg))


def test_a_lost_channel_is_restarted_through_an_effect_and_the_reaction_is_recorded(tmp_path: Path) -> None:
    """2oo3: a crash of a voting channel becomes the controller's restart, carried out as a
    RestartChannel effect (the core restarts nothing itself), followed by the reaction record
    the shell measures FRTI from; the mode is DEGRADED, read from the controller."""
    core, procs, clock, _cfg = _core(tmp_path, "2oo3")
    _form(core, procs, clock)
    assert core.controller.mode is Mode.NORMAL
    procs.up.discard("c1")
    effects = core.handle(st.ProcessLost("c1", "crash", clock(), "exited", clock(), "lost-1"))
    restarts = _of(effects, fx.RestartChannel)
    assert [r.channel for r in restarts] == ["c1"] and restarts[0].stimulus_id == "lost-1"
    [done] = _of(effects, fx.ReactionDone)
    assert effects.index(done) > effects.index(restarts[0])
    assert done.kind.metric_kind == "channel_crash" and done.channel == "c1"
    assert core.controller.mode is Mode.DEGRADED


def test_a_failed_weight_send_is_owed_again_and_resent_on_a_later_tick(tmp_path: Path) -> None:
    """The shell could not queue a weight (socket full): after WeightSendFailed the next
    tick sends it again, so the channel is never blamed for a weight it never got."""
    core, procs, clock, _cfg = _core(tmp_path)
    _form(core, procs, clock)
    _x, w = operands(3)
    reg = core.handle(st.IngressMessage(b"c", _msg(Kind.CONTROL, 1, {"command": "register_weight"}, (w,)),
                                        clock(), "reg"))
    wid = str(_of(reg, fx.SendToChannel)[0].meta["args"])
    core.handle(st.WeightSendFailed("c0", (wid,), clock(), "failed"))
    again = core.handle(st.TimerTick(clock(), "tick"))
    assert [s.meta.get("args") for s in _of(again, fx.SendToChannel)
            if s.meta.get("command") == "weight"] == [wid]


def test_the_core_imports_no_io_module() -> None:
    """The done-check of issue 13: no zmq, os, subprocess or socket in the core's source."""
    root = Path(safemon.runtime.__file__).parent
    banned = re.compile(r"^\s*(import|from)\s+(zmq|os|subprocess|socket)\b", re.M)
    offenders = [p.name for p in root.glob("*.py") if banned.search(p.read_text())]
    assert offenders == []
    assert len(list(root.glob("*.py"))) >= 5


@pytest.mark.parametrize("command", ["status"])
def test_the_status_command_asks_the_shell_for_the_operator_view(tmp_path: Path, command: str) -> None:
    """`status` needs what only the shell knows (processes, endpoints): a ReplyStatus effect."""
    core, _procs, clock, _cfg = _core(tmp_path)
    effects = core.handle(st.ControlMessage(b"op", _msg(Kind.CONTROL, 5, {"command": command}),
                                            clock(), "ctl"))
    assert effects == [fx.ReplyStatus(b"op", 5, "ctl")]


def test_the_core_wakes_at_a_clients_own_deadline_and_at_a_weights_ack_deadline(tmp_path: Path) -> None:
    """`next_wakeup` names the earliest client deadline (shorter than the channels' budget)
    and the earliest weight acknowledgement deadline, so the shell's timer answers the
    client at its deadline and not at the next unrelated wakeup (up to 50 ms later, which
    a client waiting 50 ms past its deadline saw as no answer at all)."""
    core, procs, clock, _cfg = _core(tmp_path)
    _form(core, procs, clock)
    x, w = operands(2)
    reg = core.handle(st.IngressMessage(b"c", _msg(Kind.CONTROL, 1, {"command": "register_weight"}, (w,)),
                                        clock(), "reg-w"))
    wid = str(_of(reg, fx.SendToChannel)[0].meta["args"])
    ack_deadline = core._deliveries["c0"].next_deadline()
    assert ack_deadline is not None
    # Only the acknowledgement is due: no self-test is planned (the scheduler's wakeup
    # would otherwise come first and hide a missing deliveries term).
    core.scheduler.next_wakeup = lambda: None  # type: ignore[method-assign]
    assert core.voter.next_deadline() is None
    assert core.next_wakeup() == ack_deadline
    core.handle(st.ChannelMessage("c0", _msg(Kind.EVENT, 2, {"event": "weight", "weight_id": wid,
                                                             "ok": True}, channel="c0"), clock(), "ack"))
    sent_at = clock()
    ask = core.handle(st.IngressMessage(b"c", _msg(Kind.REQUEST, 3, {"weight_id": wid, "deadline_ms": 0.5},
                                                   (x,)), sent_at, "ask"))
    assert not _of(ask, fx.Reply)
    wake = core.next_wakeup()
    assert wake is not None and wake <= sent_at + 0.0005
    clock.now = wake
    [reply] = _of(core.handle(st.TimerTick(clock(), "tick")), fx.Reply)
    assert reply.seq == 3 and reply.meta["error_type"] == "VoteTimeoutError"


def test_an_answered_requests_client_deadline_wakes_nobody(tmp_path: Path) -> None:
    """A request released before its client's own deadline leaves no wakeup behind: the
    shell runs its timers only when `next_wakeup` says so, and an answered request's
    stale deadline used to make that once per request."""
    core, procs, clock, cfg = _core(tmp_path)
    _form(core, procs, clock)
    core.scheduler.next_wakeup = lambda: None  # type: ignore[method-assign]
    x, w = operands(2)
    reg = core.handle(st.IngressMessage(b"c", _msg(Kind.CONTROL, 1, {"command": "register_weight"}, (w,)),
                                        clock(), "reg-w"))
    wid = str(_of(reg, fx.SendToChannel)[0].meta["args"])
    core.handle(st.ChannelMessage("c0", _msg(Kind.EVENT, 2, {"event": "weight", "weight_id": wid,
                                                             "ok": True}, channel="c0"), clock(), "ack"))
    ask = core.handle(st.IngressMessage(b"c", _msg(Kind.REQUEST, 3, {"weight_id": wid, "deadline_ms": 50.0},
                                                   (x,)), clock(), "ask"))
    client_deadline = clock() + 0.05
    assert core.next_wakeup() == pytest.approx(client_deadline)  # the client's, still open
    [work] = [s for s in _of(ask, fx.SendToChannel) if s.meta.get("job") == "live"]
    r = run_variant(x, w, cfg.channels[0].variant.to_variant(x.shape[0], w.shape[1], x.shape[1]), "numpy")  # type: ignore[index]
    clock.now += 0.001
    done = core.handle(st.ChannelMessage("c0", _msg(Kind.RESULT, work.seq, {"ok": True, "job": "live"},
                                                    (r.c, r.es), "c0"), clock(), "res"))
    assert _of(done, fx.Reply)[0].meta["outcome"] == "released"
    assert core.next_wakeup() is None


def test_a_disagreement_with_a_channel_already_out_of_the_vote_is_no_new_fault(
        tmp_path: Path) -> None:
    """1oo2D: a request is in flight on c0 and c1 when c0 is lost (isolated; c1 votes alone,
    1oo1D). c0's late result differs from c1's: the request is answered DisagreementError
    (nothing released), but c0's known fault explains the mismatch, so it is no fault "that
    cannot be pinned under 1oo1D" (which latched SAFE, fault campaign 2026-11-23); c1 is
    self-tested at once instead."""
    core, procs, clock, cfg = _core(tmp_path, "1oo2D")
    _form(core, procs, clock)
    x, w = operands(2)
    reg = core.handle(st.IngressMessage(b"c", _msg(Kind.CONTROL, 1, {"command": "register_weight"}, (w,)),
                                        clock(), "reg-w"))
    wid = str(_of(reg, fx.SendToChannel)[0].meta["args"])
    for ch in ("c0", "c1"):
        core.handle(st.ChannelMessage(ch, _msg(Kind.EVENT, 2, {"event": "weight", "weight_id": wid,
                                                               "ok": True}, channel=ch), clock(), "ack"))
    ask = core.handle(st.IngressMessage(b"c", _msg(Kind.REQUEST, 3, {"weight_id": wid}, (x,)),
                                        clock(), "ask"))
    work = {s.channel: s for s in _of(ask, fx.SendToChannel) if s.meta.get("job") == "live"}
    assert set(work) == {"c0", "c1"}
    procs.up.discard("c0")
    core.handle(st.ProcessLost("c0", "crash", clock(), "exited", clock(), "lost"))
    assert core.controller.voting == ("c1",) and core.controller.mode is Mode.DEGRADED
    r = run_variant(x, w, cfg.channels[0].variant.to_variant(x.shape[0], w.shape[1], x.shape[1]), "numpy")  # type: ignore[index]
    bad = r.c.copy()
    bad[0, 0] += 1.0
    clock.now += 0.001
    replies: list[fx.Reply] = []
    after: list[fx.Effect] = []
    for ch, c in (("c1", r.c), ("c0", bad)):
        res = _msg(Kind.RESULT, work[ch].seq, {"ok": True, "job": "live"}, (c, r.es), ch)
        out = core.handle(st.ChannelMessage(ch, res, clock(), f"res-{ch}"))
        replies += _of(out, fx.Reply)
        after += out
    assert [rp.meta.get("error_type") for rp in replies] == ["DisagreementError"]
    assert core.controller.mode is Mode.DEGRADED, core.controller.mode
    assert [s.channel for s in _of(after, fx.SendToChannel) if s.meta.get("job") == "selftest"] == ["c1"]


def test_a_mismatch_of_an_isolated_channels_last_request_does_not_restart_it(
        tmp_path: Path) -> None:
    """1oo3D (user trial 2026-12-07): a request is in flight on all three when c1 is lost
    and isolated. Its late result differs: the voter asks to self-test every channel of that
    vote, c1 included, but c1 stays out of service until an operator reset; it was
    restarted (status then read "ISOLATED incarnation 1 process starting")."""
    core, procs, clock, cfg = _core(tmp_path, "1oo3D")
    _form(core, procs, clock)
    x, w = operands(2)
    reg = core.handle(st.IngressMessage(b"c", _msg(Kind.CONTROL, 1, {"command": "register_weight"}, (w,)),
                                        clock(), "reg-w"))
    wid = str(_of(reg, fx.SendToChannel)[0].meta["args"])
    for ch in cfg.channel_names:
        core.handle(st.ChannelMessage(ch, _msg(Kind.EVENT, 2, {"event": "weight", "weight_id": wid,
                                                               "ok": True}, channel=ch), clock(), "ack"))
    ask = core.handle(st.IngressMessage(b"c", _msg(Kind.REQUEST, 3, {"weight_id": wid}, (x,)),
                                        clock(), "ask"))
    work = {s.channel: s for s in _of(ask, fx.SendToChannel) if s.meta.get("job") == "live"}
    procs.up.discard("c1")
    lost = core.handle(st.ProcessLost("c1", "crash", clock(), "exited", clock(), "lost"))
    assert [e.channel for e in _of(lost, fx.IsolateChannel)] == ["c1"]
    assert core.controller.channel_state("c1") is ChannelState.ISOLATED
    r = run_variant(x, w, cfg.channels[0].variant.to_variant(x.shape[0], w.shape[1], x.shape[1]), "numpy")  # type: ignore[index]
    bad = r.c.copy()
    bad[0, 0] += 1.0
    clock.now += 0.001
    after: list[fx.Effect] = []
    for ch, c in (("c0", r.c), ("c2", r.c), ("c1", bad)):
        res = _msg(Kind.RESULT, work[ch].seq, {"ok": True, "job": "live"}, (c, r.es), ch)
        after += core.handle(st.ChannelMessage(ch, res, clock(), f"res-{ch}"))
    assert [rp.meta.get("error_type") for rp in _of(after, fx.Reply)] == ["DisagreementError"]
    assert not _of(after, fx.RestartChannel)
    assert core.controller.channel_state("c1") is ChannelState.ISOLATED


def test_a_channel_storing_a_new_weight_is_not_self_tested_until_it_holds_it(tmp_path: Path) -> None:
    """A weight registered at run time keeps each channel's loop busy storing it (checked,
    ECC-encoded, uploaded) for up to its acknowledgement budget. A self-test queued behind
    that would overrun through no fault of the channel (on an H100, a 64 MiB weight drove two
    healthy channels into DTI overruns and SAFE): the channel leaves the self-test schedule
    until it acknowledges the weight, then rejoins it."""
    import numpy as np

    core, procs, clock, cfg = _core(tmp_path)
    _form(core, procs, clock)
    w = np.ones((1280, 1280), dtype=np.float32)  # an ack budget of over half a second
    reg = core.handle(st.IngressMessage(b"c", _msg(Kind.CONTROL, 1, {"command": "register_weight"}, (w,)),
                                        clock(), "reg-w"))
    wid = str(_of(reg, fx.SendToChannel)[0].meta["args"])
    ack_deadline = core._deliveries["c0"].next_deadline()
    assert ack_deadline is not None
    assert ack_deadline - clock() > cfg.timing.dti_s + cfg.timing.selftest_deadline_s

    def run_until(t: float) -> list[fx.Effect]:
        out: list[fx.Effect] = []
        while clock.now < t:
            clock.now += 0.01
            out += core.handle(st.TimerTick(clock(), "tick"))
        return out

    storing = run_until(ack_deadline - 0.02)
    assert not [e for e in _of(storing, fx.SendToChannel) if e.meta.get("job") == "selftest"]
    assert core.controller.mode is Mode.NORMAL
    assert core.controller.channel_state("c0") is ChannelState.UP
    core.handle(st.ChannelMessage("c0", _msg(Kind.EVENT, 2, {"event": "weight", "weight_id": wid,
                                                             "ok": True}, channel="c0"), clock(), "ack"))
    assert "c0" in core.scheduler.channels
    later = run_until(clock() + cfg.timing.dti_s * (1 + cfg.timing.dti_jitter) + 0.02)
    assert [e for e in _of(later, fx.SendToChannel) if e.meta.get("job") == "selftest"]


def test_a_self_test_result_read_after_a_long_stall_still_counts(tmp_path: Path) -> None:
    """The shell was away 2 s while c0's self-test was in flight (`LoopAway`), then ran its
    timers before it read the result: the test's deadline moved, and the core still knows
    the test when its result comes (until 2026-12-06 it forgot self-tests ten deadlines
    after their start, 1 s here, by the raw clock, and the timely result became c0's
    `dti_overrun`)."""
    core, procs, clock, _cfg = _core(tmp_path, "2oo3", timing={
        "selftest_deadline_s": 0.1, "dti_s": 1.0, "ftti_s": 3.0, "scrub_interval_s": None})
    _form(core, procs, clock)
    sent: list[fx.SendToChannel] = []
    while not any(s.channel == "c0" for s in sent):
        clock.now += 0.05
        sent += [s for s in _of(core.handle(st.TimerTick(clock(), "tick")), fx.SendToChannel)
                 if s.meta.get("job") == "selftest"]
    started = clock()
    clock.now += 2.0
    since = started + 0.01
    effects = core.handle(st.LoopAway(since, clock() - since, clock(), "away"))
    effects += core.handle(st.TimerTick(clock(), "tick"))
    effects += _pass_selftests(core, sent + _of(effects, fx.SendToChannel), clock)
    clock.now += 1.0
    effects += _pass_selftests(core, _of(core.handle(st.TimerTick(clock(), "tick")),
                                         fx.SendToChannel), clock)
    assert not _of(effects, fx.ReactionDone), _of(effects, fx.ReactionDone)
    assert core.controller.mode is Mode.NORMAL
