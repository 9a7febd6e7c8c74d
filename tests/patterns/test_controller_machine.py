"""A hypothesis state machine drives the controller with random fault / self-test / start /
reset sequences and checks its safety invariants on the instruction stream alone."""

from __future__ import annotations

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from safemon.patterns.controller import (
    ChannelStarted,
    ControllerConfig,
    ControllerEvent,
    Fault,
    FaultKind,
    IsolateChannel,
    Notify,
    RecordReaction,
    RequestSelfTest,
    Reset,
    RestartChannel,
    SafeStateController,
    SelfTestResult,
    SetChannelState,
    SetMode,
    SetVoting,
)
from safemon.states import (
    CHANNEL_TRANSITIONS,
    MODE_TRANSITIONS,
    ChannelState,
    Mode,
    Policy,
    check_transition,
)

NAMES = ("a", "b", "c")
#: The policies each configured policy may ever vote under.
ALLOWED = {
    Policy.ONE_OO_ONE_D: {Policy.ONE_OO_ONE_D},
    Policy.TWO_OO_TWO: {Policy.TWO_OO_TWO},
    Policy.ONE_OO_TWO_D: {Policy.ONE_OO_TWO_D, Policy.ONE_OO_ONE_D},
    Policy.TWO_OO_THREE: {
        Policy.TWO_OO_THREE,
        Policy.TWO_OO_TWO,
        Policy.ONE_OO_TWO_D,
        Policy.ONE_OO_ONE_D,
    },
    Policy.ONE_OO_THREE_D: {Policy.ONE_OO_THREE_D, Policy.ONE_OO_TWO_D, Policy.ONE_OO_ONE_D},
}
#: Policies whose mismatches are diagnosed by self-tests instead of by a majority.
DIAGNOSED = {Policy.ONE_OO_TWO_D, Policy.ONE_OO_THREE_D}


