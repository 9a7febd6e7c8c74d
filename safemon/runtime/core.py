"""`RuntimeCore`: the daemon's state machine. Stimuli in, effects out (STYLE.md item 15).

`handle(stimulus)` judges one stimulus (`safemon.runtime.stimuli`) against the state it
owns and returns the effects the shell must carry out, in order, each stamped with the
stimulus's id (`safemon.runtime.effects`). It never touches a socket, a process, a file or
the real clock (the clock is injected; `now` comes with each stimulus).

What it owns: the roles (`Roles`: voter, DTI scheduler, safe-state controller, fault
classifier), the requests in flight and their budgets (`safemon.admission`), the weights
registered by clients and their acknowledged delivery to every channel incarnation
(`safemon.weight_delivery`), their eviction when the weight budget is full
(`safemon.eviction`), the self-tests in flight, fault injection bookkeeping.
What it reads and never owns: the supervisor's view of the processes (`ProcessView`).

Per-request checks under an effective 1oo1D (no second channel to compare with): C must be
finite and pass the row and column checksum test of every C tile (Huang-Abraham ABFT,
`safemon.kernels.abft`) against x and the core's copy of the weight, so a flipped exponent
bit is never released. Timing rule: every request gets exactly one answer, by the client's
own deadline or the channels' work budget, whichever comes first
(`safemon.admission.work_budget_s`; only the budget judges the channels; docs/ROBUSTNESS.md).
"""

from __future__ import annotations

import collections
import functools
import heapq
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from safemon import admission
from safemon.config import Config
from safemon.errors import InvalidInputError
from safemon.eviction import choose_evictions, eviction_order, holds_to_release
from safemon.hft import HftAssessment, assess, channel_hardware
from safemon.kernels.abft import abft_passes
from safemon.kernels.catalog import Variant
from safemon.log_sampling import sampled
from safemon.metrics import Metrics
from safemon.patterns import controller as ctl
from safemon.patterns import scheduler as sch
from safemon.patterns import voter as vot
from safemon.runtime import effects as fx
from safemon.runtime import stimuli as st
from safemon.runtime.control import ControlCommands
from safemon.runtime.device_requests import (
    DeviceIo,
    DeviceRequests,
    device_io_of,
    is_device_request,
)
from safemon.runtime.models import ModelRequests
from safemon.runtime.roles import INPUT_INVALID_DIGEST
from safemon.runtime.support import (
    GoldenPatternLike,
    Live,
    ProcessView,
    client_deadline_s,
    digest,
    quote,
)
from safemon.states import ChannelState, Mode, Policy
from safemon.transport import messages as msgs
from safemon.transport.wire import Kind, Message
from safemon.weight_delivery import WeightDelivery
from safemon.weight_id import weight_id_of

__all__ = ["RuntimeCore"]

#: Under a per-client quota, the most clients a weight keeps as its holders (the least
#: recent one is dropped, and no longer charged): what a long-running daemon remembers
#: stays bounded however many `Client` objects register the same weight.
MAX_HOLDERS = 64


