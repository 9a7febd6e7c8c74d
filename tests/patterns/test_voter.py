"""Unit tests of the voter's sans-IO core: every policy and outcome, orders, time, SAFE, bad input."""

from __future__ import annotations

import itertools

import pytest

from safemon.errors import InvalidInputError
from safemon.patterns.voter import (
    OUTCOMES,
    ChannelFailed,
    ChannelResult,
    DeadlineMiss,
    Decision,
    Disagreement,
    EnterSafe,
    Fail,
    Postpone,
    Release,
    RequestSelfTest,
    Reset,
    Submit,
    Tick,
    Voter,
    agree,
)
from safemon.states import Policy

P1, P22, P12D, P23 = (
    Policy.ONE_OO_ONE_D,
    Policy.TWO_OO_TWO,
    Policy.ONE_OO_TWO_D,
    Policy.TWO_OO_THREE,
)
VOTERS = {P1: ("a",), P22: ("a", "b"), P12D: ("a", "b"), P23: ("a", "b", "c")}


def ok(
    req: int, ch: str, now: float, c: bytes = b"C", es: bytes = b"E", variant: str = "v"
) -> ChannelResult:
    return ChannelResult(req, ch, now, True, c, es, variant)


def err(req: int, ch: str, now: float, error: str = "ecc uncorrectable") -> ChannelResult:
    return ChannelResult(req, ch, now, False, b"", b"", "v", error)


def submit(policy: Policy, req: int = 1, now: float = 0.0, deadline: float = 10.0) -> Submit:
    return Submit(req, now, deadline, VOTERS[policy], policy)


def run(voter: Voter, *events: Submit | ChannelResult | Tick | EnterSafe | Reset) -> list[Decision]:
    out: list[Decision] = []
    for ev in events:
        out.extend(voter.handle(ev))
    return out


def differing(req: int, ch: str, now: float, field: str) -> ChannelResult:
    """An ok result that differs from `ok(req, ch, now)` in C or (same variant) ES only."""
    return ok(req, ch, now, c=b"X") if field == "c" else ok(req, ch, now, es=b"X")


def answers(decisions: list[Decision]) -> list[Release | Fail]:
    return [d for d in decisions if isinstance(d, Release | Fail)]


# ------------------------------------------------------------------------ agreement


def test_agree_needs_identical_c_and_for_one_variant_identical_es() -> None:
    assert agree(ok(1, "a", 0), ok(1, "b", 0))
    assert not agree(ok(1, "a", 0), ok(1, "b", 0, c=b"X"))
    assert not agree(ok(1, "a", 0), ok(1, "b", 0, es=b"X"))
    assert agree(ok(1, "a", 0, variant="v1"), ok(1, "b", 0, es=b"X", variant="v2"))
    assert not agree(ok(1, "a", 0, variant="v1"), ok(1, "b", 0, c=b"X", variant="v2"))


def test_agree_is_false_when_either_result_is_a_channel_error() -> None:
    assert not agree(ok(1, "a", 0), err(1, "b", 0))
    assert not agree(err(1, "a", 0), err(1, "b", 0))


# ---------------------------------------------------------------------------- 1oo1D


def test_1oo1d_releases_an_ok_result_at_once() -> None:
    v = Voter()
    assert run(v, submit(P1), ok(1, "a", 1.0)) == [Release(1, "a", ("a",))]
    assert v.open_requests == 0
    assert v.votes()[(P1, "released")] == 1


def test_1oo1d_channel_error_fails_with_channel_error_and_reports_the_channel() -> None:
    v = Voter()
    out = run(v, submit(P1), err(1, "a", 1.0, "bad frame"))
    assert out[0] == Fail(1, "channel_error", "a: bad frame")
    assert out[1:] == [ChannelFailed(1, "a", "bad frame")]
    assert v.votes()[(P1, "channel_error")] == 1


def test_1oo1d_silent_channel_times_out_on_the_deadline_tick() -> None:
    v = Voter()
    assert run(v, submit(P1), Tick(9.999)) == []
    out = v.handle(Tick(10.0))
    assert [type(d) for d in out] == [Fail, DeadlineMiss]
    assert isinstance(out[0], Fail) and out[0].error == "timeout"
    assert out[1] == DeadlineMiss(1, "a")
    assert v.open_requests == 0


