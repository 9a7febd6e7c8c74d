"""The safe-state controller: every policy's reaction table, backoff, budget, latching, reset."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

import pytest

from safemon.errors import ConfigError, InvalidInputError
from safemon.patterns.controller import (
    ChannelStarted,
    ControllerConfig,
    ControllerInstruction,
    Fault,
    FaultKind,
    IsolateChannel,
    Notify,
    RecordReaction,
    RequestSelfTest,
    Reset,
    RestartChannel,
    RunHook,
    SafeStateController,
    SelfTestResult,
    SetChannelState,
    SetMode,
    SetVoting,
    backoff_delay,
    effective_policy,
)
from safemon.states import ChannelState, Mode, Policy

T = TypeVar("T")
UP, STARTING, ISOLATED = ChannelState.UP, ChannelState.STARTING, ChannelState.ISOLATED
QUARANTINED, RESTARTING = ChannelState.QUARANTINED, ChannelState.RESTARTING
NAMES = {1: ("a",), 2: ("a", "b"), 3: ("a", "b", "c")}


def make(policy: Policy, **kw: Any) -> SafeStateController:
    """A controller whose channels all passed their first self-test at t=0 (set formed)."""
    kw.setdefault("notify", False)  # most tests look at actions; notify has its own tests
    ctl = SafeStateController(
        ControllerConfig(channels=NAMES[policy.channels], policy=policy, **kw)
    )
    for c in ctl.config.channels:
        assert ctl.handle(ChannelStarted(c, 0.0)) == [RequestSelfTest(c)]
        ctl.handle(SelfTestResult(c, True, 0.0))
    assert ctl.formed and ctl.mode is Mode.NORMAL
    return ctl


def of(out: Sequence[ControllerInstruction], cls: type[T]) -> list[T]:
    return [i for i in out if isinstance(i, cls)]


def fault(
    c: str | None,
    kind: FaultKind,
    now: float,
    detected_at: float | None = None,
    occurred_at: float | None = None,
) -> Fault:
    return Fault(
        channel=c,
        kind=kind,
        now=now,
        detected_at=now if detected_at is None else detected_at,
        occurred_at=occurred_at,
    )


def view(ctl: SafeStateController) -> tuple[Mode, tuple[str, ...], Policy]:
    """(mode, voting, policy) read afresh (keeps mypy from narrowing properties across calls)."""
    return ctl.mode, ctl.voting, ctl.policy


def states(ctl: SafeStateController) -> dict[str, ChannelState]:
    return {c: ctl.channel_state(c) for c in ctl.config.channels}


def assert_safe(ctl: SafeStateController, out: Sequence[ControllerInstruction]) -> None:
    """SAFE entered in this output: mode first, then the empty voting set."""
    assert ctl.mode is Mode.SAFE and ctl.voting == ()
    kinds = [type(i) for i in out if isinstance(i, SetMode | SetVoting)]
    assert kinds[-2:] == [SetMode, SetVoting]
    assert of(out, SetMode)[-1].mode is Mode.SAFE and of(out, SetVoting)[-1].channels == ()


# ------------------------------------------------------------------ config and pure rules


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"channels": ("a",)}, "needs 3 channel"),
        ({"channels": ("a", "a", "b")}, "unique"),
        ({"channels": "abc"}, "sequence of names"),
        ({"channels": ("a", "", "c")}, "non-empty"),
        ({"policy": "2oo3"}, "must be a Policy"),
        ({"degraded_policy": Policy.ONE_OO_ONE_D}, "degraded_policy"),
        ({"max_restarts": -1}, "max_restarts"),
        ({"max_restarts": 1.5}, "max_restarts"),
        ({"restart_window": 0}, "restart_window"),
        ({"backoff_initial": -1.0}, "backoff_initial"),
        ({"backoff_factor": 0.5}, "backoff_factor"),
        ({"backoff_max": 0.1}, "backoff_max"),
        ({"isolate": 1}, "isolate must be a bool"),
    ],
)
def test_config_rejects_bad_fields(kwargs: dict[str, Any], fragment: str) -> None:
    """Each bad field raises ConfigError naming it."""
    base: dict[str, Any] = {"channels": ("a", "b", "c"), "policy": Policy.TWO_OO_THREE}
    base.update(kwargs)
    with pytest.raises(ConfigError, match=fragment):
        ControllerConfig(**base)


def test_backoff_sequence_is_exponential_and_capped() -> None:
    """Delays: initial * factor**n, never above backoff_max, even for huge n."""
    cfg = ControllerConfig(
        ("a", "b", "c"),
        Policy.TWO_OO_THREE,
        backoff_initial=0.5,
        backoff_factor=2.0,
        backoff_max=5.0,
    )
    assert [backoff_delay(cfg, n) for n in range(6)] == [0.5, 1.0, 2.0, 4.0, 5.0, 5.0]
    assert backoff_delay(cfg, 10_000) == 5.0
    flat = ControllerConfig(("a",), Policy.ONE_OO_ONE_D, backoff_initial=1.0, backoff_factor=1.0)
    assert backoff_delay(flat, 50) == 1.0
    with pytest.raises(InvalidInputError):
        backoff_delay(cfg, -1)


@pytest.mark.parametrize(
    ("policy", "degraded", "n_up", "expected"),
    [
        (Policy.ONE_OO_ONE_D, Policy.TWO_OO_TWO, 1, Policy.ONE_OO_ONE_D),
        (Policy.ONE_OO_ONE_D, Policy.TWO_OO_TWO, 0, None),
        (Policy.TWO_OO_TWO, Policy.TWO_OO_TWO, 2, Policy.TWO_OO_TWO),
        (Policy.TWO_OO_TWO, Policy.TWO_OO_TWO, 1, None),
        (Policy.ONE_OO_TWO_D, Policy.TWO_OO_TWO, 2, Policy.ONE_OO_TWO_D),
        (Policy.ONE_OO_TWO_D, Policy.TWO_OO_TWO, 1, Policy.ONE_OO_ONE_D),
        (Policy.TWO_OO_THREE, Policy.TWO_OO_TWO, 3, Policy.TWO_OO_THREE),
        (Policy.TWO_OO_THREE, Policy.TWO_OO_TWO, 2, Policy.TWO_OO_TWO),
        (Policy.TWO_OO_THREE, Policy.ONE_OO_TWO_D, 2, Policy.ONE_OO_TWO_D),
        (Policy.TWO_OO_THREE, Policy.TWO_OO_TWO, 1, None),
        (Policy.TWO_OO_THREE, Policy.ONE_OO_TWO_D, 1, Policy.ONE_OO_ONE_D),
        (Policy.TWO_OO_THREE, Policy.ONE_OO_TWO_D, 0, None),
    ],
)
def test_effective_policy_table(
    policy: Policy, degraded: Policy, n_up: int, expected: Policy | None
) -> None:
    """The degradation table of the module docstring, row by row."""
    cfg = ControllerConfig(NAMES[policy.channels], policy, degraded_policy=degraded)
    assert effective_policy(cfg, n_up) is expected


# ----------------------------------------------------------------------------- start-up


def test_voting_set_forms_only_after_every_channel_passed_its_self_test() -> None:
    """No SetVoting until all channels are UP; then the full set under the configured policy."""
    ctl = SafeStateController(ControllerConfig(NAMES[3], Policy.TWO_OO_THREE, notify=False))
    assert states(ctl) == dict.fromkeys(NAMES[3], STARTING) and ctl.mode is Mode.NORMAL
    assert ctl.handle(SelfTestResult("a", True, 0.0)) == [
        SetChannelState("a", UP, "passed its self-test")
    ]
    assert ctl.handle(SelfTestResult("b", True, 0.1))[1:] == []
    out = ctl.handle(SelfTestResult("c", True, 0.2))
    assert out[-1] == SetVoting(("a", "b", "c"), Policy.TWO_OO_THREE)
    assert ctl.formed and ctl.voting == ("a", "b", "c")


def test_a_channel_failing_its_first_self_test_under_2oo3_is_restarted_before_forming() -> None:
    """Start-up failure under 2oo3: restart; the set forms when it finally passes."""
    ctl = SafeStateController(ControllerConfig(NAMES[3], Policy.TWO_OO_THREE, notify=False))
    ctl.handle(SelfTestResult("a", True, 0.0))
    ctl.handle(SelfTestResult("b", True, 0.0))
    out = ctl.handle(SelfTestResult("c", False, 0.0))
    assert of(out, RestartChannel) == [RestartChannel("c", 0.5)]
    assert not of(out, SetVoting) and ctl.mode is Mode.NORMAL and not ctl.formed
    assert ctl.handle(ChannelStarted("c", 1.0)) == [
        SetChannelState("c", STARTING, "process started; must pass a self-test"),
        RequestSelfTest("c"),
    ]
    assert of(ctl.handle(SelfTestResult("c", True, 1.5)), SetVoting) == [
        SetVoting(("a", "b", "c"), Policy.TWO_OO_THREE)
    ]


def test_a_channel_failing_its_first_self_test_under_2oo2_goes_safe() -> None:
    """2oo2 cannot form without both channels: SAFE."""
    ctl = SafeStateController(ControllerConfig(NAMES[2], Policy.TWO_OO_TWO, notify=False))
    ctl.handle(SelfTestResult("a", True, 0.0))
    out = ctl.handle(SelfTestResult("b", False, 0.0))
    assert_safe(ctl, out)


# ----------------------------------------------------------------- policy reaction tables


@pytest.mark.parametrize("kind", list(FaultKind))
def test_1oo1d_any_fault_goes_safe(kind: FaultKind) -> None:
    """1oo1D: every fault kind, named or not, latches SAFE."""
    ctl = make(Policy.ONE_OO_ONE_D)
    out = ctl.handle(fault("a", kind, 1.0))
    assert_safe(ctl, out)
    assert of(out, RecordReaction) == [RecordReaction(kind, None, 0.0)]
    assert states(ctl) == {"a": UP}  # SAFE changes no channel state


@pytest.mark.parametrize("channel", [None, "a", "b"])
@pytest.mark.parametrize(
    "kind",
    [
        FaultKind.DISAGREEMENT_UNRESOLVED,
        FaultKind.CRASH,
        FaultKind.HEARTBEAT_LOST,
        FaultKind.ECC_UNCORRECTABLE,
    ],
)
def test_2oo2_mismatch_or_channel_fault_goes_safe(channel: str | None, kind: FaultKind) -> None:
    """2oo2: a mismatch or any channel's fault leaves no redundancy: SAFE."""
    ctl = make(Policy.TWO_OO_TWO)
    out = ctl.handle(fault(channel, kind, 1.0))
    assert_safe(ctl, out)
    assert not of(out, SetChannelState) and not of(out, RestartChannel)