class RuntimeCore(ModelRequests, DeviceRequests, ControlCommands):
    """The daemon's decisions (see the module docstring). Not thread-safe: the shell's loop
    thread calls `handle`; other threads may only read (`status`-style accessors).

    Args:
        config: the resolved deployment.
        scheduler: the DTI scheduler.
        by_channel: per channel, the golden patterns the scheduler's ids index.
        processes: the supervisor, read-only.
        metrics: where event counts and observations are recorded.
        backend: the resolved kernel backend ("numpy" or "cupy"), for the HFT figures.
        clock: monotonic seconds.
        gpu_uuids: channel -> the UUID of its GPU, as read at start (CuPy only): channels on
            one physical GPU count once in the effective HFT (`hft.channel_hardware`).
    """

    def __init__(self, config: Config, scheduler: sch.Scheduler,
                 by_channel: Mapping[str, list[GoldenPatternLike]], processes: ProcessView,
                 metrics: Metrics, backend: str, clock: Callable[[], float],
                 gpu_uuids: Mapping[str, str] | None = None) -> None:
        super().__init__(config, scheduler, by_channel, processes, metrics, clock)
        self.backend = backend
        self.gpu_uuids = dict(gpu_uuids or {})
        #: `admission.item_cost_s` under this core's config, by (M, K, N): every request is
        #: priced (a model once per layer), each price asks every channel's variant for its
        #: tile (`admission.padded_flops`), and the config never changes under a core.
        self.item_cost_s: Callable[[int, int, int], float] = functools.lru_cache(maxsize=4096)(
            functools.partial(admission.item_cost_s, config))
        self.injection_enabled = bool(config.testing.fault_injection)
        self.draining = False
        self.weights: dict[str, npt.NDArray[np.float32]] = {}
        #: the registered weights' ids, least recently used (registered or requested) first
        self._weight_lru: collections.OrderedDict[str, None] = collections.OrderedDict()
        self._weight_bytes = 0
        #: under `limits.max_client_weight_bytes` only: weight id -> the clients holding
        #: it (their keys, least recently registered first; at most `MAX_HOLDERS`). A
        #: weight nobody holds is absent, and is evicted before any held one.
        self._holders: dict[str, collections.OrderedDict[str, None]] = {}
        self._deliveries = {n: WeightDelivery() for n in config.channel_names}
        #: per channel, evicted weights whose `drop_weight` could not be queued (socket
        #: full or not connected): sent again on the next tick (`DropSendFailed`)
        self._drops_owed: dict[str, dict[str, None]] = {n: {} for n in config.channel_names}
        #: per channel, live work sent and not answered: seq -> (item cost s, budget end).
        self._queued: dict[str, dict[int, tuple[float, float]]] = {
            n: {} for n in config.channel_names}
        #: (budget end, seq) of every request sent: when `_sent_to` and `_queued` forget it
        #: (a heap, so that a tick costs O(log n) per request it expires, not a scan)
        self._work_expiry: list[tuple[float, int]] = []
        self._sent_expiry: list[tuple[float, int]] = []
        #: channels registered and waiting for their weights before they join the schedule
        self._awaiting_join: set[str] = set()
        #: per channel out of the schedule to store weights, the self-test and scrub it was
        #: due then
        self._due_after_store: dict[str, tuple[float, float | None]] = {}
        #: weight id -> (clients waiting for register_weight's reply, channels still owing
        #: the acknowledgement)
        self._weight_waits: dict[str, tuple[list[tuple[bytes, int]], set[str]]] = {}
        #: (client deadline, seq): when a client's own timeout ends its wait. The channels'
        #: budget (the voter's deadline) is separate and never shorter than the config says.
        self._client_deadlines: list[tuple[float, int]] = []
        self._loop_away = 0  # `LoopAway` stimuli handled (its warning is logged sampled)
        self._init_models()
        self._init_device()

    # ================================================================== dispatch

    def handle(self, stimulus: st.Stimulus) -> list[fx.Effect]:
        """Judge `stimulus`; return the effects to carry out, in order.

        Raises:
            StimulusFailed: handling raised (a bug in handling this one stimulus); it
                carries the effects produced before the error, which the shell still
                carries out, and the cause.
        """
        self._out, self._sid = [], stimulus.stimulus_id
        try:
            self._dispatch(stimulus)
        except Exception as exc:
            raise StimulusFailed(self._take(), exc) from exc
        return self._take()

    def _take(self) -> list[fx.Effect]:
        out, self._out = self._out, []
        return out

    def _dispatch(self, s: st.Stimulus) -> None:
        if isinstance(s, st.IngressMessage):
            self._on_ingress(s.identity, s.message, s.now)
        elif isinstance(s, st.ControlMessage):
            self._on_control(s.identity, s.message, s.now)
        elif isinstance(s, st.ChannelMessage):
            self._on_channel(s.channel, s.message, s.now)
        elif isinstance(s, st.ChannelRegistered):
            self._on_registered(s.channel, s.now)
        elif isinstance(s, st.ChannelReplaced):
            self._drop_delivery(s.channel)
            self._queued[s.channel].clear()  # the old incarnation's queue died with it
            self._drops_owed[s.channel].clear()  # and the weights it held
        elif isinstance(s, st.ProcessLost):
            self._on_lost(s)
        elif isinstance(s, st.WeightSendFailed):
            for wid in reversed(s.weight_ids):
                self._deliveries[s.channel].send_failed(wid)
        elif isinstance(s, st.DropSendFailed):
            # Registered again meanwhile: the new copy's delivery replaces the old one.
            self._drops_owed[s.channel].update(
                (wid, None) for wid in s.weight_ids if wid not in self.weights)
        elif isinstance(s, st.TimerTick):
            self._on_tick(s.now)
        elif isinstance(s, st.LoopAway):
            self._on_loop_away(s)
        elif isinstance(s, st.StopRequested):
            self.draining = True
            self._log("info", "drain_started", in_flight=len(self._live))
        elif isinstance(s, st.DrainFinished):
            self._on_drain_finished()

    # ================================================================== views

    @property
    def in_flight(self) -> int:
        """Client requests not answered yet."""
        return len(self._live)

    def next_wakeup(self) -> float | None:
        """The earliest time a `TimerTick` has something to do (None: nothing planned):
        voter deadlines, scheduler wakeups, clients' own deadlines (answered at that time,
        not at the next unrelated wakeup) and weight acknowledgement deadlines."""
        wake = [w for w in (self.voter.next_deadline(), self.scheduler.next_wakeup(),
                            *(d.next_deadline() for d in self._deliveries.values()))
                if w is not None]
        # A request answered before its client's deadline leaves its entry in the heap;
        # dropped here, so that it does not wake the loop for nothing.
        while self._client_deadlines and self._client_deadlines[0][1] not in self._live:
            heapq.heappop(self._client_deadlines)
        if self._client_deadlines:
            wake.append(self._client_deadlines[0][0])
        return min(wake) if wake else None

    def status_mode(self) -> str:
        """STARTING until a voting set first exists (and again after a reset from SAFE)."""
        mode = self.controller.mode
        return mode.value if mode is Mode.SAFE or self.controller.formed else "STARTING"

    def hft(self) -> HftAssessment:
        """Declared and effective HFT (`safemon.hft`) of the voting set now; while none
        votes (starting, SAFE), of the configured set under the configured policy."""
        configured = Policy(self.config.policy)
        hardware = channel_hardware(self.config, self.backend, self.gpu_uuids)
        voting = self.controller.voting
        policy, names = (self.controller.policy, voting) if voting else (
            configured, self.config.channel_names)
        return assess(configured, policy, {n: hardware[n] for n in names})

    def on_start(self) -> list[fx.Effect]:
        """The effects of the daemon's start: the HFT gauges, and a warning when the
        hardware earns less HFT than the policy declares."""
        self._sid = "start"
        self.report_hft(at_start=True)
        return self._take()

    # The scrape-time view (`safemon.metrics_collector.RuntimeState`): read on the HTTP
    # thread, so each reads one attribute or a tuple replaced whole.

    def current_mode(self) -> Mode:
        """The controller's mode now."""
        return self.controller.mode

    def channel_state(self, channel: str) -> ChannelState:
        """The controller's state of `channel` now."""
        return self.controller.channel_state(channel)

    def hft_figures(self) -> tuple[int, int]:
        """(declared, effective) HFT now (`hft`)."""
        a = self.hft()
        return a.declared, a.effective

    def vote_counts(self) -> Mapping[tuple[Policy, str], int]:
        """Answered requests by (policy, outcome): the voter's own count (`Voter.votes`)."""
        return {(policy, str(outcome)): n for (policy, outcome), n in self.voter.votes().items()}

    def report_hft(self, *, at_start: bool = False) -> None:
        """At start, warn when the hardware earns less HFT than the policy declares (the
        `safemon_hft` gauge itself is read at scrape time)."""
        a = self.hft()
        if at_start and a.effective < a.declared:
            self._log("warning", "hft_below_declared", declared=a.declared, effective=a.effective,
                      policy=Policy(self.config.policy).value, reason=a.reason)

    # ================================================================== ingress

    def _on_ingress(self, identity: bytes, msg: Message, now: float) -> None:
        try:
            request: msgs.IngressMessage | None = (
                msgs.parse_ingress(msg.kind, msg.meta))
            problem = ""
        except msgs.MetaError as exc:
            request, problem = None, str(exc)
        if isinstance(request, msgs.Hello):
            admits = admission.client_limits(self.config)
            self._reply("ingress", identity, Kind.REPLY, msg.seq, msgs.ControlReply(
                ok=True, outcome="hello", max_frame_bytes=admits.max_frame_bytes,
                max_total_bytes=admits.max_total_bytes).to_meta())
            return
        if self.draining:
            self.metrics.count_request("shutting_down")
            self._error_to("ingress", identity, msg.seq, "ShuttingDownError",
                           "the daemon is shutting down")
            return
        if isinstance(request, msgs.RegisterWeight):
            self._register_weight(identity, msg, request)
            return
        if isinstance(request, msgs.RegisterModel):
            self._register_model(identity, msg)
            return
        checked = (("InvalidInputError", problem) if request is None
                   else self._validate_request(request, msg))
        if isinstance(checked, tuple):
            kind, text = checked
            if kind == "InvalidInputError" and msg.kind is Kind.REQUEST:
                self.metrics.count_request("invalid_input")
            self._error_to("ingress", identity, msg.seq, kind, text)
            return
        assert isinstance(request, msgs.MatmulRequest | msgs.ModelRequest)
        self._submit(identity, msg, request, now, checked)

    def _submit(self, identity: bytes, msg: Message,
                request: msgs.MatmulRequest | msgs.ModelRequest, now: float,
                io: DeviceIo | None) -> None:
        """Admit and send a request `_validate_request` accepted (`io`: its device buffers,
        None for a request whose x is a frame)."""
        model = self.models.get(request.model_id) if isinstance(request, msgs.ModelRequest) else None
        wid = model.model_id if model is not None else str(getattr(request, "weight_id", ""))
        x = None if io is not None else np.ascontiguousarray(msg.arrays[0])
        m, k = (io.rows, io.cols) if io is not None else x.shape  # type: ignore[union-attr]
        n = model.max_dim if model is not None else self.weights[wid].shape[1]
        safe = self.controller.mode is Mode.SAFE
        policy = self.controller.policy
        voters = tuple(self.config.channel_names[: policy.channels]) if safe else self.controller.voting
        # Admission weighs the live work queued ahead (what a self-test would wait behind);
        # the budget also covers weight stores ahead, which a storing channel finishes
        # before this work but runs out of the self-test schedule.
        live_s = [self._queued_s(ch, now) for ch in voters]
        queued_s = max(live_s, default=0.0)
        ahead_s = max((q + self._stores_ahead_s(ch) for ch, q in zip(voters, live_s, strict=True)),
                      default=0.0)
        cost_s = (self.item_cost_s(m, k, n) if model is None
                  else model.cost_s(self.item_cost_s, m))
        refusal = admission.check_request(self.config, (m, k), n, self.voter.open_requests,
                                          queued_s, cost_s)
        if refusal is None and io is not None and not safe and policy is Policy.ONE_OO_ONE_D:
            # 1oo1D checks C against x and W on the host: it needs the bytes.
            refusal = admission.Refusal(
                "DeviceInputError", "device-resident requests need two or more voting "
                "channels (1oo1D checks C against x on the host): send x as a frame",
                "invalid_input")
        if refusal is None and model is not None and not safe and policy is Policy.ONE_OO_ONE_D:
            # 1oo1D's per-request check is the host ABFT test of C against x and W, which a
            # model's intermediate layers never reach: no trustworthy model output exists.
            refusal = admission.Refusal(
                "ModelUnavailableError", "whole-model requests need two or more voting channels "
                "(the 1oo1D per-request check cannot see a model's intermediate layers)",
                "model_unavailable")
        if refusal is not None:
            self.metrics.count_request(refusal.outcome)
            self._error_to("ingress", identity, msg.seq, refusal.error_type, refusal.message)
            return
        if not safe and not voters:
            self._error_to("ingress", identity, msg.seq, "VoteTimeoutError",
                           "no voting set yet: channels are still passing their start-up self-tests")
            return
        # The channels are judged by their own budget for this work item (the work queued
        # ahead of it included), never by the client's timeout: a client that gives up
        # earlier gets VoteTimeoutError, alone.
        budget_s = admission.budget_s(self.config, cost_s, ahead_s)
        client_s = client_deadline_s(request.deadline_ms, budget_s)
        if model is not None:
            self.models.touch(model.model_id)
            for wid_used in model.weight_ids:
                self._weight_lru.move_to_end(wid_used)
        else:
            self._weight_lru.move_to_end(wid)
        seq = self.next_seq()
        for ch in voters:
            self._queued[ch][seq] = (cost_s, now + budget_s)
        incs = {ch: self.processes.incarnation(ch) for ch in voters}
        self._live[seq] = Live(identity, msg.seq, now, x, wid, policy, incarnations=incs,
                               model=model, device=io)
        if io is not None:
            self._remember_device(seq, self._live[seq])
        self._sent_to[seq] = (now + budget_s, incs)
        heapq.heappush(self._work_expiry, (now + budget_s, seq))
        if client_s < budget_s:
            heapq.heappush(self._client_deadlines, (now + client_s, seq))
        self._voter(vot.Submit(seq, now, now + budget_s, voters, policy))
        if seq in self._live:
            # One meta for every voter; a device-resident request's differs per channel in
            # its slot's byte offset only.
            where = {} if io is None else self._device_work_meta(io)
            x_frames = () if x is None else (x,)
            if model is not None:
                meta = msgs.ModelWork(model_id=wid, deadline_ms=budget_s * 1000.0,
                                      **where).to_meta()
                frames = (*x_frames, model.spec, model.biases)
            else:
                meta = msgs.WorkRequest(job="live", weight_id=wid, deadline_ms=budget_s * 1000.0,
                                        **where).to_meta()
                frames = x_frames
            for ch in voters:
                work = meta if io is None else {
                    **meta, "out_offset": self._slot_of(io, ch) * io.slot_bytes}
                self._send(ch, Kind.REQUEST, seq, work, frames, busy_until=now + budget_s)

    def _queued_s(self, ch: str, now: float) -> float:
        """Seconds of live work (item costs) sent to `ch` and not answered, within its budget."""
        return sum(c for c, d in self._queued[ch].values() if d >= now)

    def _ahead_s(self, ch: str, now: float) -> float:
        """Seconds of work that something sent to `ch` now waits behind: its live work
        (`_queued_s`) and the weights sent to it and not yet acknowledged (`_store_cost_s`
        each). Until 2026-12-06 the stores were left out, and a request sent behind a
        64 MiB store got a budget shorter than the store: the channel was blamed
        (`deadline_miss`) for work it was never given time for."""
        return self._queued_s(ch, now) + self._stores_ahead_s(ch)

    def _stores_ahead_s(self, ch: str) -> float:
        """Seconds of the weight stores sent to `ch` and not yet acknowledged."""
        wids = self._deliveries[ch].pending()
        return sum(self._store_cost_s(w) for w in wids if w in self.weights) if wids else 0.0

    def _expire_client_deadlines(self, now: float) -> None:
        """Answer each request whose client's own deadline passed with VoteTimeoutError;
        the vote goes on (its channels' results still judge them), only the reply is gone."""
        while self._client_deadlines and self._client_deadlines[0][0] <= now:
            _, seq = heapq.heappop(self._client_deadlines)
            if seq in self._live:
                self.metrics.count_request("client_timeout")
                self._answer_error(seq, "VoteTimeoutError",
                                   "the client's deadline passed before the vote completed")
        # Work past its budget is no longer queued on a channel; the voter closed it at its
        # deadline (voter Tick first), or will within `timing.ftti_s` (the most a `LoopAway`
        # moves it), and `_sent_to` keeps it that and one second more for the DeadlineMiss
        # of a replaced incarnation.
        keep_s = 1.0 + self.config.timing.ftti_s
        while self._work_expiry and self._work_expiry[0][0] < now:
            end, seq = heapq.heappop(self._work_expiry)
            for q in self._queued.values():
                q.pop(seq, None)
            heapq.heappush(self._sent_expiry, (end + keep_s, seq))
        while self._sent_expiry and self._sent_expiry[0][0] < now:
            self._sent_to.pop(heapq.heappop(self._sent_expiry)[1], None)

    def _device_io(self, request: msgs.MatmulRequest | msgs.ModelRequest) -> DeviceIo | str | None:
        """The request's device buffers (None: x travels as a frame; a text: what is wrong
        with them). The request's weight or model must be registered."""
        model = self.models.get(request.model_id) if isinstance(request, msgs.ModelRequest) else None
        if model is not None:
            n_out = model.n_out
        else:
            n_out = int(self.weights[str(getattr(request, "weight_id", ""))].shape[1])
        return device_io_of(request, n_out)

    def _validate_request(self, request: msgs.MatmulRequest | msgs.ModelRequest,
                          msg: Message) -> tuple[str, str] | DeviceIo | None:
        """(error type, text) when `request` must be refused; else its device buffers
        (`DeviceIo`), or None for a request whose x travels as a frame."""
        device = is_device_request(request)
        if device and msg.arrays:
            return ("InvalidInputError",
                    f"a device-resident request carries no frame, got {len(msg.arrays)}")
        if not device and len(msg.arrays) != 1:
            return "InvalidInputError", f"a request carries one array x, got {len(msg.arrays)}"
        x = msg.arrays[0] if not device else None
        if isinstance(request, msgs.ModelRequest):
            model = self.models.get(request.model_id)
            if model is None:
                return ("UnknownModelError",
                        f"model id {quote(request.model_id)} is not registered with this daemon")
            k_in = model.k_in
            rows = (int(msg.arrays[0].shape[0]) if not device and msg.arrays
                    and msg.arrays[0].ndim == 2 else getattr(request, "x_rows", None))
            if isinstance(rows, int) and rows > 0:
                try:
                    model.shape.check_rows(rows)
                except InvalidInputError as exc:
                    return "InvalidInputError", f"model {quote(request.model_id)}: {exc}"
        else:
            if request.weight_id not in self.weights:
                return ("UnknownWeightError",
                        f"weight id {quote(request.weight_id)} is not registered with this daemon")
            k_in = self.weights[request.weight_id].shape[0]
        if x is None:
            io = self._device_io(request)
            if isinstance(io, str):
                return "InvalidInputError", io
            assert io is not None
            if io.cols != k_in:
                return ("InvalidInputError", f"x is ({io.rows}, {io.cols}), the input needs "
                        f"{k_in} columns: inner dimensions differ")
            return io
        if x.dtype != np.float32 or x.ndim != 2 or x.size == 0:
            return "InvalidInputError", f"x must be a non-empty 2-D float32 array, got {x.dtype} {x.shape}"
        if x.shape[1] != k_in:
            return "InvalidInputError", f"x is {x.shape}, the input needs {k_in} columns: inner dimensions differ"
        if not np.isfinite(x).all():
            return "InvalidInputError", "x contains NaN or infinity (non-finite inputs are rejected)"
        return None

    # ================================================================== weights

    def _register_weight(self, identity: bytes, msg: Message,
                         request: msgs.RegisterWeight) -> None:
        if len(msg.arrays) != 1:
            self._error_to("ingress", identity, msg.seq, "InvalidInputError", "register_weight needs one array")
            return
        now = self.clock()
        if (due := self._due_a_selftest(now)) is not None:
            # Storing takes the channels out of the self-test schedule; a stream of new
            # weights (evictions make it endless) must not keep a voting channel untested.
            # Refused before the weight is checked and hashed: clients send it again.
            self._error_to("ingress", identity, msg.seq, "BusyError",
                           f"channel {due} is due for its periodic self-test: registrations "
                           "wait until it has passed one (retry)")
            return
        w = msg.arrays[0]
        if w.dtype != np.float32 or w.ndim != 2 or w.size == 0 or not np.isfinite(w).all():
            self._error_to("ingress", identity, msg.seq, "InvalidInputError",
                           f"a weight must be a non-empty, finite, 2-D float32 array, got {w.dtype} {w.shape}")
            return
        wid = weight_id_of(w)
        plan = self._plan_hold(identity, request, wid, int(w.nbytes))
        if isinstance(plan, admission.Refusal):
            self._log("warning", "weight_refused", shape=list(w.shape), reason=plan.message)
            self._error_to("ingress", identity, msg.seq, plan.error_type, plan.message)
            return
        if wid in self.weights:
            self._weight_lru.move_to_end(wid)
        else:
            refusal = admission.check_weight(self.config, w.shape, len(self.weights),
                                             self._weight_bytes)
            if (refusal is not None and refusal.error_type == "WeightBudgetError"
                    and self._make_room(int(w.nbytes), plan)):
                refusal = admission.check_weight(self.config, w.shape, len(self.weights),
                                                 self._weight_bytes)
            if refusal is not None:
                self._log("warning", "weight_refused", shape=list(w.shape), reason=refusal.message)
                self._error_to("ingress", identity, msg.seq, refusal.error_type, refusal.message)
                return
            self.weights[wid] = np.array(w, dtype=np.float32, order="C", copy=True)
            self._weight_lru[wid] = None
            for owed in self._drops_owed.values():
                owed.pop(wid, None)  # the channels store the new copy over the old
            self._weight_bytes += int(w.nbytes)
            owing = {ch for ch in self.config.channel_names if self.processes.registered(ch)}
            if owing:
                self._weight_waits[wid] = ([], owing)
            for ch in owing:
                self._deliveries[ch].add(wid)
                if ch in self.scheduler.channels:
                    # Storing a large weight (checked, ECC-encoded, uploaded) keeps the
                    # channel's loop busy for up to its ack budget: a self-test queued behind
                    # it would overrun through no fault of the channel. It leaves the
                    # schedule and rejoins once it holds the weight (`_pump_weights`), with
                    # the self-test it was due then.
                    self._due_after_store.setdefault(
                        ch, (self.scheduler.selftest_due(ch), self.scheduler.scrub_due(ch)))
                    self._sched(sch.ChannelLeft(ch, now))
                    self._awaiting_join.add(ch)
                self._pump_weights(ch, now)
            self._log("info", "weight_registered", weight_id=wid, shape=list(w.shape))
        if plan is not None:
            self._take_hold(plan, wid)
        wait = self._weight_waits.get(wid)
        if wait is not None and wait[1]:
            wait[0].append((identity, msg.seq))  # answered once every channel holds it
            return
        self._reply("ingress", identity, Kind.REPLY, msg.seq,
                    msgs.ControlReply(ok=True, outcome=wid).to_meta())

    def _charge(self, nbytes: int) -> int:
        """What a weight of `nbytes` counts against its holders' quota: its bytes, and at
        least its share of the count budget (`max_weight_total_bytes / max_weights`), so
        that quotas that fit the byte budget together fit the count budget too."""
        return max(nbytes, self.config.limits.least_weight_charge)

    def _plan_hold(self, identity: bytes, request: msgs.RegisterWeight, wid: str,
                   new_bytes: int) -> tuple[str, list[str]] | admission.Refusal | None:
        """Under `limits.max_client_weight_bytes`: who registers `wid` (`"key:"` + its
        `client` key, or `"conn:"` + its connection), and which of its holds it gives up,
        least recently used first, so that `wid` fits its quota
        (`safemon.eviction.holds_to_release`). Nothing changes until `_take_hold`, after
        the registration is accepted. None without a quota; a Refusal for a client key
        over `MAX_CLIENT_KEY` characters or a weight whose charge alone is over the quota."""
        quota = self.config.limits.max_client_weight_bytes
        if quota is None:
            return None
        if request.client is not None and len(request.client) > msgs.MAX_CLIENT_KEY:
            return admission.Refusal(
                "InvalidInputError", f"register_weight's client key has {len(request.client)} "
                f"characters, over {msgs.MAX_CLIENT_KEY}", "invalid_input")
        holder = (f"key:{request.client}" if request.client is not None
                  else f"conn:{identity.hex()}")
        if holder in self._holders.get(wid, ()):
            return holder, []
        held = [i for i in self._weight_lru if holder in self._holders.get(i, ())]
        release = holds_to_release(
            held, {i: self._charge(int(self.weights[i].nbytes)) for i in held},
            new_bytes=self._charge(new_bytes), quota_bytes=quota)
        if release is None:
            return admission.Refusal(
                "WeightBudgetError", f"the weight counts {self._charge(new_bytes)} bytes (its "
                f"{new_bytes}, at least max_weight_total_bytes / max_weights), over the quota "
                f"of one client (limits.max_client_weight_bytes, {quota})", "invalid_input")
        return holder, release

    def _take_hold(self, plan: tuple[str, list[str]], wid: str) -> None:
        """Carry out `_plan_hold`'s plan for the accepted registration of `wid`: give up the
        planned holds (a weight nobody holds any more is first in line for eviction), then
        hold `wid` (a weight keeps at most `MAX_HOLDERS`)."""
        holder, release = plan
        for i in release:
            holders = self._holders.get(i)
            if holders is None:
                continue  # evicted to make room for `wid`
            del holders[holder]
            if not holders:
                del self._holders[i]
            self._log("info", "weight_hold_released", weight_id=i, client=holder[:12],
                      reason="limits.max_client_weight_bytes: the client registers another")
        holders = self._holders.setdefault(wid, collections.OrderedDict())
        holders[holder] = None
        holders.move_to_end(holder)
        if len(holders) > MAX_HOLDERS:
            holders.popitem(last=False)  # bounded: that client is no longer charged

    def _weights_in_use(self) -> set[str]:
        """Weights that must stay: used by a request in flight (the core reads a 1oo1D
        request's weight when its result comes), or still being delivered to a channel or
        awaited by a client's `register_weight`."""
        used = {wid for live in self._live.values() if live.model is not None
                for wid in live.model.weight_ids}
        used.update(live.weight_id for live in self._live.values() if live.model is None)
        used.update(self._weight_waits)
        used.update(wid for wid in self.weights
                    if any(d.owes(wid) for d in self._deliveries.values()))
        return used

    def _make_room(self, new_bytes: int, plan: tuple[str, list[str]] | None = None) -> bool:
        """Evict the least recently used weights that nothing in flight needs until one
        more weight of `new_bytes` fits `limits.max_weights` / `max_weight_total_bytes`
        (`safemon.eviction`); False, with nothing evicted, when that cannot be done. Under
        a quota (`plan`: `_plan_hold`'s), the weights nobody holds go first, counting
        those whose only holder gives them up for this registration."""
        lim = self.config.limits
        order: Iterable[str] = self._weight_lru
        if plan is not None:
            holder, release = plan
            order = eviction_order(self._weight_lru, self._holders, also_unheld={
                i for i in release if list(self._holders.get(i, ())) == [holder]})
        evict = choose_evictions(order,
                                 {wid: int(w.nbytes) for wid, w in self.weights.items()},
                                 self._weights_in_use(), new_bytes=new_bytes,
                                 max_count=lim.max_weights, max_bytes=lim.max_weight_total_bytes)
        if evict is None:
            return False
        for wid in evict:
            self._evict_weight(wid)
        return True

    def _evict_weight(self, wid: str) -> None:
        """Forget weight `wid` and every model on it, and tell each running channel to
        drop its copy. A channel handles its messages in order, so work sent before this
        still finds the weight; the core sends no work on `wid` after it (a request for it
        is answered `UnknownWeightError`, and its client registers it again)."""
        w = self.weights.pop(wid)
        self._weight_lru.pop(wid, None)
        self._holders.pop(wid, None)
        self._weight_bytes -= int(w.nbytes)
        for mid in self.models.drop_using(wid):
            self._model_evicted(mid, f"its weight {wid} was evicted")
        for ch in self.config.channel_names:
            if self.processes.registered(ch):
                self._send_drop(ch, wid)
        self.metrics.count_eviction("weight")
        self._log("info", "weight_evicted", weight_id=wid, shape=list(w.shape),
                  reason="the weight budget (limits.max_weights / max_weight_total_bytes) "
                         "is full")

    def _send_drop(self, ch: str, wid: str) -> None:
        """Tell `ch` to drop evicted weight `wid` (a failed send comes back as
        `DropSendFailed`)."""
        self._send(ch, Kind.CONTROL, self.next_seq(),
                   msgs.ChannelCommand(command="drop_weight", args=wid).to_meta(),
                   drops_weight=wid)

    def _resend_drops(self) -> None:
        """Send again the `drop_weight` commands that could not be queued."""
        for ch, owed in self._drops_owed.items():
            if owed and self.processes.registered(ch):
                wids = list(owed)
                owed.clear()
                for wid in wids:
                    self._send_drop(ch, wid)

    def _scrub_busy_until(self, ch: str, now: float) -> float:
        """Until when a scrub sent to `ch` at `now` may keep its loop from heartbeating: the
        work queued ahead of it (`_ahead_s`: the supervisor counts only the earliest
        deadline of a channel's unanswered work, so a scrub's must not end before the work
        it waits behind), then `timing.request_deadline_s` plus, per resident weight, what
        reading it once costs (`_store_cost_s`). A scrub command patrols for a time slice
        at most (`ChannelWorker._scrub`), so this is an upper bound."""
        return now + self._ahead_s(ch, now) + self.config.timing.request_deadline_s + sum(
            self._store_cost_s(wid) for wid in self.weights)

    def _selftest_wait_s(self, ch: str, now: float) -> float:
        return admission.selftest_extension_s(self.config, self._ahead_s(ch, now))

    def _store_cost_s(self, wid: str) -> float:
        """Seconds a healthy channel may spend storing (checking, ECC encoding, uploading)
        or reading once registered weight `wid` (`safemon.admission.store_cost_s`)."""
        k, n = self.weights[wid].shape
        return admission.store_cost_s(self.config, int(k), int(n))

    def _pump_weights(self, ch: str, now: float) -> None:
        """Send what the window allows of the weights `ch` is owed; once it holds them all,
        a channel waiting to join the self-test schedule joins (and is asked for its test).
        A send that fails comes back as `WeightSendFailed` and is retried on a later tick."""
        d = self._deliveries[ch]
        while (wid := d.next_to_send()) is not None:
            if wid not in self.weights:
                d.sent(wid, now)
                d.ack(wid)
                continue
            # Its acknowledgement is due after the work queued ahead of it (live work and
            # the stores still unacknowledged) and its own store.
            ack_by = (now + self._ahead_s(ch, now) + self.config.timing.request_deadline_s
                      + self._store_cost_s(wid))
            self._send(ch, Kind.CONTROL, self.next_seq(),
                       msgs.ChannelCommand(command="weight", args=wid).to_meta(),
                       (self.weights[wid],), weight_id=wid, busy_until=ack_by)
            d.sent(wid, ack_by)
        if d.idle and ch in self._awaiting_join:
            self._awaiting_join.discard(ch)
            test_due, scrub_due = self._due_after_store.pop(ch, (None, None))
            self._sched(sch.ChannelJoined(ch, now, test_due, scrub_due))
            if (self.controller.mode is not Mode.SAFE
                    and self.controller.channel_state(ch) is ChannelState.STARTING):
                self._run_now(ch, now)
            elif self._classifier.active(ch):
                # A fault's retests began while it stored (a self-test that failed then,
                # `_on_selftest_result`): they could not run until now.
                self._run_now(ch, now)

    def _weight_acked(self, ch: str, wid: str) -> None:
        wait = self._weight_waits.get(wid)
        if wait is None:
            return
        wait[1].discard(ch)
        if not wait[1]:
            del self._weight_waits[wid]
            for identity, seq in wait[0]:
                self._reply("ingress", identity, Kind.REPLY, seq,
                            msgs.ControlReply(ok=True, outcome=wid).to_meta())

    def _due_a_selftest(self, now: float) -> str | None:
        """A voting channel whose last passed self-test started more than one DTI before
        `now` (it is due its next one), or None."""
        dti = self.config.timing.dti_s
        for ch in self.controller.voting:
            started = self._selftest_passed_at.get(ch)
            if started is not None and now - started > dti:
                return ch
        return None

    def _drop_delivery(self, ch: str) -> None:
        """`ch` is being restarted or isolated: it owes nothing more (its next incarnation
        gets every weight afresh), and no client waits for it."""
        self._due_after_store.pop(ch, None)
        self._deliveries[ch].begin(())
        self._awaiting_join.discard(ch)
        for wid in list(self._weight_waits):
            self._weight_acked(ch, wid)

    def _check_deliveries(self, now: float) -> None:
        for ch, d in self._deliveries.items():
            late = d.overdue(now)
            if late:
                self._drop_delivery(ch)
                self._fault(ch, ctl.FaultKind.CHANNEL_ERROR, now, now,
                            f"weight {late[0]} not acknowledged within its budget")
            else:
                self._pump_weights(ch, now)

    # ================================================================== channels

    def _on_registered(self, name: str, now: float) -> None:
        if name in self.scheduler.channels:
            self._sched(sch.ChannelLeft(name, now))
        # It joins the self-test schedule (and so may rejoin the vote) only once it
        # holds every registered weight, acknowledged (`_pump_weights`).
        self._drop_delivery(name)
        self._drops_owed[name].clear()  # a new incarnation holds no weight
        self._deliveries[name].begin(self.weights)
        self._awaiting_join.add(name)
        self._controller(ctl.ChannelStarted(name, now))
        self._pump_weights(name, now)

    def _on_channel(self, name: str, msg: Message, now: float) -> None:
        try:
            m = msgs.channel_message_of(msg)
        except msgs.MetaError as exc:
            if msg.kind is not Kind.RESULT:
                self._log("warning", "channel_message_malformed", channel=name,
                          kind=msg.kind.value, error=str(exc))
                return
            # A result that cannot be read is a failed result (the voter hears of it).
            job = "selftest" if msg.meta.get("job") == "selftest" else "live"
            m = msgs.Result(job=job, ok=False, error=f"malformed result: {exc}")
        if isinstance(m, msgs.Heartbeat):
            self._on_heartbeat(name, m)
        elif isinstance(m, msgs.WeightAck):
            if self._deliveries[name].ack(m.weight_id):
                if m.ok:
                    self._weight_acked(name, m.weight_id)
                    self._pump_weights(name, now)
                else:
                    self._drop_delivery(name)
                    self._fault(name, ctl.FaultKind.CHANNEL_ERROR, now, now,
                                f"refused weight {m.weight_id}")
        elif isinstance(m, msgs.ScrubReport):
            if m.corrected >= 0 and m.uncorrectable >= 0 and name in self.scheduler.channels:
                self._sched(sch.ScrubDone(name, m.corrected, m.uncorrectable, now))
            elif (m.corrected > 0 or m.uncorrectable > 0) and name in self._awaiting_join:
                # Out of the schedule only to store a weight: its findings are facts about
                # its memory all the same (an uncorrectable word is a fault).
                self._on_sched(sch.ScrubFindings(name, m.corrected, m.uncorrectable), now)
        elif (isinstance(m, msgs.Result) and m.job in ("live", "model") and m.ok
              and m.input_invalid is not None and not msg.arrays):
            self._on_input_invalid(name, msg.seq, m.input_invalid, m.variant, now)
        elif (isinstance(m, msgs.Result) and m.job in ("live", "model")
              and (live := self.device_request(msg.seq)) is not None):
            self._on_device_result(name, msg, m, live, now)
        elif isinstance(m, msgs.Result) and m.job == "model":
            self._on_model_result(name, msg, now)
        elif isinstance(m, msgs.Result):
            ok = m.ok and len(msg.arrays) in (2, 3)  # a GPU self-test adds the SMs frame
            if ok and m.kernel_seconds is not None and m.kernel_seconds >= 0:
                self.metrics.observe_kernel(name, m.kernel_seconds)
            if m.job == "selftest":
                self._on_selftest_result(name, msg, m, ok, now)
            else:
                self._on_result(name, msg, m, ok, now)

    def _on_heartbeat(self, name: str, m: msgs.Heartbeat) -> None:
        cor, unc = m.ecc_corrected, m.ecc_uncorrectable
        if cor is not None and unc is not None and m.incarnation == self.processes.incarnation(name):
            try:
                self.metrics.update_channel_ecc(name, m.incarnation, {"weights": cor},
                                                {"weights": unc})
            except ValueError as exc:
                self._log("warning", "bad_heartbeat_ecc", channel=name, error=str(exc))

    def _on_selftest_result(self, name: str, msg: Message, m: msgs.Result, ok: bool,
                            now: float) -> None:
        c, es = (msg.arrays[0], msg.arrays[1]) if ok else (None, None)
        test = self._tests.pop(msg.seq, None)
        if test is None or test.channel != name:
            return
        passed = bool(ok and test.pattern.check(c, es))
        from safemon.patterns.sm_coverage import sm_report

        per_block = msg.arrays[2] if ok and len(msg.arrays) == 3 else None
        sms, sm_count, failing = sm_report(m.sm_count, per_block, test.pattern, c, es, passed)
        self._log("debug", "selftest_result", channel=name, test_id=test.test_id, seq=msg.seq,
                  passed=passed, age_s=now - test.started)
        if not passed:
            self._log("warning", "selftest_result_wrong", channel=name, test_id=test.test_id,
                      pattern=test.pattern.id,
                      reason=m.error or "C or ES differs from the golden pattern",
                      failing_sms=list(failing))
        if name in self.scheduler.channels:
            self._sched(sch.SelfTestDone(name, test.test_id, passed, now, sms=sms,
                                         sm_count=sm_count, failing_sms=failing))
            self.metrics.set_sm_coverage(name, self.scheduler.sm_coverage(name))
        elif name in self._awaiting_join:
            # Sent before the channel left the schedule to store a weight: the scheduler no
            # longer waits for it, but a failed test is a fault and a passed one counts
            # (found by a review: a registration during each test or scrub discarded them).
            self._on_sched(sch.SelfTestPassed(name, test.test_id, now - test.started) if passed
                           else sch.SelfTestFailed(name, test.test_id, now, failing), now)

    def _variant_of(self, name: str, x: npt.NDArray[Any], w: npt.NDArray[Any]) -> Variant:
        """The kernel variant channel `name` runs for x·w (its tile and split)."""
        assert self.config.channels is not None
        ch = next(c for c in self.config.channels if c.name == name)
        return ch.variant.to_variant(int(x.shape[0]), int(w.shape[1]), int(x.shape[1]))

    def _on_input_invalid(self, name: str, seq: int, text: str, variant: str,
                          now: float) -> None:
        """Channel `name` found NaN or infinity in a product's input of live or model
        request `seq` (the request's x, or a hidden activation that overflowed float32):
        voted as the C digest `INPUT_INVALID_DIGEST`, so that a request every channel
        finds so is answered `InvalidInputError` (`Roles._released`) with no channel
        faulted, and a channel that alone finds so disagrees with the others."""
        self._queued[name].pop(seq, None)
        live = self._live.get(seq)
        if live is not None:
            live.invalid.setdefault(name, text)
        self._voter(vot.ChannelResult(seq, name, now, True, INPUT_INVALID_DIGEST, b"", variant))

    def _on_result(self, name: str, msg: Message, m: msgs.Result, ok: bool, now: float) -> None:
        c, es = (msg.arrays[0], msg.arrays[1]) if ok else (None, None)
        self._queued[name].pop(msg.seq, None)
        live = self._live.get(msg.seq)
        error_text = m.error or "result without C and ES"
        if (ok and c is not None and live is not None and live.policy is Policy.ONE_OO_ONE_D
                and live.x is not None
                and not abft_passes(live.x, self.weights[live.weight_id], c,
                                    self._variant_of(name, live.x, self.weights[live.weight_id]))):
            overflow = _overflows(live.x, self.weights[live.weight_id], c)
            if overflow is not None:  # the checksum test cannot judge an overflowed C
                self._on_input_invalid(name, msg.seq, overflow, m.variant, now)
                return
            ok, error_text = False, "channel_error: C failed the per-request checksum test"
        if ok and c is not None and es is not None:
            if live is not None:
                live.results[name] = c
                if m.kernel_seconds is not None and m.kernel_seconds >= 0:
                    live.kernel_seconds[name] = m.kernel_seconds
            result = vot.ChannelResult(msg.seq, name, now, True, digest(c), digest(es), m.variant)
        else:
            result = vot.ChannelResult(msg.seq, name, now, False, b"", b"", "", error_text)
        self._voter(result)

    def _on_lost(self, lost: st.ProcessLost) -> None:
        now = lost.now
        kind = ctl.FaultKind.CRASH if lost.kind == "crash" else ctl.FaultKind.HEARTBEAT_LOST
        self._log("warning", "channel_lost", channel=lost.channel, kind=lost.kind,
                  detail=lost.detail)
        self._drops_owed[lost.channel].clear()  # a lost incarnation is never sent to again
        if lost.channel in self.scheduler.channels:
            # Nothing left to self-test or scrub; it joins again when it registers.
            self._sched(sch.ChannelLeft(lost.channel, now))
        if (self.controller.channel_state(lost.channel) is ChannelState.RESTARTING
                and self.controller.mode is not Mode.SAFE):
            # A new incarnation died before it registered. The controller absorbs faults of
            # a RESTARTING channel (its first failure is being handled), so tell it the
            # start happened and then failed: the fault of a STARTING channel follows the
            # policy's recovery (2oo3: another restart within the budget, then ISOLATED;
            # 1oo2D: ISOLATED). RESTARTING so always ends in UP or ISOLATED.
            self._log("warning", "channel_died_before_registering", channel=lost.channel)
            self._controller(ctl.ChannelStarted(lost.channel, now))
        self._fault(lost.channel, kind, lost.detected_at, now, lost.detail)

    # ================================================================== time

    def _on_tick(self, now: float) -> None:
        """Timers: scheduler wakeups (the scheduler settles what fell due before `now`
        itself), voter deadlines, client deadlines, weight acknowledgements, `drop_weight`
        commands that could not be queued."""
        self._sched(sch.Tick(now))
        self._voter(vot.Tick(now))
        self._expire_client_deadlines(now)
        self._check_deliveries(now)
        self._resend_drops()
        # Self-tests never answered (a lost channel) were judged by the scheduler at their
        # deadline, which a `SelfTestDelayed` and `LoopAway`s move by at most `ftti_s` each;
        # forget them ten deadlines after the latest that can be.
        timing = self.config.timing
        stale = now - 10 * timing.selftest_deadline_s - 2 * timing.ftti_s
        for seq in [q for q, t in self._tests.items() if t.started < stale]:
            del self._tests[seq]

    def _on_loop_away(self, s: st.LoopAway) -> None:
        """The shell read no channel message for `s.seconds` after `s.since`: the channels'
        open deadlines after `s.since` move that much later, none more than `timing.ftti_s`
        in all (docs/SAFETY.md, "Who is late")."""
        self._loop_away += 1
        self.metrics.observe_loop_away(s.seconds)
        if sampled(self._loop_away):
            self._log("warning", "loop_away", since=s.since, seconds=round(s.seconds, 6),
                      count=self._loop_away)
        limit = self.config.timing.ftti_s  # no deadline moves more than this in all
        self._sched(sch.Postpone(s.since, s.seconds, s.now, limit))
        self._voter(vot.Postpone(s.since, s.seconds, s.now, limit))
        for delivery in self._deliveries.values():
            delivery.postpone(s.since, s.seconds, limit)

    def _on_drain_finished(self) -> None:
        for seq in list(self._live):
            self.metrics.count_request("shutting_down")
            self._answer_error(seq, "ShuttingDownError", "the daemon stopped before the vote completed")
        for wid, (waiting, _owing) in list(self._weight_waits.items()):
            for identity, seq in waiting:
                self._error_to("ingress", identity, seq, "ShuttingDownError",
                               f"the daemon stopped before weight {wid} reached every channel")
        self._weight_waits.clear()