class ControllerMachine(RuleBasedStateMachine):
    ctl: SafeStateController

    @initialize(
        policy=st.sampled_from(list(Policy)),
        degraded=st.sampled_from([Policy.TWO_OO_TWO, Policy.ONE_OO_TWO_D]),
        restart=st.booleans(),
        isolate=st.booleans(),
        max_restarts=st.integers(0, 3),
    )
    def setup(
        self, policy: Policy, degraded: Policy, restart: bool, isolate: bool, max_restarts: int
    ) -> None:
        self.cfg = ControllerConfig(
            channels=NAMES[: policy.channels],
            policy=policy,
            degraded_policy=degraded,
            max_restarts=max_restarts,
            restart_window=20.0,
            backoff_initial=0.5,
            backoff_factor=2.0,
            backoff_max=4.0,
            restart=restart,
            isolate=isolate,
        )
        self.ctl = SafeStateController(self.cfg)
        self.now = 0.0
        # The model, rebuilt from the instruction stream only.
        self.mode = Mode.NORMAL
        self.states = dict.fromkeys(self.cfg.channels, ChannelState.STARTING)
        self.voting: tuple[str, ...] = ()
        self.policy = policy
        self.formed = False
        # clean[c]: c's last self-test passed after its last fault / restart / fresh start.
        self.clean = dict.fromkeys(self.cfg.channels, False)
        self.restarts: dict[str, list[float]] = {c: [] for c in self.cfg.channels}

    # -- driving

    def feed(self, event: ControllerEvent) -> None:
        was_safe = self.mode is Mode.SAFE
        if isinstance(event, Fault) and event.channel is not None:
            self.clean[event.channel] = False
        if isinstance(event, ChannelStarted):
            self.clean[event.channel] = False
        if isinstance(event, SelfTestResult):
            self.clean[event.channel] = event.passed
        voting_before, policy_before, formed_before = self.voting, self.policy, self.formed
        out = self.ctl.handle(event)
        if was_safe and not isinstance(event, Reset):
            assert all(isinstance(i, Notify) for i in out), f"SAFE changed by {event}: {out}"
        if (
            not was_safe
            and formed_before
            and policy_before in DIAGNOSED
            and isinstance(event, Fault)
            and event.channel is None
            and event.kind in (FaultKind.DISAGREEMENT_MINORITY, FaultKind.DISAGREEMENT_UNRESOLVED)
        ):
            # A mismatch under 1oo2D/1oo3D trusts no majority and takes nobody out on the
            # vote: it only asks every voting channel for a self-test.
            acts = [i for i in out if not isinstance(i, Notify)]
            assert acts == [RequestSelfTest(c) for c in voting_before], f"{event}: {out}"
        if isinstance(event, Reset):
            if was_safe:
                self.formed = False
                self.restarts = {c: [] for c in self.cfg.channels}
            for i in out:
                if isinstance(i, SetChannelState):
                    self.restarts[i.channel] = []
        for ins in out:
            match ins:
                case SetMode(mode=m):
                    check_transition(MODE_TRANSITIONS, self.mode, m)
                    if m is Mode.SAFE and isinstance(event, SelfTestResult) and event.passed:
                        # Only a set that can never be big enough goes SAFE on good news.
                        assert ChannelState.ISOLATED in self.states.values(), (
                            f"SAFE on a pass: {out}"
                        )
                    assert m is not self.mode, "a SetMode that changes nothing"
                    if self.mode is Mode.SAFE:
                        assert isinstance(event, Reset), "SAFE left without Reset"
                    self.mode = m
                case SetChannelState(channel=c, state=s):
                    check_transition(CHANNEL_TRANSITIONS, self.states[c], s)
                    self.states[c] = s
                case SetVoting(channels=chs, policy=p):
                    if self.mode is Mode.SAFE:
                        assert chs == ()
                    else:
                        assert len(chs) == p.channels >= 1, f"{chs} cannot vote under {p}"
                        assert p in ALLOWED[self.cfg.policy]
                        self.formed = True
                    self.voting, self.policy = chs, p
                case RestartChannel(channel=c, delay=d):
                    assert 0.0 <= d <= self.cfg.backoff_max
                    self.clean[c] = False
                    if not isinstance(event, Reset):
                        self.restarts[c].append(self.now)
                case RecordReaction(frti_seconds=frti, fdti_seconds=fdti):
                    assert frti >= 0 and (fdti is None or fdti >= 0)
                case IsolateChannel(channel=c) | RequestSelfTest(channel=c):
                    assert c in self.states

    @rule(dt=st.floats(0.0, 8.0))
    def wait(self, dt: float) -> None:
        self.now += dt

    @rule(
        channel=st.sampled_from([*NAMES, None]),
        kind=st.sampled_from(list(FaultKind)),
        lag=st.floats(0.0, 0.5),
        known=st.booleans(),
    )
    def fault(self, channel: str | None, kind: FaultKind, lag: float, known: bool) -> None:
        if channel is not None and channel not in self.cfg.channels:
            return
        detected = max(0.0, self.now - lag)
        self.feed(
            Fault(
                channel=channel,
                kind=kind,
                detected_at=detected,
                now=self.now,
                occurred_at=max(0.0, detected - lag) if known else None,
            )
        )

    @rule(channel=st.sampled_from(NAMES), passed=st.booleans())
    def selftest(self, channel: str, passed: bool) -> None:
        if channel in self.cfg.channels:
            self.feed(SelfTestResult(channel, passed, self.now))

    @rule(channel=st.sampled_from(NAMES))
    def started(self, channel: str) -> None:
        if channel in self.cfg.channels:
            self.feed(ChannelStarted(channel, self.now))

    @precondition(lambda self: self.mode is Mode.SAFE or self.now > 0)
    @rule()
    def reset(self) -> None:
        self.feed(Reset(self.now))

    # -- invariants

    @invariant()
    def model_matches_controller(self) -> None:
        assert self.mode is self.ctl.mode
        assert self.states == {c: self.ctl.channel_state(c) for c in self.cfg.channels}
        assert self.voting == self.ctl.voting

    @invariant()
    def only_clean_up_channels_vote(self) -> None:
        for c in self.voting:
            assert self.states[c] is ChannelState.UP, f"{c} votes while {self.states[c]}"
            assert self.clean[c], f"{c} votes without a passed self-test since its last fault"

    @invariant()
    def voting_set_is_big_enough_unless_safe(self) -> None:
        if self.mode is Mode.SAFE:
            assert self.voting == ()
            return
        if not self.formed:
            assert self.voting == () and self.mode is Mode.NORMAL
            return
        assert len(self.voting) == self.policy.channels >= 1
        if self.mode is Mode.NORMAL:
            assert self.voting == self.cfg.channels and self.policy is self.cfg.policy
        else:
            assert self.policy is not self.cfg.policy

    @invariant()
    def restart_budget_holds(self) -> None:
        for times in self.restarts.values():
            recent = [t for t in times if t > self.now - self.cfg.restart_window]
            assert len(recent) <= self.cfg.max_restarts


ControllerMachine.TestCase.settings = settings(
    max_examples=300,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestControllerMachine = ControllerMachine.TestCase