def test_1oo2d_mismatch_self_tests_both_and_keeps_them_voting() -> None:
    """1oo2D mismatch: RequestSelfTest for both; the voting set is unchanged meanwhile."""
    ctl = make(Policy.ONE_OO_TWO_D)
    out = ctl.handle(fault(None, FaultKind.DISAGREEMENT_UNRESOLVED, 1.0))
    assert out == [RequestSelfTest("a"), RequestSelfTest("b")]
    assert ctl.voting == ("a", "b") and ctl.mode is Mode.NORMAL


def test_1oo2d_the_failing_channel_is_isolated_and_the_survivor_runs_1oo1d() -> None:
    """One self-test fails: isolate it, DEGRADED, 1oo1D on the other; both reactions recorded."""
    ctl = make(Policy.ONE_OO_TWO_D)
    ctl.handle(fault(None, FaultKind.DISAGREEMENT_UNRESOLVED, 1.0, occurred_at=0.9))
    out = ctl.handle(SelfTestResult("b", False, 1.5))
    assert of(out, SetChannelState) == [
        SetChannelState("b", ISOLATED, "selftest_failed on b under 1oo2D")
    ]
    assert of(out, IsolateChannel) == [IsolateChannel("b")]
    assert of(out, SetMode) == [SetMode(Mode.DEGRADED, "selftest_failed on b")]
    assert of(out, SetVoting) == [SetVoting(("a",), Policy.ONE_OO_ONE_D)]
    # Degrading: mode before the smaller set.
    assert out.index(of(out, SetMode)[0]) < out.index(of(out, SetVoting)[0])
    recs = of(out, RecordReaction)
    assert RecordReaction(FaultKind.DISAGREEMENT_UNRESOLVED, pytest.approx(0.1), 0.5) in recs  # type: ignore[arg-type]
    assert RecordReaction(FaultKind.SELFTEST_FAILED, None, 0.0) in recs
    # The survivor's pass changes nothing; its later failure under 1oo1D is SAFE.
    assert ctl.handle(SelfTestResult("a", True, 1.6)) == []
    assert_safe(ctl, ctl.handle(SelfTestResult("a", False, 2.0)))