def test_postpone_moves_open_deadlines_after_since_before_the_catch_up() -> None:
    """The shell read nothing for 3 s after t=9.5: request 1 (deadline 10) is judged at 13,
    so results read at 12.9, stamped past the old deadline, count; request 2, whose deadline
    9 fell before `since`, is a miss as before; a request submitted later is not moved."""
    v = Voter()
    run(v, submit(P23, 1, 0.0, 10.0), submit(P23, 2, 0.0, 9.0), Tick(1.0))
    assert v.handle(Postpone(9.5, 3.0, 12.5, 10.0)) == []
    assert v.now == 1.0  # a Postpone moves no clock: an event stamped before 12.5 may follow
    out = v.handle(Tick(12.5))
    assert [type(d) for d in out] == [Fail, DeadlineMiss, DeadlineMiss, DeadlineMiss]
    assert isinstance(out[0], Fail) and out[0].req_id == 2
    assert v.next_deadline() == 13.0
    out = run(v, ok(1, "a", 12.9), ok(1, "b", 12.9), submit(P23, 3, 12.9, 13.5))
    assert answers(out) == [Release(1, "a", ("a", "b"))]
    out = v.handle(Tick(13.0))
    assert out == [DeadlineMiss(1, "c")]
    assert v.next_deadline() == 13.5
    for bad in ((13.0, 0.6, 13.5, 1.0), (13.0, 0.1, 13.5, -1.0)):
        with pytest.raises(InvalidInputError, match="postpone"):
            Postpone(*bad)


def test_postpone_moves_no_deadline_more_than_its_limit_in_all() -> None:
    """A shell away nearly all the time still judges a silent channel: request 1 (deadline
    10) moves by at most the limit of 2 s over three postponements, and times out at 12."""
    v = Voter()
    run(v, submit(P1, 1, 0.0, 10.0))
    assert v.handle(Postpone(9.0, 1.5, 10.5, 2.0)) == []
    assert v.handle(Postpone(10.5, 0.4, 11.0, 2.0)) == []
    assert v.next_deadline() == pytest.approx(11.9)
    assert v.handle(Postpone(11.0, 0.8, 11.9, 2.0)) == []  # only 0.1 s of it is left
    assert v.next_deadline() == pytest.approx(12.0)
    out = v.handle(Tick(12.0))
    assert isinstance(out[0], Fail) and out[0].error == "timeout"
    assert "10 s (and 2 s in which the shell read nothing)" in out[0].detail
    assert out[1:] == [DeadlineMiss(1, "a")]


# ----------------------------------------------------------------- 2oo2 and 1oo2D


@pytest.mark.parametrize("policy", [P22, P12D])
@pytest.mark.parametrize("order", [("a", "b"), ("b", "a")])
def test_two_channel_policies_release_only_when_both_agree(
    policy: Policy, order: tuple[str, str]
) -> None:
    v = Voter()
    v.handle(submit(policy))
    assert v.handle(ok(1, order[0], 1.0)) == []
    out = v.handle(ok(1, order[1], 2.0))
    assert out == [Release(1, "a", ("a", "b"))]
    assert v.open_requests == 0


@pytest.mark.parametrize("order", [("a", "b"), ("b", "a")])
@pytest.mark.parametrize("field", ["c", "es"])
def test_2oo2_mismatch_fails_and_names_both_channels(order: tuple[str, str], field: str) -> None:
    v = Voter()
    results = {"a": ok(1, "a", 1.0), "b": differing(1, "b", 1.0, field)}
    out = run(v, submit(P22), *(results[ch] for ch in order))
    assert [type(d) for d in out] == [Fail, Disagreement]
    assert isinstance(out[0], Fail) and out[0].error == "disagreement"
    assert out[1] == Disagreement(1, P22, minority=("a", "b"), majority=())
    assert v.votes()[(P22, "disagreement")] == 1


@pytest.mark.parametrize("order", [("a", "b"), ("b", "a")])
def test_1oo2d_mismatch_fails_and_requests_a_self_test_of_both(order: tuple[str, str]) -> None:
    v = Voter()
    results = {"a": ok(1, "a", 1.0), "b": ok(1, "b", 1.0, c=b"X")}
    out = run(v, submit(P12D), *(results[ch] for ch in order))
    assert out[1:] == [
        Disagreement(1, P12D, minority=("a", "b"), majority=()),
        RequestSelfTest(("a", "b")),
    ]
    assert isinstance(out[0], Fail) and out[0].error == "disagreement"


