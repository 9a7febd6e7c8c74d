"""Unit tests of the voter under 1oo3D, the HFT 2 policy: release only on the agreement of
all three channels; any mismatch fails the request and asks for a self-test of every
channel that answered, without trusting the two that agree."""

from __future__ import annotations

import itertools

import pytest

from safemon.patterns.voter import (
    ChannelFailed,
    ChannelResult,
    DeadlineMiss,
    Decision,
    Disagreement,
    Fail,
    Release,
    RequestSelfTest,
    Submit,
    Tick,
    Voter,
)
from safemon.states import Policy

P = Policy.ONE_OO_THREE_D
VOTERS = ("a", "b", "c")
ORDERS = list(itertools.permutations(VOTERS))


def ok(ch: str, now: float, c: bytes = b"C", es: bytes = b"E", variant: str = "v") -> ChannelResult:
    return ChannelResult(1, ch, now, True, c, es, variant)


def run(*results: ChannelResult, deadline: float = 10.0) -> tuple[Voter, list[Decision]]:
    v = Voter()
    out = v.handle(Submit(1, 0.0, deadline, VOTERS, P))
    for r in results:
        out += v.handle(r)
    return v, out


def releases(out: list[Decision]) -> list[Release]:
    return [d for d in out if isinstance(d, Release)]


@pytest.mark.parametrize("order", ORDERS)
def test_releases_only_on_the_third_agreeing_result(order: tuple[str, ...]) -> None:
    v = Voter()
    v.handle(Submit(1, 0.0, 10.0, VOTERS, P))
    assert v.handle(ok(order[0], 1.0)) == []
    assert v.handle(ok(order[1], 2.0)) == []
    assert v.handle(ok(order[2], 3.0)) == [Release(1, "a", VOTERS)]
    assert v.open_requests == 0 and v.votes()[(P, "released")] == 1


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("good", VOTERS)
@pytest.mark.parametrize("field", ["c", "es"])
def test_two_faulty_channels_that_agree_are_never_released(
    order: tuple[str, ...], good: str, field: str
) -> None:
    """The double fault 2oo3 cannot mask: two channels return the same wrong C (or ES)."""
    c, es = (b"X", b"E") if field == "c" else (b"C", b"X")
    v, out = run(*(ok(ch, 1.0 + i) if ch == good else ok(ch, 1.0 + i, c=c, es=es)
                   for i, ch in enumerate(order)))
    assert releases(out) == []
    fails = [d for d in out if isinstance(d, Fail)]
    assert len(fails) == 1 and fails[0].error == "disagreement"
    faulty = tuple(ch for ch in VOTERS if ch != good)
    assert Disagreement(1, P, minority=(good,), majority=faulty) in out
    # The majority is not trusted: every channel that answered is self-tested.
    assert out[-1] == RequestSelfTest(VOTERS)
    assert v.votes()[(P, "disagreement")] == 1


@pytest.mark.parametrize("order", ORDERS)
def test_the_request_fails_as_soon_as_two_results_differ(order: tuple[str, ...]) -> None:
    v = Voter()
    v.handle(Submit(1, 0.0, 10.0, VOTERS, P))
    v.handle(ok(order[0], 1.0))
    out = v.handle(ok(order[1], 2.0, c=b"X"))
    assert [type(d) for d in out] == [Fail]
    assert v.unanswered == 0 and v.open_requests == 1  # still judging: the third is awaited


def test_all_three_differing_names_no_majority_and_tests_all() -> None:
    _, out = run(ok("a", 1.0), ok("b", 2.0, c=b"X"), ok("c", 3.0, c=b"Y"))
    assert Disagreement(1, P, minority=VOTERS, majority=()) in out
    assert out[-1] == RequestSelfTest(VOTERS)


def test_a_channel_error_fails_the_request_even_when_the_other_two_agree() -> None:
    err = ChannelResult(1, "b", 1.0, False, b"", b"", "v", "ecc uncorrectable")
    _, out = run(err, ok("a", 2.0), ok("c", 3.0))
    assert releases(out) == []
    assert out[:2] == [Fail(1, "channel_error", "b: ecc uncorrectable"),
                       ChannelFailed(1, "b", "ecc uncorrectable")]
    # The two ok results agree: nothing to diagnose; the controller isolates b.
    assert not any(isinstance(d, Disagreement | RequestSelfTest) for d in out)


def test_a_silent_channel_times_out_the_request_and_is_reported() -> None:
    v, out = run(ok("a", 1.0), ok("b", 2.0), deadline=5.0)
    assert out == []
    out = v.handle(Tick(5.0))
    assert [type(d) for d in out] == [Fail, DeadlineMiss]
    assert isinstance(out[0], Fail) and out[0].error == "timeout"
    assert out[1] == DeadlineMiss(1, "c")


def test_differing_results_and_a_silent_channel_test_only_those_that_answered() -> None:
    """A channel that missed the deadline is dealt with by its own finding (the controller
    takes it out); a self-test request would start it again."""
    v, _ = run(ok("a", 1.0), ok("b", 2.0, c=b"X"), deadline=5.0)
    out = v.handle(Tick(5.0))
    assert DeadlineMiss(1, "c") in out
    assert out[-1] == RequestSelfTest(("a", "b"))


def test_diverse_channels_compare_c_only() -> None:
    _, out = run(ok("a", 1.0, variant="small"), ok("b", 2.0, es=b"other", variant="large"),
                 ok("c", 3.0, variant="small"))
    assert releases(out) == [Release(1, "a", VOTERS)]