def test_1oo2d_both_self_tests_fail_goes_safe() -> None:
    """Both fail: the first is isolated, the second leaves 1oo1D nothing: SAFE."""
    ctl = make(Policy.ONE_OO_TWO_D)
    ctl.handle(fault(None, FaultKind.DISAGREEMENT_UNRESOLVED, 1.0))
    ctl.handle(SelfTestResult("a", False, 1.2))
    out = ctl.handle(SelfTestResult("b", False, 1.3))
    assert_safe(ctl, out)
    assert states(ctl) == {"a": ISOLATED, "b": UP}


def test_1oo2d_both_pass_stays_and_counts_the_unexplained_mismatch() -> None:
    """Both pass: nothing changes, the mismatch is counted and announced."""
    ctl = make(Policy.ONE_OO_TWO_D, notify=True)
    ctl.handle(fault(None, FaultKind.DISAGREEMENT_UNRESOLVED, 1.0))
    assert ctl.handle(SelfTestResult("a", True, 1.2)) == []
    out = ctl.handle(SelfTestResult("b", True, 1.3))
    assert out == [
        Notify(
            "mismatch_unexplained",
            {"channels": ["a", "b"], "kind": "disagreement_unresolved", "count": 1},
        )
    ]
    assert ctl.unexplained_mismatches == 1 and ctl.voting == ("a", "b") and ctl.mode is Mode.NORMAL
    assert ctl.handle(SelfTestResult("b", True, 1.4)) == []  # no diagnosis pending any more