@pytest.mark.parametrize("policy", [P22, P12D])
def test_diverse_channels_compare_c_only(policy: Policy) -> None:
    v = Voter()
    out = run(
        v,
        submit(policy),
        ok(1, "a", 1.0, es=b"E1", variant="tile64"),
        ok(1, "b", 1.0, es=b"E2", variant="tile128"),
    )
    assert out == [Release(1, "a", ("a", "b"))]
    out = run(
        v,
        submit(policy, req=2, now=1.0),
        ok(2, "a", 2.0, c=b"C1", variant="tile64"),
        ok(2, "b", 2.0, c=b"C2", variant="tile128"),
    )
    assert isinstance(out[0], Fail) and out[0].error == "disagreement"


@pytest.mark.parametrize("policy", [P22, P12D])
def test_two_channel_error_fails_at_once_and_never_releases_the_survivor(policy: Policy) -> None:
    v = Voter()
    out = run(v, submit(policy), err(1, "b", 1.0, "ecc"))
    assert out == [Fail(1, "channel_error", "b: ecc"), ChannelFailed(1, "b", "ecc")]
    assert v.open_requests == 1  # still open, to judge channel a
    assert v.handle(ok(1, "a", 2.0)) == []
    assert v.open_requests == 0


@pytest.mark.parametrize("policy", [P22, P12D])
def test_two_channel_missing_result_times_out(policy: Policy) -> None:
    v = Voter()
    out = run(v, submit(policy), ok(1, "a", 1.0), Tick(10.0))
    assert [type(d) for d in out] == [Fail, DeadlineMiss]
    assert isinstance(out[0], Fail) and out[0].error == "timeout"
    assert out[1] == DeadlineMiss(1, "b")
    assert v.votes()[(policy, "timeout")] == 1


# ----------------------------------------------------------------------------- 2oo3


def _three(results: dict[str, ChannelResult], order: tuple[str, ...]) -> list[list[Decision]]:
    """Submit a 2oo3 request and feed its results in `order`; the decisions after each."""
    v = Voter()
    v.handle(submit(P23))
    steps = [v.handle(results[ch]) for ch in order]
    steps.append(v.handle(Tick(10.0)))
    assert v.open_requests == 0
    return steps


@pytest.mark.parametrize("order", list(itertools.permutations("abc")))
def test_2oo3_all_agree_releases_on_the_second_result_and_finds_nothing(
    order: tuple[str, ...],
) -> None:
    results = {ch: ok(1, ch, 1.0) for ch in "abc"}
    steps = _three(results, order)
    assert steps[0] == []
    assert len(steps[1]) == 1 and isinstance(steps[1][0], Release)
    assert set(steps[1][0].agreed) == set(order[:2])
    assert steps[2] == [] and steps[3] == []


@pytest.mark.parametrize("odd", "abc")
@pytest.mark.parametrize("order", list(itertools.permutations("abc")))
@pytest.mark.parametrize("field", ["c", "es"])
def test_2oo3_one_differs_releases_the_majority_and_names_the_minority(
    odd: str, order: tuple[str, ...], field: str
) -> None:
    results = {ch: differing(1, ch, 1.0, field) if ch == odd else ok(1, ch, 1.0) for ch in "abc"}
    steps = _three(results, order)
    decisions = [d for step in steps for d in step]
    (answer,) = answers(decisions)
    assert isinstance(answer, Release)
    assert answer.channel != odd and odd not in answer.agreed
    # Released as soon as the two good results were in, not later.
    good_done = max(order.index(ch) for ch in "abc" if ch != odd)
    assert answer in steps[good_done]
    majority = tuple(ch for ch in "abc" if ch != odd)
    assert Disagreement(1, P23, minority=(odd,), majority=majority) in steps[2]
    assert not any(isinstance(d, RequestSelfTest) for d in decisions)


@pytest.mark.parametrize("order", list(itertools.permutations("abc")))
def test_2oo3_all_differ_fails_after_the_third_result(order: tuple[str, ...]) -> None:
    results = {ch: ok(1, ch, 1.0, c=ch.encode()) for ch in "abc"}
    steps = _three(results, order)
    assert steps[0] == [] and steps[1] == []
    assert isinstance(steps[2][0], Fail) and steps[2][0].error == "disagreement"
    assert steps[2][1:] == [Disagreement(1, P23, minority=("a", "b", "c"), majority=())]


