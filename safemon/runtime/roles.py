"""The wiring of the sans-IO roles: what the voter, the DTI scheduler and the safe-state
controller decide, turned into each other's events and into effects.

- voter Release/Fail → the client's reply (exactly one per request); Disagreement →
  Fault(disagreement_minority per minority channel in 2oo3 with a majority, else
  disagreement_unresolved on no channel); DeadlineMiss → Fault(deadline_miss);
  ChannelFailed → Fault(ecc_uncorrectable | channel_error); RequestSelfTest → RunNow;
- scheduler StartSelfTest → a golden pattern into the channel's own queue; StartScrub →
  a scrub command into the same queue; SelfTestFailed → Fault(selftest_failed);
  SelfTestPassed → SelfTestResult(True) for channels that are not UP (the rejoin gate)
  and for UP channels only for tests started on demand (RunNow) after a mismatch;
  DtiOverrun → Fault(dti_overrun); DtiLate (the daemon's own lateness, the scheduler's
  catch-up rule) is only logged; ScrubFindings uncorrectable → Fault(ecc);
- controller SetMode(SAFE) → voter EnterSafe (every open request fails at once), leaving
  SAFE → voter Reset; SetVoting → the voting set of later Submits; RestartChannel →
  scheduler ChannelLeft + a `RestartChannel` effect (ChannelJoined once it registers
  again); IsolateChannel → ChannelLeft + an `IsolateChannel` effect; Notify → `Publish`;
  RunHook → `RunHook`; RecordReaction → `ReactionDone` (the shell measures FRTI).

A 2oo3 voting channel's self-test failure or disagreement is first classified by retests
(`safemon.fault_classes`) before the controller hears of it.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from safemon.config import Config
from safemon.fault_classes import Classifier, FaultClass
from safemon.metrics import Metrics, SelftestResult
from safemon.patterns import controller as ctl
from safemon.patterns import scheduler as sch
from safemon.patterns import voter as vot
from safemon.runtime import effects as fx
from safemon.runtime.support import (
    FAIL_ERRORS,
    RETESTED,
    GoldenPatternLike,
    Live,
    ProcessView,
    SelfTestInFlight,
    quote,
)
from safemon.states import ChannelState, Mode, Policy
from safemon.transport import messages as msgs
from safemon.transport.wire import Kind

__all__ = ["INPUT_ERROR_STREAK", "INPUT_INVALID_DIGEST", "Roles"]

INPUT_INVALID_DIGEST = b"request-values-non-finite"
"""The C digest the voter sees for a channel that answered `input_invalid`: a product's
input held NaN or infinity (the request's x, or a hidden activation that overflowed
float32). Every healthy channel answers such a request alike, so the vote releases it
and the client gets `InvalidInputError`; a channel that answers so alone disagrees."""

#: Device-resident requests in a row on which a channel may answer `input_error` while other
#: channels computed before it is faulted (`Roles._on_input_disagreement`). A late read of
#: an x the client has replaced needs the channel a whole request behind (the client stages
#: into two buffers in turn), so a streak points at the channel.
INPUT_ERROR_STREAK = 3


class Roles:
    """The roles and their wiring; `RuntimeCore` adds the messages that feed them.

    Args:
        config: the resolved deployment.
        scheduler: the DTI scheduler (built by the shell from the config and patterns).
        by_channel: per channel, the golden patterns its scheduler ids index.
        processes: what the core reads of the supervisor.
        metrics: where event counts and observations are recorded.
        clock: monotonic seconds.
    """

    def __init__(self, config: Config, scheduler: sch.Scheduler,
                 by_channel: Mapping[str, list[GoldenPatternLike]], processes: ProcessView,
                 metrics: Metrics, clock: Callable[[], float]) -> None:
        self.config = config
        self.scheduler = scheduler
        self.processes = processes
        self.metrics = metrics
        self.clock = clock
        self.voter = vot.Voter()
        self.controller = ctl.SafeStateController(controller_config(config))
        self._by_channel = dict(by_channel)
        self._seq = 0
        self._out: list[fx.Effect] = []
        self._sid = ""
        self._live: dict[int, Live] = {}
        self._tests: dict[int, SelfTestInFlight] = {}
        self._ondemand: set[int] = set()
        self._runnow_at: dict[str, float] = {}
        #: per channel, when its last passed self-test started (`RuntimeCore._due_a_selftest`)
        self._selftest_passed_at: dict[str, float] = {}
        self._injected_at: dict[str, float] = {}
        self._injected_expiry: dict[str, float] = {}  # set when a fault is cleared
        self._ctl_queue: collections.deque[ctl.ControllerEvent] = collections.deque()
        self._in_controller = False
        #: seq -> (budget end, {channel: incarnation}) of requests still open in the voter.
        self._sent_to: dict[int, tuple[float, dict[str, int]]] = {}
        #: retests before the reaction; a pending fault is the arguments of `_fault_now`.
        self._classifier: Classifier[tuple[ctl.FaultKind, float, str]] = Classifier(
            config.classification.retests)
        self._class_of: dict[int, FaultClass] = {}  # id(ctl.Fault) -> its class
        self.safe_reason: str | None = None

    # ------------------------------------------------------------ effects

    def _emit(self, effect: fx.Effect) -> None:
        self._out.append(effect)

    def _log(self, level: str, event: str, **fields: Any) -> None:
        assert level in ("debug", "info", "warning", "error")
        self._emit(fx.Log(level, event, fields, stimulus_id=self._sid))  # type: ignore[arg-type]

    def next_seq(self) -> int:
        """A fresh daemon sequence number (channel work, events)."""
        self._seq += 1
        return self._seq

    def _send(self, channel: str, kind: Kind, seq: int, meta: Mapping[str, Any],
              arrays: tuple[npt.NDArray[Any], ...] = (), weight_id: str | None = None,
              busy_until: float | None = None, drops_weight: str | None = None) -> None:
        self._emit(fx.SendToChannel(channel, kind, seq, meta, arrays, weight_id, self._sid,
                                    busy_until, drops_weight))

    def _reply(self, socket: str, identity: bytes, kind: Kind, seq: int, meta: Mapping[str, Any],
               arrays: tuple[npt.NDArray[Any], ...] = ()) -> None:
        assert socket in ("ingress", "control")
        self._emit(fx.Reply(socket, identity, kind, seq, meta, arrays,  # type: ignore[arg-type]
                            self._sid))

    def _error_to(self, socket: str, identity: bytes, seq: int, error_type: str,
                  message: str) -> None:
        self._reply(socket, identity, Kind.ERROR, seq,
                    msgs.ErrorReply(error_type=error_type, message=message).to_meta())

    def _answer_error(self, seq: int, error_type: str, message: str) -> None:
        live = self._live.pop(seq, None)
        if live is not None:
            self._error_to("ingress", live.identity, live.client_seq, error_type, message)

    def _drop_delivery(self, ch: str) -> None:  # pragma: no cover - RuntimeCore overrides
        raise NotImplementedError

    def _scrub_busy_until(self, ch: str, now: float) -> float:  # pragma: no cover - overridden
        raise NotImplementedError

    def _selftest_wait_s(self, ch: str, now: float) -> float:  # pragma: no cover - overridden
        """Seconds by which a self-test sent to `ch` at `now` has its deadline extended for
        the work queued ahead of it (`safemon.admission.selftest_extension_s`)."""
        raise NotImplementedError

    # Whole-model hooks (`safemon.runtime.models.ModelRequests` overrides them).
    def _diverging_layer(self, seq: int) -> int | None:
        return None

    def _layer_note(self, seq: int) -> str:
        """", first diverging layer i" for a whole-model request whose per-layer digests
        differ, else ""."""
        layer = self._diverging_layer(seq)
        return "" if layer is None else f", first diverging layer {layer}"

    def _forget_digests(self, seq: int) -> None:
        return None

    # Device-resident hooks (`safemon.runtime.device_requests.DeviceRequests` overrides them).
    def _unread_input(self, seq: int) -> frozenset[str]:
        """The channels that answered device-resident request `seq` with `input_error`
        (they could not read the client's buffers, or read an x other than the client's)."""
        return frozenset()

    def _input_error_streaks(self, unread: frozenset[str]) -> list[str]:
        """Count one more `input_error` answer in a row for each channel of `unread` (a
        channel's count restarts when it answers digests); the channels whose count reached
        `INPUT_ERROR_STREAK` (their count is reset)."""
        return []

    def _release_ok(self, seq: int, live: Live, agreed: Sequence[str], channel: str) -> bool:
        return True

    def _release_device(self, d: vot.Release, live: Live, now: float) -> None:  # pragma: no cover
        raise NotImplementedError  # RuntimeCore's DeviceRequests base implements it

    # ------------------------------------------------------------ voter

    def _voter(self, event: vot.Event) -> None:
        for d in self.voter.handle(event):
            now = self.voter.now or self.clock()
            if isinstance(d, vot.Release):
                self._released(d, now)
            elif isinstance(d, vot.Fail):
                live = self._live.get(d.req_id)
                if live is not None:
                    self.metrics.count_request(d.error)
                    self.metrics.observe_vote_latency(max(0.0, now - live.submitted))
                detail = d.detail + (self._layer_note(d.req_id) if d.error == "disagreement" else "")
                self._log("info", "vote_failed", seq=d.req_id, error=d.error, detail=detail)
                self._answer_error(d.req_id, FAIL_ERRORS[d.error], detail)
            elif isinstance(d, vot.Disagreement):
                self._disagreement(d, now)
            elif isinstance(d, vot.DeadlineMiss):
                sent = self._sent_to.get(d.req_id)
                if sent is not None and sent[1].get(d.channel) != self.processes.incarnation(d.channel):
                    # Sent to an incarnation that has since been replaced: its loss is
                    # already being handled; the fresh one never saw this request.
                    self._log("info", "deadline_miss_of_replaced_incarnation", seq=d.req_id,
                              channel=d.channel)
                    continue
                self._fault(d.channel, ctl.FaultKind.DEADLINE_MISS, now, now,
                            f"request {d.req_id}: no result within its work budget")
            elif isinstance(d, vot.ChannelFailed):
                kind = (ctl.FaultKind.ECC_UNCORRECTABLE if d.reason.startswith("ecc")
                        else ctl.FaultKind.CHANNEL_ERROR)
                self._fault(d.channel, kind, now, now, d.reason)
            elif isinstance(d, vot.RequestSelfTest):
                for ch in d.channels:
                    self._run_now(ch, now)

    def _released(self, d: vot.Release, now: float) -> None:
        live = self._live.pop(d.req_id, None)
        if live is None:
            return
        invalid = live.invalid.get(d.channel)
        if invalid is not None:  # the vote agreed on the request's values, not on a result
            self.metrics.count_request("invalid_input")
            self._log("info", "request_values_non_finite", seq=d.req_id,
                      agreed=list(d.agreed), detail=invalid)
            self._error_to("ingress", live.identity, live.client_seq, "InvalidInputError",
                           f"{invalid} (every agreeing channel found it; nothing released)")
            return
        if live.device is not None:
            self._release_device(d, live, now)
            return
        c = live.results[d.channel]
        if not self._release_ok(d.req_id, live, d.agreed, d.channel):
            # Digests agreed but the bytes that travelled do not: never release them.
            self.metrics.count_request("disagreement")
            self._log("error", "released_output_mismatch", seq=d.req_id, channel=d.channel)
            self._error_to("ingress", live.identity, live.client_seq, "DisagreementError",
                           "the agreeing channels' outputs differ from their digests")
            return
        self.metrics.count_request("released")
        self.metrics.observe_vote_latency(max(0.0, now - live.submitted))
        kernel_s = max((live.kernel_seconds.get(ch, 0.0) for ch in d.agreed), default=0.0)
        self._reply("ingress", live.identity, Kind.REPLY, live.client_seq,
                    msgs.Released(ok=True, outcome="released", kernel_seconds=kernel_s,
                                  vote_seconds=max(0.0, now - live.submitted)).to_meta(),
                    (np.ascontiguousarray(c),))
        self._log("debug", "vote_released", seq=d.req_id, channel=d.channel)

    def _disagreement(self, d: vot.Disagreement, now: float) -> None:
        unread = self._unread_input(d.req_id)
        computed = [ch for ch in (*d.minority, *d.majority) if ch not in unread]
        by_input = bool(unread) and (len(computed) <= 1 or set(computed) <= set(d.majority))
        # Explained by the input: the channels that disagreed are those that could not read
        # it (a lone channel that computed is no minority of anything).
        for ch in sorted(unread) if by_input else d.minority:
            self.metrics.count_disagreement(ch)
        layer = self._diverging_layer(d.req_id)  # whole-model requests
        note = self._layer_note(d.req_id)
        self._forget_digests(d.req_id)
        if layer is not None:
            self.metrics.count_diverging_layer(layer)
        self._log("warning", "disagreement", seq=d.req_id, minority=list(d.minority),
                  majority=list(d.majority), policy=d.policy.value,
                  first_diverging_layer=None if layer is None else str(layer))
        if by_input:
            self._on_input_disagreement(d, unread, computed, now)
            return
        if self._explained_by_channels_out_of_the_vote(d, now):
            return
        # Only 2oo3 trusts a majority; under 1oo3D two agreeing channels may be the
        # two faulty ones, so its mismatch goes to the self-test diagnosis.
        if d.policy is Policy.TWO_OO_THREE and d.majority and len(d.minority) == 1:
            self._fault(d.minority[0], ctl.FaultKind.DISAGREEMENT_MINORITY, now, now,
                        f"request {d.req_id}{note}")
        else:
            self._fault(None, ctl.FaultKind.DISAGREEMENT_UNRESOLVED, now, now,
                        f"request {d.req_id}: {', '.join(d.minority)} disagree{note}")

    def _on_input_disagreement(self, d: vot.Disagreement, unread: frozenset[str],
                               computed: list[str], now: float) -> None:
        """Handle `d`, which the client's input explains: the channels in `unread` answered
        `input_error` (the x they read is not the client's, or they could not read its
        buffers) and the channels that computed, `computed`, agree (at most one, or all in
        `d.majority`). The client decides when its buffer changes (a 2oo3 reply does not
        wait for the third channel, after which a client may stage its next x), so one such
        answer faults no channel: blaming the channel that read late would let any client
        put channels out of the vote. A channel that answers so on `INPUT_ERROR_STREAK`
        device requests in a row, each time while others computed, is faulted
        (`channel_error`): its own reads or imports fail, not the client. A lone channel
        that computed is self-tested now (nothing else checks its answer). What goes
        undetected: a channel whose reads fail on fewer requests in a row than the limit."""
        self._log("warning", "disagreement_explained_by_the_input", seq=d.req_id,
                  input_error=sorted(unread), computed=computed)
        for ch in self._input_error_streaks(unread):
            self._fault(ch, ctl.FaultKind.CHANNEL_ERROR, now, now,
                        f"request {d.req_id}: input_error on {INPUT_ERROR_STREAK} device "
                        "requests in a row while other channels read the client's x")
        if len(computed) == 1:
            self._run_now(computed[0], now)

    def _explained_by_channels_out_of_the_vote(self, d: vot.Disagreement, now: float) -> bool:
        """Whether `d` is explained by channels that already left the vote (isolated,
        quarantined, restarting) since the request was sent, so that it is no new fault.

        So it is when the channels still voting that took part agree among themselves: at
        most one of them, or all in `d.majority`. A lone one is self-tested now (its
        partner's known fault explains the mismatch, but the mismatch is still a reason to
        look at it); a failure there is a fault as usual. Otherwise (two still-voting
        channels differ) the disagreement is judged as always. Without this, a request in
        flight when 1oo2D isolated its faulty channel came back as a disagreement "that
        cannot be pinned on one channel under 1oo1D" and latched SAFE (fault campaign,
        2026-11-23)."""
        taking_part = (*d.minority, *d.majority)
        voting = set(self.controller.voting)
        still_in = [ch for ch in taking_part if ch in voting]
        if len(still_in) == len(taking_part):
            return False
        if len(still_in) > 1 and not set(still_in) <= set(d.majority):
            return False
        self._log("info", "disagreement_with_channels_out_of_the_vote", seq=d.req_id,
                  out_of_the_vote=[ch for ch in taking_part if ch not in voting],
                  still_voting=still_in)
        if len(still_in) == 1:
            self._run_now(still_in[0], now)
        return True

    # ------------------------------------------------------------ scheduler

    def _run_now(self, ch: str, now: float) -> None:
        self._sched(sch.Tick(now))  # settle what fell due before this instant first
        if ch not in self.scheduler.channels:
            if self.controller.channel_state(ch) is ChannelState.ISOLATED:
                # Out of service until an operator reset, which re-admits it and restarts
                # it itself. Asked for here by a mismatch of a request it computed before it
                # was isolated (the voter self-tests every channel of that vote) or by the
                # `selftest` command: restarting it would bring back a channel the
                # controller took out (until 2026-12-07 it did).
                return
            if not self.processes.running(ch) or self.processes.lost(ch):
                # Lost while nothing restarted it (e.g. in SAFE) and now asked to prove
                # itself (after a reset): start it; it must pass a self-test to vote again.
                self._log("info", "channel_restart_for_selftest", channel=ch)
                self._emit(fx.RestartChannel(ch, 0.0, now, self._sid))
            return  # its start will ask for the self-test
        if self._runnow_at.get(ch) == now:
            return  # already asked at this instant
        self._runnow_at[ch] = now
        for ins in self.scheduler.handle(sch.RunNow(ch, now)):
            if isinstance(ins, sch.StartSelfTest) and ins.channel == ch:
                self._ondemand.add(ins.test_id)
            self._on_sched(ins, now)

    def _sched(self, event: sch.SchedulerEvent) -> None:
        """Feed the scheduler `event` and carry out what it says. The scheduler settles every
        timer that fell due before `event.now` itself (its catch-up rule): a self-test the
        loop reaches late starts now, with its full deadline, and comes with a `DtiLate`
        that is the daemon's lateness, never the channel's."""
        leaving = event.channel if isinstance(event, sch.ChannelLeft) else None
        for ins in self.scheduler.handle(event):
            # A channel that is leaving gets nothing more (no self-test sent, no fault for it).
            if leaving is None or getattr(ins, "channel", None) != leaving:
                self._on_sched(ins, event.now)

    def _on_sched(self, ins: sch.SchedulerInstruction, now: float) -> None:
        if isinstance(ins, sch.StartSelfTest):
            self._start_selftest(ins, now)
        elif isinstance(ins, sch.StartScrub):
            # The channel's loop patrols every resident weight before its next heartbeat.
            self._send(ins.channel, Kind.CONTROL, self.next_seq(),
                       msgs.ChannelCommand(command="scrub").to_meta(),
                       busy_until=self._scrub_busy_until(ins.channel, now))
        elif isinstance(ins, sch.SelfTestPassed):
            self.metrics.observe_selftest(ins.channel, SelftestResult.PASS, ins.latency)
            self._selftest_passed_at[ins.channel] = now - ins.latency  # when it started
            ondemand = ins.test_id in self._ondemand
            self._ondemand.discard(ins.test_id)
            if ondemand and self._classifier.active(ins.channel):
                self._retest_done(ins.channel, True, now)
                return
            if self.controller.channel_state(ins.channel) is not ChannelState.UP or ondemand:
                self._controller(ctl.SelfTestResult(ins.channel, True, now))
        elif isinstance(ins, sch.SelfTestFailed):
            self._ondemand.discard(ins.test_id)
            self.metrics.observe_selftest(ins.channel, SelftestResult.FAIL, None)
            self._log("warning", "selftest_failed", channel=ins.channel, test_id=ins.test_id)
            # A Fault (not SelfTestResult) so an injected fault's occurrence time gives FDTI.
            sms = ins.failing_sms
            on_sm = (f" on SM {', '.join(map(str, sms[:8]))}"
                     + (f" … ({len(sms)} SMs)" if len(sms) > 8 else "") if sms else "")
            self._fault(ins.channel, ctl.FaultKind.SELFTEST_FAILED, ins.detected_at, now,
                        f"self-test did not match its golden pattern{on_sm}")
        elif isinstance(ins, sch.DtiOverrun):
            self._ondemand.discard(ins.test_id)
            self.metrics.count_dti_overrun(ins.channel)
            self.metrics.observe_selftest(ins.channel, SelftestResult.TIMEOUT, None)
            self._fault(ins.channel, ctl.FaultKind.DTI_OVERRUN, ins.deadline, now,
                        f"self-test {ins.test_id} missed its deadline")
        elif isinstance(ins, sch.DtiLate):
            # The daemon reached the due time late (a busy or stalled loop): the channel is
            # not at fault, and its test still has its full deadline from now. A whole DTI
            # missed means a periodic test never ran: say so loudly.
            late = ins.now - ins.due
            level = "warning" if late >= self.config.timing.dti_s else "debug"
            self._log(level, "selftest_started_late", channel=ins.channel, due=ins.due, late_s=late)
        elif isinstance(ins, sch.ScrubFindings):
            self._log("warning", "scrub_findings", channel=ins.channel, corrected=ins.corrected,
                      uncorrectable=ins.uncorrectable)
            if ins.uncorrectable:
                self._fault(ins.channel, ctl.FaultKind.ECC_UNCORRECTABLE, now, now,
                            f"{ins.uncorrectable} uncorrectable weight word(s)")
        elif isinstance(ins, sch.ScrubOverrun):
            self._log("warning", "scrub_overrun", channel=ins.channel)

    def _start_selftest(self, ins: sch.StartSelfTest, now: float) -> None:
        pats = self._by_channel[ins.channel]
        pattern = pats[int(ins.pattern_id[1:]) % len(pats)]
        seq = self.next_seq()
        deadline = ins.deadline
        # Queued behind more work than its deadline allows for (a lone long request, say),
        # the test gets the excess on top, as a request's budget does: until 2026-12-06 it
        # overran and the channel was faulted for work the daemon had admitted.
        wait_s = self._selftest_wait_s(ins.channel, now)
        if wait_s > 0.0:
            deadline += wait_s
            for later in self.scheduler.handle(
                    sch.SelfTestDelayed(ins.channel, ins.test_id, wait_s, now)):
                self._on_sched(later, now)
        self._tests[seq] = SelfTestInFlight(ins.channel, ins.test_id, pattern, now)
        self._send(ins.channel, Kind.REQUEST, seq, msgs.WorkRequest(
            job="selftest", test_id=ins.test_id, weight_id=pattern.id,
            deadline_ms=max(0.0, deadline - now) * 1000.0).to_meta(),
            (np.ascontiguousarray(pattern.a), np.ascontiguousarray(pattern.b)),
            busy_until=deadline)
        self._log("debug", "selftest_sent", channel=ins.channel, test_id=ins.test_id, seq=seq,
                  pattern=pattern.id, lag_s=self.clock() - now)

    # ------------------------------------------------------------ controller

    def _controller(self, event: ctl.ControllerEvent) -> None:
        """Feed the controller `event` and carry out its instructions. An event raised while
        carrying them out (a nested scheduler catch-up can detect another fault) waits in a
        FIFO until the current instruction list is done: the controller has already moved on,
        so applying its older instructions after a newer decision would undo that decision."""
        self._ctl_queue.append(event)
        if self._in_controller:
            return
        self._in_controller = True
        try:
            while self._ctl_queue:
                self._controller_one(self._ctl_queue.popleft())
        finally:
            self._in_controller = False
        self._emit(fx.SystemdStatus(self._sid))  # the shell sends it on change only

    def _controller_one(self, event: ctl.ControllerEvent) -> None:
        now = event.now
        mode = self.controller.mode  # before this event
        reactions: list[ctl.RecordReaction] = []
        steps: list[tuple[str, float]] = []
        for ins in self.controller.handle(event):
            steps.append((type(ins).__name__, self.clock()))
            if isinstance(ins, ctl.RecordReaction):
                reactions.append(ins)  # recorded once every other action has been carried out
            elif isinstance(ins, ctl.SetMode):
                mode = self._set_mode(ins, mode, now)
            elif isinstance(ins, ctl.SetChannelState):
                self._log("info", "channel_state", channel=ins.channel, state=ins.state.value,
                          reason=ins.reason)
            elif isinstance(ins, ctl.SetVoting):
                if ins.channels:
                    self._emit(fx.SystemdReady(self._sid))
            elif isinstance(ins, ctl.RestartChannel | ctl.IsolateChannel):
                self._channel_leaves(ins, now)
            elif isinstance(ins, ctl.RequestSelfTest):
                self._run_now(ins.channel, now)
            elif isinstance(ins, ctl.Notify):
                self._emit(fx.Publish(ins.event_type, dict(ins.payload), self._sid))
            elif isinstance(ins, ctl.RunHook):
                self._emit(fx.RunHook(ins.event_type, dict(ins.payload), self._sid))
        fault = event if isinstance(event, ctl.Fault) else None
        for rec in reactions:
            cls = self._class_of.get(id(event), FaultClass.UNCLASSIFIED)
            self._emit(fx.ReactionDone(
                rec.kind, rec.fdti_seconds, rec.frti_seconds,
                fault.detected_at if fault is not None else now, cls.value,
                fault.channel if fault is not None else None,
                quote(fault.detail) if fault is not None else "", tuple(steps), self._sid))

    def _set_mode(self, ins: ctl.SetMode, old: Mode, now: float) -> Mode:
        self.safe_reason = ins.reason if ins.mode is Mode.SAFE else None
        self._log("warning", "mode_changed", mode=ins.mode.value, previous=old.value,
                  reason=ins.reason)
        if ins.mode is Mode.SAFE:
            for ch in self.config.channel_names:
                self._classifier.abandon(ch)  # latched: nothing more to react to
            self._voter(vot.EnterSafe(now))
        elif old is Mode.SAFE:
            self._voter(vot.Reset(now))
        return ins.mode

    def _channel_leaves(self, ins: ctl.RestartChannel | ctl.IsolateChannel, now: float) -> None:
        self._drop_delivery(ins.channel)
        self._classifier.abandon(ins.channel)  # its new incarnation starts afresh
        if ins.channel in self.scheduler.channels:
            self._sched(sch.ChannelLeft(ins.channel, now))
        if isinstance(ins, ctl.RestartChannel):
            self._emit(fx.RestartChannel(ins.channel, ins.delay, now, self._sid))
        else:
            self._emit(fx.IsolateChannel(ins.channel, now, self._sid))

    # ------------------------------------------------------------ faults

    def _fault(self, channel: str | None, kind: ctl.FaultKind, detected_at: float, now: float,
               detail: str) -> None:
        """Report a fault to the controller, after classifying it by retest where that is
        safe (`safemon.fault_classes`): a 2oo3 voting channel's self-test failure or
        disagreement starts `classification.retests` self-tests first."""
        if channel is not None and self._classifier.active(channel):
            if kind in RETESTED:
                self._retest_done(channel, False, now)  # it showed again: a failed retest
                return
            # Another kind of fault (crash, hang, ...) ends the retest: both are reported,
            # the first as permanent (it was followed by another failure).
            pending = self._classifier.abandon(channel)
            if pending is not None:
                self._fault_now(channel, pending[0], pending[1], now, pending[2],
                                FaultClass.PERMANENT)
        elif (channel is not None and kind in RETESTED and self.controller.mode is not Mode.SAFE
              and self.controller.policy is Policy.TWO_OO_THREE
              and channel in self.controller.voting
              and self._classifier.begin(channel, (kind, detected_at, detail))):
            self._log("info", "fault_retest_started", channel=channel, kind=kind.value,
                      retests=self._classifier.retests)
            self._run_now(channel, now)
            return
        self._fault_now(channel, kind, detected_at, now, detail, FaultClass.UNCLASSIFIED)

    def _retest_done(self, channel: str, passed: bool, now: float) -> None:
        done = self._classifier.result(channel, passed)
        if done is None:
            self._run_now(channel, now)
            return
        (kind, detected_at, detail), cls = done
        self._log("info", "fault_classified", channel=channel, kind=kind.value,
                  fault_class=cls.value)
        self._fault_now(channel, kind, detected_at, now, detail, cls)

    def _fault_now(self, channel: str | None, kind: ctl.FaultKind, detected_at: float,
                   now: float, detail: str, fault_class: FaultClass) -> None:
        self.metrics.count_fault_class(kind, fault_class.value)
        if fault_class is not FaultClass.UNCLASSIFIED:
            detail = f"{detail} [{fault_class.value} after {self._classifier.retests} retest(s)]"
        # An injected fault's occurrence time is consumed by its first detection: the channel
        # is then isolated or restarted (a new incarnation starts without the fault).
        occurred = None
        if channel is not None and channel in self._injected_at:
            expiry = self._injected_expiry.get(channel)
            if expiry is None or detected_at <= expiry:
                occurred = self._injected_at[channel]
            del self._injected_at[channel]
            self._injected_expiry.pop(channel, None)
        if occurred is not None and occurred > detected_at:
            occurred = None
        event = ctl.Fault(channel=channel, kind=kind, detected_at=min(detected_at, now),
                          now=now, occurred_at=occurred, detail=detail)
        self._class_of[id(event)] = fault_class
        try:
            self._controller(event)
        finally:
            self._class_of.pop(id(event), None)


def controller_config(c: Config) -> ctl.ControllerConfig:
    """The safe-state controller's settings from the deployment config."""
    degraded = c.degraded_policy if c.policy is Policy.TWO_OO_THREE else None
    return ctl.ControllerConfig(
        channels=c.channel_names,
        policy=Policy(c.policy),
        degraded_policy=degraded or Policy.TWO_OO_TWO,
        max_restarts=c.restart.max_restarts,
        restart_window=c.restart.window_s,
        backoff_initial=c.restart.backoff_initial_s,
        backoff_factor=c.restart.backoff_factor,
        backoff_max=c.restart.backoff_max_s,
        restart=c.actions.restart,
        isolate=c.actions.isolate,
        notify=c.actions.notify,
        hook=c.actions.hook is not None,
    )