def test_1oo2d_a_named_channel_fault_isolates_it_at_once() -> None:
    """1oo2D, channel_error on b (e.g. the voter's ChannelFailed): isolate b, 1oo1D on a."""
    ctl = make(Policy.ONE_OO_TWO_D)
    out = ctl.handle(fault("b", FaultKind.CHANNEL_ERROR, 2.0, detected_at=1.5))
    assert of(out, IsolateChannel) == [IsolateChannel("b")]
    assert ctl.voting == ("a",) and ctl.policy is Policy.ONE_OO_ONE_D and ctl.mode is Mode.DEGRADED
    assert of(out, RecordReaction) == [RecordReaction(FaultKind.CHANNEL_ERROR, None, 0.5)]


def test_1oo2d_with_isolation_disabled_goes_safe() -> None:
    """A faulty channel that may not be isolated leaves no safe way on: SAFE."""
    ctl = make(Policy.ONE_OO_TWO_D, isolate=False)
    out = ctl.handle(fault("b", FaultKind.CRASH, 1.0))
    assert_safe(ctl, out)
    assert "isolation is disabled" in of(out, SetMode)[0].reason


def test_2oo3_minority_is_quarantined_restarted_and_the_others_vote_degraded() -> None:
    """2oo3 minority: QUARANTINED → RESTARTING with backoff; DEGRADED with two under 2oo2."""
    ctl = make(Policy.TWO_OO_THREE)
    out = ctl.handle(
        fault("b", FaultKind.DISAGREEMENT_MINORITY, 3.0, detected_at=2.75, occurred_at=2.5)
    )
    assert out == [
        SetChannelState("b", QUARANTINED, "disagreement_minority on b under 2oo3"),
        SetChannelState("b", RESTARTING, "restart in 0.5 s"),
        RestartChannel("b", 0.5),
        SetMode(Mode.DEGRADED, "disagreement_minority on b"),
        SetVoting(("a", "c"), Policy.TWO_OO_TWO),
        RecordReaction(FaultKind.DISAGREEMENT_MINORITY, 0.25, 0.25),
    ]