@pytest.mark.parametrize("bad", "abc")
@pytest.mark.parametrize("order", list(itertools.permutations("abc")))
def test_2oo3_one_channel_error_still_releases_the_agreeing_pair(
    bad: str, order: tuple[str, ...]
) -> None:
    results = {ch: err(1, ch, 1.0) if ch == bad else ok(1, ch, 1.0) for ch in "abc"}
    decisions = [d for step in _three(results, order) for d in step]
    (answer,) = answers(decisions)
    assert isinstance(answer, Release) and answer.channel != bad
    assert ChannelFailed(1, bad, "ecc uncorrectable") in decisions
    assert not any(isinstance(d, Disagreement) for d in decisions)


@pytest.mark.parametrize("good", "abc")
@pytest.mark.parametrize("order", list(itertools.permutations("abc")))
def test_2oo3_two_channel_errors_fail_as_soon_as_no_pair_is_possible(
    good: str, order: tuple[str, ...]
) -> None:
    results = {ch: ok(1, ch, 1.0) if ch == good else err(1, ch, 1.0) for ch in "abc"}
    steps = _three(results, order)
    second_error = max(order.index(ch) for ch in "abc" if ch != good)
    (answer,) = answers([d for step in steps for d in step])
    assert answer == steps[second_error][0]
    assert isinstance(answer, Fail) and answer.error == "channel_error"


@pytest.mark.parametrize("order", list(itertools.permutations("abc")))
def test_2oo3_ok_pair_that_differs_beside_a_channel_error_is_a_disagreement(
    order: tuple[str, ...],
) -> None:
    results = {"a": ok(1, "a", 1.0), "b": ok(1, "b", 1.0, c=b"X"), "c": err(1, "c", 1.0)}
    decisions = [d for step in _three(results, order) for d in step]
    (answer,) = answers(decisions)
    assert isinstance(answer, Fail) and answer.error == "disagreement"
    assert Disagreement(1, P23, minority=("a", "b"), majority=()) in decisions


@pytest.mark.parametrize("order", list(itertools.permutations("abc")))
def test_2oo3_diverse_non_transitive_agreement_releases_and_suspects_the_same_variant_pair(
    order: tuple[str, ...],
) -> None:
    # a and c share a variant and differ in ES; b, of another variant, agrees with both on C.
    results = {
        "a": ok(1, "a", 1.0, es=b"E1", variant="v1"),
        "b": ok(1, "b", 1.0, es=b"E9", variant="v2"),
        "c": ok(1, "c", 1.0, es=b"E2", variant="v1"),
    }
    decisions = [d for step in _three(results, order) for d in step]
    (answer,) = answers(decisions)
    assert isinstance(answer, Release)
    assert Disagreement(1, P23, minority=("a", "c"), majority=("b",)) in decisions


def test_2oo3_early_release_then_silent_third_is_a_deadline_miss_only() -> None:
    v = Voter()
    out = run(v, submit(P23), ok(1, "a", 1.0), ok(1, "c", 2.0))
    assert out == [Release(1, "a", ("a", "c"))]
    assert v.open_requests == 1 and v.unanswered == 0
    assert v.handle(Tick(10.0)) == [DeadlineMiss(1, "b")]
    assert v.open_requests == 0


def test_2oo3_differing_pair_with_a_silent_third_fails_as_a_disagreement_at_the_deadline() -> None:
    v = Voter()
    assert run(v, submit(P23), ok(1, "a", 1.0), ok(1, "b", 1.0, c=b"X")) == []
    out = v.handle(Tick(10.0))
    assert isinstance(out[0], Fail) and out[0].error == "disagreement"
    assert out[1:] == [
        DeadlineMiss(1, "c"),
        Disagreement(1, P23, minority=("a", "b"), majority=()),
    ]


def test_2oo3_one_result_and_one_error_by_the_deadline_is_a_timeout() -> None:
    v = Voter()
    out = run(v, submit(P23), ok(1, "a", 1.0), err(1, "b", 1.0), Tick(11.0))
    fail = answers(out)
    assert len(fail) == 1 and isinstance(fail[0], Fail) and fail[0].error == "timeout"
    assert DeadlineMiss(1, "c") in out


# --------------------------------------------------------------------- time rules


