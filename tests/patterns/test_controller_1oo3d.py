"""The safe-state controller under 1oo3D, the HFT 2 policy: a mismatch self-tests all three
channels and isolates what fails (never a channel for being outvoted); the survivors degrade
to 1oo2D, then 1oo1D, then SAFE, by the 1oo2D rules."""

from __future__ import annotations

import pytest

from safemon.patterns.controller import (
    ChannelStarted,
    ControllerConfig,
    FaultKind,
    IsolateChannel,
    RecordReaction,
    RequestSelfTest,
    Reset,
    RestartChannel,
    SelfTestResult,
    SetChannelState,
    SetMode,
    SetVoting,
    effective_policy,
)
from safemon.states import ChannelState, Mode, Policy

from .test_controller import NAMES, assert_safe, fault, make, of, states

P = Policy.ONE_OO_THREE_D
UP, ISOLATED = ChannelState.UP, ChannelState.ISOLATED


@pytest.mark.parametrize(
    ("n_up", "expected"),
    [(3, P), (2, Policy.ONE_OO_TWO_D), (1, Policy.ONE_OO_ONE_D), (0, None)],
)
def test_1oo3d_degrades_to_1oo2d_then_1oo1d_then_safe(n_up: int, expected: Policy | None) -> None:
    assert effective_policy(ControllerConfig(NAMES[3], P), n_up) is expected


@pytest.mark.parametrize("kind", [FaultKind.DISAGREEMENT_UNRESOLVED, FaultKind.DISAGREEMENT_MINORITY])
def test_a_mismatch_self_tests_all_three_and_keeps_them_voting(kind: FaultKind) -> None:
    ctl = make(P)
    out = ctl.handle(fault(None, kind, 1.0))
    assert out == [RequestSelfTest("a"), RequestSelfTest("b"), RequestSelfTest("c")]
    assert ctl.voting == ("a", "b", "c") and ctl.policy is P and ctl.mode is Mode.NORMAL


def test_two_failing_self_tests_isolate_both_and_the_third_runs_1oo1d() -> None:
    """The double fault: b and c fail their self-tests; a is left, degraded to 1oo1D."""
    ctl = make(P)
    ctl.handle(fault(None, FaultKind.DISAGREEMENT_UNRESOLVED, 1.0, occurred_at=0.8))
    out = ctl.handle(SelfTestResult("b", False, 1.4))
    assert of(out, IsolateChannel) == [IsolateChannel("b")]
    assert of(out, SetMode) == [SetMode(Mode.DEGRADED, "selftest_failed on b")]
    assert of(out, SetVoting) == [SetVoting(("a", "c"), Policy.ONE_OO_TWO_D)]
    assert out.index(of(out, SetMode)[0]) < out.index(of(out, SetVoting)[0])
    recs = of(out, RecordReaction)
    assert RecordReaction(FaultKind.DISAGREEMENT_UNRESOLVED, pytest.approx(0.2), pytest.approx(0.4)) in recs  # type: ignore[arg-type]
    out = ctl.handle(SelfTestResult("c", False, 1.5))
    assert of(out, IsolateChannel) == [IsolateChannel("c")]
    assert of(out, SetVoting) == [SetVoting(("a",), Policy.ONE_OO_ONE_D)]
    assert states(ctl) == {"a": UP, "b": ISOLATED, "c": ISOLATED}
    assert ctl.handle(SelfTestResult("a", True, 1.6)) == []
    assert_safe(ctl, ctl.handle(SelfTestResult("a", False, 2.0)))


def test_all_three_pass_changes_nothing_and_counts_the_unexplained_mismatch() -> None:
    ctl = make(P)
    ctl.handle(fault(None, FaultKind.DISAGREEMENT_UNRESOLVED, 1.0))
    for c in ("a", "b"):
        assert ctl.handle(SelfTestResult(c, True, 1.2)) == []
    assert ctl.unexplained_mismatches == 0
    ctl.handle(SelfTestResult("c", True, 1.3))
    assert ctl.unexplained_mismatches == 1
    assert ctl.voting == ("a", "b", "c") and ctl.mode is Mode.NORMAL


@pytest.mark.parametrize(
    "kind",
    [FaultKind.CRASH, FaultKind.DEADLINE_MISS, FaultKind.CHANNEL_ERROR, FaultKind.HEARTBEAT_LOST],
)
def test_a_named_channel_fault_isolates_it_without_restart(kind: FaultKind) -> None:
    ctl = make(P)
    out = ctl.handle(fault("c", kind, 2.0, detected_at=1.5))
    assert of(out, IsolateChannel) == [IsolateChannel("c")]
    assert not of(out, RestartChannel)
    assert of(out, SetChannelState) == [SetChannelState("c", ISOLATED, f"{kind.value} on c under 1oo3D")]
    assert ctl.voting == ("a", "b") and ctl.policy is Policy.ONE_OO_TWO_D
    assert of(out, RecordReaction) == [RecordReaction(kind, None, 0.5)]


def test_after_degrading_a_mismatch_follows_the_1oo2d_diagnosis() -> None:
    ctl = make(P)
    ctl.handle(fault("a", FaultKind.CRASH, 1.0))
    out = ctl.handle(fault(None, FaultKind.DISAGREEMENT_UNRESOLVED, 2.0))
    assert out == [RequestSelfTest("b"), RequestSelfTest("c")]


def test_with_isolation_disabled_a_faulty_channel_goes_safe() -> None:
    ctl = make(P, isolate=False)
    assert_safe(ctl, ctl.handle(fault("b", FaultKind.SELFTEST_FAILED, 1.0)))


def test_an_operator_reset_readmits_the_isolated_channels_to_1oo3d() -> None:
    ctl = make(P)
    ctl.handle(fault("b", FaultKind.CRASH, 1.0))
    ctl.handle(fault("c", FaultKind.CRASH, 1.1))
    assert ctl.policy is Policy.ONE_OO_ONE_D
    ctl.handle(Reset(2.0))
    for t, c in ((2.1, "b"), (2.3, "c")):
        ctl.handle(ChannelStarted(c, t))
        out = ctl.handle(SelfTestResult(c, True, t + 0.1))
    assert of(out, SetVoting) == [SetVoting(("a", "b", "c"), P)]
    assert ctl.mode is Mode.NORMAL