def test_2oo3_channel_rejoins_only_after_a_passed_self_test_then_normal() -> None:
    """The restarted channel does not vote until ChannelStarted + a passed self-test."""
    ctl = make(Policy.TWO_OO_THREE)
    ctl.handle(fault("b", FaultKind.CRASH, 1.0))
    # A pass that arrives before the new process is up is stale: ignored.
    assert ctl.handle(SelfTestResult("b", True, 1.1)) == []
    assert ctl.channel_state("b") is RESTARTING
    assert ctl.handle(ChannelStarted("b", 2.0))[-1] == RequestSelfTest("b")
    assert ctl.voting == ("a", "c")
    out = ctl.handle(SelfTestResult("b", True, 2.5))
    assert out == [
        SetChannelState("b", UP, "passed its self-test"),
        SetVoting(("a", "b", "c"), Policy.TWO_OO_THREE),
        SetMode(Mode.NORMAL, "b rejoined after a passed self-test"),
    ]


def test_2oo3_failed_rejoin_test_restarts_again_with_longer_backoff() -> None:
    """A failed rejoin self-test is another fault of that channel: restart, next delay."""
    ctl = make(Policy.TWO_OO_THREE)
    ctl.handle(fault("b", FaultKind.CRASH, 1.0))
    ctl.handle(ChannelStarted("b", 2.0))
    out = ctl.handle(SelfTestResult("b", False, 2.5))
    assert of(out, RestartChannel) == [RestartChannel("b", 1.0)]
    assert ctl.voting == ("a", "c") and not of(out, SetVoting)


@pytest.mark.parametrize("kind", [FaultKind.CRASH, FaultKind.HEARTBEAT_LOST])
def test_crash_and_heartbeat_loss_are_minority_faults_under_2oo3(kind: FaultKind) -> None:
    """Under 2oo3 a crashed or silent channel is quarantined and restarted like a minority."""
    ctl = make(Policy.TWO_OO_THREE)
    out = ctl.handle(fault("a", kind, 1.0))
    assert of(out, RestartChannel) == [RestartChannel("a", 0.5)]
    assert ctl.voting == ("b", "c") and ctl.mode is Mode.DEGRADED


def test_2oo3_unresolved_disagreement_goes_safe() -> None:
    """No majority among three: nothing to pin the fault on: SAFE."""
    ctl = make(Policy.TWO_OO_THREE)
    assert_safe(ctl, ctl.handle(fault(None, FaultKind.DISAGREEMENT_UNRESOLVED, 1.0)))


def test_2oo3_second_fault_while_degraded_to_2oo2_goes_safe() -> None:
    """Degraded policy 2oo2: its rule for a channel fault is SAFE."""
    ctl = make(Policy.TWO_OO_THREE)
    ctl.handle(fault("a", FaultKind.CRASH, 1.0))
    assert_safe(ctl, ctl.handle(fault("b", FaultKind.DEADLINE_MISS, 1.5)))


def test_2oo3_degraded_to_1oo2d_follows_the_1oo2d_rules() -> None:
    """Degraded policy 1oo2D: a mismatch self-tests both, the failing one is isolated, 1oo1D."""
    ctl = make(Policy.TWO_OO_THREE, degraded_policy=Policy.ONE_OO_TWO_D)
    ctl.handle(fault("a", FaultKind.CRASH, 1.0))
    assert ctl.policy is Policy.ONE_OO_TWO_D and ctl.voting == ("b", "c")
    assert ctl.handle(fault(None, FaultKind.DISAGREEMENT_UNRESOLVED, 1.5)) == [
        RequestSelfTest("b"),
        RequestSelfTest("c"),
    ]
    out = ctl.handle(SelfTestResult("c", False, 1.7))
    assert of(out, IsolateChannel) == [IsolateChannel("c")]
    assert view(ctl) == (Mode.DEGRADED, ("b",), Policy.ONE_OO_ONE_D)
    # a comes back: two UP again → 1oo2D, still DEGRADED (c stays isolated until reset).
    ctl.handle(ChannelStarted("a", 3.0))
    out = ctl.handle(SelfTestResult("a", True, 3.5))
    assert of(out, SetVoting) == [SetVoting(("a", "b"), Policy.ONE_OO_TWO_D)]
    assert ctl.mode is Mode.DEGRADED and not of(out, SetMode)