def test_a_result_stamped_at_the_deadline_is_late_and_the_request_times_out_first() -> None:
    v = Voter()
    v.handle(submit(P1))
    out = v.handle(ok(1, "a", 10.0))
    assert [type(d) for d in out] == [Fail, DeadlineMiss]
    assert v.late_results == 1
    assert v.votes()[(P1, "released")] == 0


def test_any_event_advances_time_and_expires_older_requests() -> None:
    v = Voter()
    v.handle(submit(P1, req=1, now=0.0, deadline=1.0))
    out = v.handle(submit(P1, req=2, now=5.0, deadline=9.0))
    assert answers(out) == [Fail(1, "timeout", "a sent no result within 1 s")]
    assert v.open_requests == 1


def test_requests_expire_in_deadline_order() -> None:
    v = Voter()
    run(v, submit(P1, req=1, deadline=5.0), submit(P1, req=2, deadline=3.0))
    out = v.handle(Tick(6.0))
    assert [d.req_id for d in answers(out)] == [2, 1]


def test_next_deadline_tracks_the_earliest_open_request() -> None:
    v = Voter()
    assert v.next_deadline() is None
    run(v, submit(P1, req=1, deadline=5.0), submit(P1, req=2, deadline=3.0))
    assert v.next_deadline() == 3.0
    v.handle(ok(2, "a", 1.0))  # closes request 2 early
    assert v.next_deadline() == 5.0
    v.handle(Tick(5.0))
    assert v.next_deadline() is None


def test_time_going_backwards_raises_and_changes_nothing() -> None:
    v = Voter()
    run(v, submit(P1), Tick(4.0))
    with pytest.raises(InvalidInputError, match="backwards"):
        v.handle(ok(1, "a", 3.0))
    assert v.now == 4.0 and v.open_requests == 1 and v.unanswered == 1


# ----------------------------------------------------------------------------- SAFE


def test_enter_safe_fails_every_pending_request_and_closes_the_judging_ones() -> None:
    v = Voter()
    run(v, submit(P23, req=1), ok(1, "a", 1.0), ok(1, "b", 1.0))  # released, still judging
    run(v, submit(P22, req=2, now=1.0), ok(2, "a", 1.0))
    run(v, submit(P1, req=3, now=1.0))
    out = v.handle(EnterSafe(2.0))
    assert [(type(d), d.req_id, d.error) for d in out if isinstance(d, Fail)] == [
        (Fail, 2, "safe_state"),
        (Fail, 3, "safe_state"),
    ]
    assert len(out) == 2
    assert v.safe and v.open_requests == 0
    assert run(v, ok(1, "c", 3.0), ok(2, "b", 3.0), ok(3, "a", 3.0)) == []
    assert v.late_results == 3


def test_no_release_in_safe_until_reset_then_voting_resumes() -> None:
    v = Voter()
    v.handle(EnterSafe(0.0))
    out = run(v, submit(P1, req=1, now=1.0), ok(1, "a", 2.0))
    assert out == [Fail(1, "safe_state", "the system is in the SAFE state")]
    assert v.late_results == 1 and v.open_requests == 0
    assert v.votes()[(P1, "safe_state")] == 1
    assert v.handle(EnterSafe(2.5)) == []  # already SAFE: nothing changes
    v.handle(Reset(3.0))
    assert not v.safe
    assert run(v, submit(P1, req=2, now=3.0, deadline=9.0), ok(2, "a", 4.0)) == [
        Release(2, "a", ("a",))
    ]


def test_reset_outside_safe_changes_nothing() -> None:
    v = Voter()
    run(v, submit(P1))
    assert v.handle(Reset(1.0)) == []
    assert v.open_requests == 1 and not v.safe


# ------------------------------------------------- duplicate, late, unknown, stray


def test_duplicate_result_is_ignored_and_counted_and_the_first_one_counts() -> None:
    v = Voter()
    run(v, submit(P22), ok(1, "a", 1.0, c=b"X"))
    assert v.handle(ok(1, "a", 1.5)) == []
    assert v.duplicate_results == 1
    out = v.handle(ok(1, "b", 2.0))
    assert isinstance(out[0], Fail) and out[0].error == "disagreement"