def _overflows(x: npt.NDArray[np.float32], w: npt.NDArray[np.float32],
               c: npt.NDArray[np.float32]) -> str | None:
    """Why the channel's C of x·w holds NaN or infinity when the request's values can make
    it so: at every non-finite element C[i, j] the float64 sum Σ_k |x[i, k]·w[k, j]| exceeds
    float32's range, so a float32 accumulation of those products can overflow there (to
    infinity, or to NaN once infinities of both signs meet; x and w are finite). None
    otherwise (C is then judged as it is: a channel error). Only on the path of a 1oo1D
    checksum test that failed, which cannot judge a non-finite C; the work is one float64
    product over the rows and columns that hold such elements."""
    bad = ~np.isfinite(c)
    if not bad.any():
        return None
    rows, cols = np.nonzero(bad)
    ur, ri = np.unique(rows, return_inverse=True)
    uc, ci = np.unique(cols, return_inverse=True)
    bound = np.abs(x[ur].astype(np.float64)) @ np.abs(w[:, uc].astype(np.float64))
    if not (bound[ri, ci] > float(np.finfo(np.float32).max)).all():
        return None
    return (f"x·w leaves float32: {int(bad.sum())} element(s) of the product overflow "
            "(NaN or infinity; the sums of |x·w| there exceed float32's range)")


class StimulusFailed(Exception):
    """Handling one stimulus raised: `effects` were produced before the error."""

    def __init__(self, effects: list[fx.Effect], cause: Exception) -> None:
        super().__init__(str(cause))
        self.effects = effects
        self.cause = cause