def test_restart_budget_within_window_then_isolation() -> None:
    """max_restarts per window: delays back off; one more fault isolates; the window forgets."""
    ctl = make(Policy.TWO_OO_THREE, max_restarts=2, restart_window=10.0)
    delays: list[float] = []
    t = 1.0
    for _ in range(2):
        delays += [r.delay for r in of(ctl.handle(fault("b", FaultKind.CRASH, t)), RestartChannel)]
        ctl.handle(ChannelStarted("b", t + 0.5))
        ctl.handle(SelfTestResult("b", True, t + 0.6))
        t += 1.0
    assert delays == [0.5, 1.0] and ctl.restart_times("b") == (1.0, 2.0)
    out = ctl.handle(fault("b", FaultKind.CRASH, t))
    assert of(out, RestartChannel) == [] and of(out, IsolateChannel) == [IsolateChannel("b")]
    assert "restart budget spent (2 restarts within 10.0 s)" in of(out, SetChannelState)[-1].reason
    assert ctl.mode is Mode.DEGRADED and ctl.voting == ("a", "c")

    # Outside the window the budget is fresh and the backoff starts over.
    ctl2 = make(Policy.TWO_OO_THREE, max_restarts=2, restart_window=10.0)
    for t in (1.0, 2.0):
        ctl2.handle(fault("b", FaultKind.CRASH, t))
        ctl2.handle(ChannelStarted("b", t + 0.5))
        ctl2.handle(SelfTestResult("b", True, t + 0.6))
    out = ctl2.handle(fault("b", FaultKind.CRASH, 11.5))
    assert of(out, RestartChannel) == [RestartChannel("b", 1.0)]  # only 2.0 is inside (1.5, 11.5]
    ctl2.handle(ChannelStarted("b", 12.0))
    ctl2.handle(SelfTestResult("b", True, 12.1))
    out = ctl2.handle(fault("b", FaultKind.CRASH, 30.0))
    assert of(out, RestartChannel) == [RestartChannel("b", 0.5)]


def test_restart_disabled_isolates_the_minority_at_once() -> None:
    """No restart action: the minority is isolated; the others vote degraded."""
    ctl = make(Policy.TWO_OO_THREE, restart=False)
    out = ctl.handle(fault("c", FaultKind.ECC_UNCORRECTABLE, 1.0))
    assert of(out, IsolateChannel) == [IsolateChannel("c")] and not of(out, RestartChannel)
    assert ctl.voting == ("a", "b") and ctl.mode is Mode.DEGRADED


def test_repeated_reports_of_one_failure_are_absorbed() -> None:
    """A fault of a channel already restarting (or isolated) changes nothing."""
    ctl = make(Policy.TWO_OO_THREE)
    ctl.handle(fault("b", FaultKind.DTI_OVERRUN, 1.0))
    assert ctl.handle(fault("b", FaultKind.SELFTEST_FAILED, 1.1)) == []
    assert ctl.handle(fault("b", FaultKind.HEARTBEAT_LOST, 1.2)) == []
    assert ctl.restart_times("b") == (1.0,)


def test_a_voting_channel_that_starts_again_is_a_crash() -> None:
    """ChannelStarted for an UP channel: it lost its state, so it is handled as a crash."""
    ctl = make(Policy.TWO_OO_THREE)
    out = ctl.handle(ChannelStarted("a", 1.0))
    assert of(out, RestartChannel) == [RestartChannel("a", 0.5)]
    assert of(out, RecordReaction) == [RecordReaction(FaultKind.CRASH, None, 0.0)]


# --------------------------------------------------------------------- latching and reset