def test_late_unknown_and_stray_results_are_counted_and_never_released() -> None:
    v = Voter()
    run(v, submit(P22), ok(1, "a", 1.0))
    assert v.handle(ok(1, "z", 1.0)) == []  # not a voter of request 1
    assert v.stray_results == 1
    assert v.handle(ok(42, "a", 1.0)) == []
    assert v.unknown_results == 1
    run(v, ok(1, "b", 2.0))
    assert v.handle(ok(1, "b", 3.0)) == []
    assert v.late_results == 1
    assert v.votes()[(P22, "released")] == 1


def test_forgotten_request_ids_count_as_unknown_and_may_be_reused() -> None:
    v = Voter(remember_closed=1)
    run(v, submit(P1, req=1, deadline=5.0), ok(1, "a", 1.0))
    run(v, submit(P1, req=2, now=1.0, deadline=2.0), ok(2, "a", 1.5))
    assert v.handle(ok(1, "a", 1.6)) == []
    assert v.unknown_results == 1 and v.late_results == 0
    # Reusing id 1: the stale deadline (5.0) of its first life must not expire it.
    v.handle(submit(P1, req=1, now=2.0, deadline=20.0))
    assert v.handle(Tick(6.0)) == []
    assert v.open_requests == 1
    assert v.handle(ok(1, "a", 7.0)) == [Release(1, "a", ("a",))]


# ------------------------------------------------------------------------ bad input


def test_resubmitting_an_open_or_remembered_id_raises() -> None:
    v = Voter()
    v.handle(submit(P1, req=1))
    with pytest.raises(InvalidInputError, match="already submitted"):
        v.handle(submit(P1, req=1))
    v.handle(ok(1, "a", 1.0))
    with pytest.raises(InvalidInputError, match="already submitted"):
        v.handle(submit(P1, req=1, now=1.0))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"voters": ("a", "b")}, "needs 1 voter"),
        ({"voters": ("a", "a"), "policy": P22}, "duplicate voters"),
        ({"voters": ["a"]}, "tuple"),
        ({"voters": ("",)}, "non-empty"),
        ({"deadline": 0.0}, "not after now"),
        ({"now": float("nan")}, "finite"),
        ({"deadline": float("inf")}, "finite"),
        ({"req_id": True}, "int"),
        ({"req_id": "1"}, "int"),
        ({"policy": "2oo3"}, "Policy"),
    ],
)
def test_malformed_submit_raises(kwargs: dict[str, object], match: str) -> None:
    fields: dict[str, object] = {
        "req_id": 1,
        "now": 0.0,
        "deadline": 1.0,
        "voters": ("a",),
        "policy": P1,
    }
    fields.update(kwargs)
    with pytest.raises(InvalidInputError, match=match):
        Submit(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ((1, "a", 0.0, True, b"C", b"E", "v", "boom"), "ok=True with error"),
        ((1, "a", 0.0, True, b"", b"E", "v", None), "empty c_digest"),
        ((1, "a", 0.0, False, b"", b"", "v", None), "needs an error"),
        ((1, "a", 0.0, False, b"", b"", "v", ""), "needs an error"),
        ((1, "a", 0.0, True, "C", b"E", "v", None), "bytes"),
        ((1, "", 0.0, True, b"C", b"E", "v", None), "channel"),
        ((1, "a", 0.0, 1, b"C", b"E", "v", None), "bool"),
        ((1, "a", float("nan"), True, b"C", b"E", "v", None), "finite"),
    ],
)
def test_malformed_channel_result_raises(args: tuple[object, ...], match: str) -> None:
    with pytest.raises(InvalidInputError, match=match):
        ChannelResult(*args)  # type: ignore[arg-type]


def test_non_events_and_bad_settings_raise() -> None:
    with pytest.raises(TypeError):
        Voter().handle("tick")  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError):
        Voter(remember_closed=-1)
    with pytest.raises(InvalidInputError):
        Tick(float("inf"))


# ------------------------------------------------------------------------- counters


def test_vote_counts_cover_every_policy_and_outcome_and_only_count_answers() -> None:
    v = Voter()
    counts = v.votes()
    assert set(counts) == {(p, o) for p in Policy for o in OUTCOMES}
    assert sum(counts.values()) == 0
    run(v, submit(P23), ok(1, "a", 1.0), ok(1, "b", 1.0), ok(1, "c", 1.0, c=b"X"))
    run(v, submit(P22, req=2, now=1.0), ok(2, "a", 1.0), Tick(10.0))
    counts = v.votes()
    assert counts[(P23, "released")] == 1
    assert counts[(P22, "timeout")] == 1
    assert sum(counts.values()) == 2