def test_safe_is_latched_until_reset() -> None:
    """In SAFE, faults, self-tests and starts change nothing; only Reset leaves it."""
    ctl = make(Policy.TWO_OO_THREE)
    ctl.handle(fault(None, FaultKind.DISAGREEMENT_UNRESOLVED, 1.0))
    before = states(ctl)
    for ev in (
        fault("a", FaultKind.CRASH, 2.0),
        SelfTestResult("a", True, 2.1),
        SelfTestResult("b", False, 2.2),
        ChannelStarted("c", 2.3),
        fault(None, FaultKind.DISAGREEMENT_UNRESOLVED, 2.4),
    ):
        assert ctl.handle(ev) == []
    assert ctl.mode is Mode.SAFE and states(ctl) == before


def test_reset_from_safe_goes_normal_with_every_channel_starting() -> None:
    """Reset: NORMAL, all STARTING (legal paths), self-tests requested, set re-forms on passes."""
    ctl = make(Policy.TWO_OO_THREE)
    ctl.handle(fault("a", FaultKind.CRASH, 1.0))  # a RESTARTING, awaiting its start
    ctl.handle(fault("b", FaultKind.CRASH, 1.1))  # 2oo2 degraded → SAFE
    assert ctl.mode is Mode.SAFE
    out = ctl.handle(Reset(5.0))
    assert of(out, SetMode) == [SetMode(Mode.NORMAL, "operator reset")]
    assert states(ctl) == dict.fromkeys(NAMES[3], STARTING)
    r = "operator reset: must pass a self-test before voting"
    assert of(out, SetChannelState) == [
        SetChannelState("a", STARTING, r),
        SetChannelState("b", RESTARTING, r),
        SetChannelState("b", STARTING, r),
        SetChannelState("c", RESTARTING, r),
        SetChannelState("c", STARTING, r),
    ]
    # a's restart is still pending: its self-test waits for ChannelStarted.
    assert of(out, RequestSelfTest) == [RequestSelfTest("b"), RequestSelfTest("c")]
    assert not of(out, SetVoting) and not ctl.formed and ctl.restart_times("a") == ()
    ctl.handle(SelfTestResult("b", True, 5.1))
    ctl.handle(SelfTestResult("c", True, 5.1))
    assert ctl.handle(SelfTestResult("a", True, 5.2)) == []  # stale: a not started yet
    assert ctl.handle(ChannelStarted("a", 6.0)) == [RequestSelfTest("a")]
    out = ctl.handle(SelfTestResult("a", True, 6.5))
    assert of(out, SetVoting) == [SetVoting(("a", "b", "c"), Policy.TWO_OO_THREE)]


def test_reset_from_safe_restarts_isolated_channels() -> None:
    """An isolated channel is restarted on reset and tested once its process is up."""
    ctl = make(Policy.ONE_OO_TWO_D)
    ctl.handle(fault("a", FaultKind.CRASH, 1.0))
    ctl.handle(fault("b", FaultKind.CRASH, 2.0))
    assert ctl.mode is Mode.SAFE
    out = ctl.handle(Reset(3.0))
    assert of(out, RestartChannel) == [RestartChannel("a", 0.0)]
    assert of(out, RequestSelfTest) == [RequestSelfTest("b")]
    assert states(ctl) == {"a": STARTING, "b": STARTING}


def test_reset_while_degraded_readmits_isolated_channels() -> None:
    """Reset outside SAFE re-admits isolated channels; NORMAL once they pass."""
    ctl = make(Policy.ONE_OO_TWO_D)
    ctl.handle(fault("b", FaultKind.CHANNEL_ERROR, 1.0))
    out = ctl.handle(Reset(2.0))
    assert of(out, SetChannelState) == [
        SetChannelState("b", STARTING, "operator reset: re-admitted, must pass a self-test")
    ]
    assert of(out, RestartChannel) == [RestartChannel("b", 0.0)] and not of(out, SetMode)
    assert ctl.mode is Mode.DEGRADED and ctl.voting == ("a",)
    ctl.handle(ChannelStarted("b", 3.0))
    out = ctl.handle(SelfTestResult("b", True, 3.5))
    assert of(out, SetVoting) == [SetVoting(("a", "b"), Policy.ONE_OO_TWO_D)]
    assert view(ctl)[0] is Mode.NORMAL
    # The re-admitted channel's rejoin test failing isolates it again (1oo2D recovery).
    ctl2 = make(Policy.ONE_OO_TWO_D, restart=False)
    ctl2.handle(fault("b", FaultKind.CHANNEL_ERROR, 1.0))
    assert of(ctl2.handle(Reset(2.0)), RequestSelfTest) == [RequestSelfTest("b")]
    out = ctl2.handle(SelfTestResult("b", False, 2.5))
    assert of(out, IsolateChannel) == [IsolateChannel("b")] and ctl2.voting == ("a",)


# ------------------------------------------------------------------ reactions and notices


def test_reaction_records_carry_detection_and_reaction_times() -> None:
    """FDTI = detected_at - occurred_at (None if unknown); FRTI = now - detected_at."""
    ctl = make(Policy.TWO_OO_THREE)
    out = ctl.handle(
        fault("a", FaultKind.ECC_UNCORRECTABLE, 10.0, detected_at=9.5, occurred_at=9.0)
    )
    assert of(out, RecordReaction) == [RecordReaction(FaultKind.ECC_UNCORRECTABLE, 0.5, 0.5)]
    out = ctl.handle(fault("b", FaultKind.DEADLINE_MISS, 12.0, detected_at=11.0))
    assert of(out, RecordReaction) == [RecordReaction(FaultKind.DEADLINE_MISS, None, 1.0)]
    assert ctl.handle(fault("b", FaultKind.CRASH, 13.0)) == []  # absorbed in SAFE: no reaction


def test_notify_and_hook_follow_the_enabled_actions() -> None:
    """notify=True publishes faults, channel and mode changes; hook=True runs on mode changes only."""
    ctl = make(Policy.TWO_OO_THREE, notify=True, hook=True)
    out = ctl.handle(fault("a", FaultKind.CRASH, 1.0))
    notes = [n.event_type for n in of(out, Notify)]
    assert notes == ["fault", "channel", "channel", "mode"]
    assert of(out, RunHook) == [
        RunHook("mode", {"old": "NORMAL", "mode": "DEGRADED", "reason": "crash on a"})
    ]
    quiet = make(Policy.TWO_OO_THREE, notify=False, hook=False)
    out = quiet.handle(fault("a", FaultKind.CRASH, 1.0))
    assert not of(out, Notify) and not of(out, RunHook)


# ------------------------------------------------------------------------------ bad input


@pytest.mark.parametrize(
    ("event", "fragment"),
    [
        (Reset(0.5), "backwards"),
        (Reset(float("nan")), "finite"),
        (SelfTestResult("zz", True, 2.0), "unknown channel"),
        (ChannelStarted("zz", 2.0), "unknown channel"),
        (Fault(channel="zz", kind=FaultKind.CRASH, detected_at=2.0, now=2.0), "unknown channel"),
        (Fault(channel="a", kind="crash", detected_at=2.0, now=2.0), "FaultKind"),  # type: ignore[arg-type]
        (Fault(channel="a", kind=FaultKind.CRASH, detected_at=2.5, now=2.0), "detected_at"),
        (
            Fault(channel="a", kind=FaultKind.CRASH, detected_at=2.0, now=2.0, occurred_at=2.1),
            "occurred_at",
        ),
        (SelfTestResult("a", 1, 2.0), "passed must be a bool"),  # type: ignore[arg-type]
    ],
)
def test_bad_events_raise_and_leave_the_controller_unchanged(event: Any, fragment: str) -> None:
    """Malformed events raise InvalidInputError; mode, states, voting and clock are untouched."""
    ctl = make(Policy.TWO_OO_THREE)
    ctl.handle(SelfTestResult("a", True, 1.0))

    def snapshot() -> tuple[object, ...]:
        return ctl.mode, states(ctl), ctl.voting, ctl.policy

    before = snapshot()
    with pytest.raises(InvalidInputError, match=fragment):
        ctl.handle(event)
    assert snapshot() == before
    assert ctl.handle(SelfTestResult("a", True, 1.0)) == []  # the clock did not move
