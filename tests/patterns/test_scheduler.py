"""The DTI scheduler: deadlines, overruns, stale results, rotation, jitter, scrubs, bad input."""

from __future__ import annotations

import random
from collections.abc import Sequence

import pytest

from safemon.errors import ConfigError, InvalidInputError
from safemon.patterns.scheduler import (
    ChannelJoined,
    ChannelLeft,
    DtiLate,
    DtiOverrun,
    Job,
    Postpone,
    RunNow,
    Scheduler,
    SchedulerConfig,
    ScrubDone,
    ScrubFindings,
    ScrubOverrun,
    SelfTestDelayed,
    SelfTestDone,
    SelfTestFailed,
    SelfTestPassed,
    StartScrub,
    StartSelfTest,
    Tick,
    deadline_for,
    next_due,
)

CFG = SchedulerConfig(dti=10.0, selftest_deadline=2.0, patterns=("p0", "p1", "p2"))


def starts(out: Sequence[object]) -> list[StartSelfTest]:
    return [i for i in out if isinstance(i, StartSelfTest)]


def joined(cfg: SchedulerConfig = CFG, *names: str, rng: random.Random | None = None) -> Scheduler:
    s = Scheduler(cfg, rng)
    for n in names or ("a",):
        assert s.handle(ChannelJoined(n, 0.0)) == []
    return s


# ------------------------------------------------------------------------------ config


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"dti": 0.0}, "dti must be"),
        ({"dti": float("nan")}, "dti must be"),
        ({"dti": True}, "dti must be"),
        ({"selftest_deadline": 11.0}, "must be <= dti"),
        ({"selftest_deadline": 0.0}, "selftest_deadline must be"),
        ({"patterns": ()}, "must not be empty"),
        ({"patterns": "p0"}, "sequence of pattern ids"),
        ({"patterns": ("p0", "p0")}, "unique"),
        ({"patterns": ("p0", "")}, "non-empty strings"),
        ({"jitter": 1.0}, "jitter must be"),
        ({"jitter": -0.1}, "jitter must be"),
        ({"scrub_interval": 0.0}, "scrub_interval must be"),
        ({"scrub_deadline": 1.0}, "scrubbing off"),
        ({"scrub_interval": 5.0, "scrub_deadline": 6.0}, "must be <= scrub_interval"),
    ],
)
def test_config_rejects_bad_fields(kwargs: dict[str, object], fragment: str) -> None:
    """Each bad config field raises ConfigError naming it."""
    base: dict[str, object] = {"dti": 10.0, "selftest_deadline": 2.0, "patterns": ("p0",)}
    base.update(kwargs)
    with pytest.raises(ConfigError, match=fragment):
        SchedulerConfig(**base)  # type: ignore[arg-type]


def test_config_stores_a_pattern_list_as_a_tuple() -> None:
    """A YAML-style list of pattern ids is kept, in order, as a tuple."""
    cfg = SchedulerConfig(dti=1.0, selftest_deadline=1.0, patterns=["x", "y"])  # type: ignore[arg-type]
    assert cfg.patterns == ("x", "y")


def test_jitter_without_rng_is_a_config_error() -> None:
    """Jitter must come from an injected random.Random, never a hidden global one."""
    cfg = SchedulerConfig(dti=1.0, selftest_deadline=0.5, patterns=("p",), jitter=0.2)
    with pytest.raises(ConfigError, match=r"random\.Random"):
        Scheduler(cfg)


# -------------------------------------------------------------------- pure deadline rules


def test_next_due_and_deadline_for_are_pure_functions_of_the_config() -> None:
    """next_due / deadline_for compute the documented formulas."""
    cfg = SchedulerConfig(
        dti=10.0,
        selftest_deadline=2.0,
        patterns=("p",),
        jitter=0.5,
        scrub_interval=30.0,
        scrub_deadline=20.0,
    )
    assert next_due(cfg, Job.SELFTEST, 100.0) == 110.0
    assert next_due(cfg, Job.SELFTEST, 100.0, 0.5) == pytest.approx(107.5)
    assert next_due(cfg, Job.SCRUB, 100.0, 0.9) == 130.0  # scrubs are not jittered
    assert deadline_for(cfg, Job.SELFTEST, 100.0) == 102.0
    assert deadline_for(cfg, Job.SCRUB, 100.0) == 120.0
    assert (
        deadline_for(SchedulerConfig(1.0, 1.0, ("p",), scrub_interval=7.0), Job.SCRUB, 1.0) == 8.0
    )


@pytest.mark.parametrize("u", [-0.01, 1.0, float("nan")])
def test_next_due_rejects_a_draw_outside_the_unit_interval(u: float) -> None:
    """A jitter draw outside [0, 1) could push a test past the DTI bound: rejected."""
    with pytest.raises(InvalidInputError, match="jitter draw"):
        next_due(CFG, Job.SELFTEST, 0.0, u)


def test_scrub_rules_without_scrubbing_are_config_errors() -> None:
    """Asking for a scrub deadline while scrubbing is off is an error, not a silent None."""
    with pytest.raises(ConfigError):
        next_due(CFG, Job.SCRUB, 0.0)
    with pytest.raises(ConfigError):
        deadline_for(CFG, Job.SCRUB, 0.0)


def test_jitter_only_ever_moves_a_test_earlier() -> None:
    """Across many draws the planned interval stays within (dti*(1-jitter), dti]."""
    cfg = SchedulerConfig(dti=10.0, selftest_deadline=2.0, patterns=("p",), jitter=0.3)
    rng = random.Random(7)
    intervals = [next_due(cfg, Job.SELFTEST, 0.0, rng.random()) for _ in range(2000)]
    assert all(7.0 < t <= 10.0 for t in intervals)
    assert max(intervals) - min(intervals) > 2.5  # the jitter is really there


# --------------------------------------------------------------------------- scheduling


def test_first_selftest_is_due_one_dti_after_join_and_not_before() -> None:
    """Joining plans the first test at join + dti; a tick just before starts nothing."""
    s = joined()
    assert s.next_wakeup() == 10.0
    assert s.handle(Tick(9.999)) == []
    out = s.handle(Tick(10.0))
    assert out == [StartSelfTest("a", 1, "p0", 12.0)]
    assert s.pending("a") == (1,)
    assert s.last_selftest_start("a") == 10.0
    assert s.next_wakeup() == 12.0  # the deadline check


def test_pass_reports_latency_and_fail_reports_detection_time() -> None:
    """A result before the deadline becomes SelfTestPassed(latency) or SelfTestFailed(detected_at)."""
    s = joined()
    s.handle(Tick(10.0))
    assert s.handle(SelfTestDone("a", 1, True, 11.25)) == [SelfTestPassed("a", 1, 1.25)]
    s.handle(Tick(20.0))
    assert s.handle(SelfTestDone("a", 2, False, 20.5)) == [SelfTestFailed("a", 2, 20.5)]
    assert s.pending("a") == ()


def test_missing_completion_is_an_overrun_exactly_once() -> None:
    """No result by the deadline: one DtiOverrun, never repeated, and the late result is stale."""
    s = joined()
    s.handle(Tick(10.0))
    assert s.handle(Tick(11.99)) == []
    assert s.handle(Tick(12.0)) == [DtiOverrun("a", 1, 12.0)]
    assert s.handle(Tick(12.5)) == []
    assert s.handle(SelfTestDone("a", 1, True, 13.0)) == []
    assert s.stale_results == 1
    assert s.handle(Tick(15.0)) == []


def test_a_delayed_self_test_is_judged_at_its_moved_deadline() -> None:
    """`SelfTestDelayed` moves one test's deadline later: no overrun at the old deadline, one
    at the new; the next periodic start is not moved; a settled or unknown test is left
    alone, and a negative or non-finite delay is refused."""
    s = joined()
    assert starts(s.handle(Tick(10.0))) == [StartSelfTest("a", 1, "p0", 12.0)]
    assert s.handle(SelfTestDelayed("a", 1, 1.5, 10.0)) == []
    assert s.handle(Tick(12.0)) == []
    assert s.next_wakeup() == 13.5
    assert s.handle(Tick(13.5)) == [DtiOverrun("a", 1, 13.5)]
    assert s.handle(SelfTestDelayed("a", 1, 5.0, 13.6)) == []  # settled: nothing moves
    assert s.handle(SelfTestDelayed("a", 99, 5.0, 13.6)) == []
    assert s.handle(SelfTestDelayed("zz", 1, 5.0, 13.6)) == []
    assert starts(s.handle(Tick(20.0))) == [StartSelfTest("a", 2, "p1", 22.0)]
    assert s.handle(SelfTestDelayed("a", 2, 0.5, 20.0)) == []
    assert s.handle(SelfTestDone("a", 2, True, 22.2)) == [SelfTestPassed("a", 2, pytest.approx(2.2))]
    for bad in (-0.1, float("nan"), float("inf")):
        with pytest.raises(InvalidInputError):
            s.handle(SelfTestDelayed("a", 2, bad, 23.0))


def test_postpone_moves_open_deadlines_after_since_before_the_catch_up() -> None:
    """The shell read nothing for 3 s after t=10.5: the test started at 10 (deadline 12) and
    the scrub (deadline 15) are judged 3 s later, although the event is stamped 13.5, past
    the test's old deadline; the next periodic start is not moved; a test whose deadline
    fell at or before `since` is still an overrun; no deadline moves more than the limit;
    bad values are refused."""
    cfg = SchedulerConfig(dti=10.0, selftest_deadline=2.0, patterns=("p0",),
                          scrub_interval=10.0, scrub_deadline=5.0)
    s = joined(cfg)
    out = s.handle(Tick(10.0))
    assert out == [StartSelfTest("a", 1, "p0", 12.0), StartScrub("a", 15.0)]
    assert s.handle(Postpone(10.5, 3.0, 13.5, 5.0)) == []
    assert s.handle(SelfTestDone("a", 1, True, 14.9)) == [SelfTestPassed("a", 1, pytest.approx(4.9))]
    assert s.handle(Tick(17.9)) == []
    assert s.handle(Tick(18.0)) == [ScrubOverrun("a", 18.0)]
    assert starts(s.handle(Tick(20.0))) == [StartSelfTest("a", 2, "p0", 22.0)]
    assert s.handle(Postpone(22.0, 0.5, 22.5, 5.0)) == []
    assert s.handle(Tick(22.1)) == [DtiOverrun("a", 2, 22.0)]  # no clock moved: 22.1 is fine
    # No deadline moves more than the limit in all: test 3 (deadline 32) by 1 s of 3 asked.
    assert starts(s.handle(Tick(30.0))) == [StartSelfTest("a", 3, "p0", 32.0)]
    assert s.handle(Postpone(30.5, 0.5, 31.0, 1.0)) == []
    assert s.handle(Postpone(31.0, 2.5, 33.5, 1.0)) == []
    assert s.handle(Tick(33.5)) == [DtiOverrun("a", 3, 33.0)]
    for bad in ((1.0, 40.0, 34.0, 1.0), (33.5, 0.6, 34.0, 1.0), (33.5, -0.1, 34.0, 1.0),
                (33.5, float("nan"), 34.0, 1.0), (33.5, 0.1, 34.0, -1.0)):
        with pytest.raises(InvalidInputError):
            s.handle(Postpone(*bad))


def test_a_postponed_scrub_is_judged_before_the_next_one_replaces_it() -> None:
    """A scrub's deadline is its interval (the daemon's default), where the next scrub is
    due: a postponed one is moved no further than that start, so a scrub that never
    reports is still an overrun, reported before the next scrub starts."""
    cfg = SchedulerConfig(dti=10.0, selftest_deadline=2.0, patterns=("p0",), scrub_interval=10.0)
    s = joined(cfg)
    assert StartScrub("a", 20.0) in s.handle(Tick(10.0))
    assert s.handle(Postpone(15.0, 0.1, 15.2, 2.0)) == []
    out = s.handle(Tick(20.0))
    assert out.index(ScrubOverrun("a", 20.0)) < out.index(StartScrub("a", 30.0))


def test_completion_stamped_at_the_deadline_is_an_overrun_not_a_pass() -> None:
    """The deadline is exclusive: a result at now == deadline counts as the overrun, once."""
    s = joined()
    s.handle(Tick(10.0))
    assert s.handle(SelfTestDone("a", 1, True, 12.0)) == [DtiOverrun("a", 1, 12.0)]
    assert s.stale_results == 1


def test_overrun_is_reported_before_the_next_start_at_the_same_instant() -> None:
    """With selftest_deadline == dti, the old test is settled first, then the new one starts."""
    cfg = SchedulerConfig(dti=5.0, selftest_deadline=5.0, patterns=("p",))
    s = joined(cfg)
    s.handle(Tick(5.0))
    assert s.handle(Tick(10.0)) == [DtiOverrun("a", 1, 10.0), StartSelfTest("a", 2, "p", 15.0)]


def test_results_for_unknown_foreign_or_settled_ids_are_ignored() -> None:
    """Unknown ids, another channel's id, duplicates and unknown channels change nothing."""
    s = joined(CFG, "a", "b")
    out = s.handle(Tick(10.0))
    (ta,) = [i.test_id for i in starts(out) if i.channel == "a"]
    (tb,) = [i.test_id for i in starts(out) if i.channel == "b"]
    assert s.handle(SelfTestDone("a", 999, False, 10.5)) == []  # never issued
    assert s.handle(SelfTestDone("a", tb, False, 10.5)) == []  # b's test, reported by a
    assert s.handle(SelfTestDone("zz", ta, False, 10.5)) == []  # unknown channel
    assert s.pending("a") == (ta,) and s.pending("b") == (tb,)
    assert s.handle(SelfTestDone("a", ta, True, 10.5)) == [SelfTestPassed("a", ta, 0.5)]
    assert s.handle(SelfTestDone("a", ta, False, 10.7)) == []  # duplicate
    assert s.stale_results == 4


def test_leaving_drops_outstanding_tests_without_overruns() -> None:
    """A channel that left is not blamed for its tests, and their results are stale."""
    s = joined(CFG, "a")
    s.handle(Tick(10.0))
    assert s.handle(ChannelLeft("a", 10.5)) == []
    assert s.handle(Tick(50.0)) == []
    assert s.handle(SelfTestDone("a", 1, True, 50.0)) == []
    assert s.stale_results == 1
    assert s.next_wakeup() is None
    assert s.handle(ChannelLeft("a", 51.0)) == []  # leaving twice is harmless


def test_rejoin_after_leave_starts_a_fresh_schedule_and_old_ids_stay_stale() -> None:
    """A restarted channel (leave + join) never gets credit for the old process's test."""
    s = joined()
    s.handle(Tick(10.0))
    s.handle(ChannelLeft("a", 10.5))
    s.handle(ChannelJoined("a", 11.0))
    assert s.handle(SelfTestDone("a", 1, True, 11.5)) == []
    assert s.selftest_due("a") == 21.0


def test_patterns_rotate_per_channel_and_run_now_takes_the_next_one() -> None:
    """Each channel cycles through the pattern ids in order; on-demand tests share the rotation."""
    s = joined(CFG, "a", "b")
    seen: dict[str, list[str]] = {"a": [], "b": []}
    for k in range(1, 5):
        for st in starts(s.handle(Tick(10.0 * k))):
            seen[st.channel].append(st.pattern_id)
            s.handle(SelfTestDone(st.channel, st.test_id, True, 10.0 * k + 1))
    assert seen == {"a": ["p0", "p1", "p2", "p0"], "b": ["p0", "p1", "p2", "p0"]}
    (st,) = starts(s.handle(RunNow("a", 41.5)))
    assert st.pattern_id == "p1"


def test_run_now_starts_at_once_and_replans_the_periodic_test() -> None:
    """RunNow counts as a started test: the next periodic one is one DTI after it."""
    s = joined()
    assert s.handle(RunNow("a", 3.0)) == [StartSelfTest("a", 1, "p0", 5.0)]
    assert s.selftest_due("a") == 13.0
    s.handle(SelfTestDone("a", 1, True, 4.0))
    assert s.handle(Tick(10.0)) == []
    assert starts(s.handle(Tick(13.0)))[0].test_id == 2


def test_run_now_while_a_test_runs_keeps_both_deadlines() -> None:
    """An on-demand test beside a running one: each is settled on its own."""
    s = joined()
    s.handle(Tick(10.0))
    s.handle(RunNow("a", 11.0))
    assert s.pending("a") == (1, 2)
    assert s.handle(Tick(12.0)) == [DtiOverrun("a", 1, 12.0)]
    assert s.handle(SelfTestDone("a", 2, True, 12.5)) == [SelfTestPassed("a", 2, 1.5)]


def test_a_late_tick_still_starts_the_test_and_reports_the_broken_bound() -> None:
    """If the shell ticks after the due time, the test starts at once and DtiLate says so."""
    s = joined()
    out = s.handle(Tick(14.0))
    assert out == [DtiLate("a", 10.0, 14.0), StartSelfTest("a", 1, "p0", 16.0)]
    assert s.selftest_due("a") == 24.0


def test_jittered_schedule_is_reproducible_and_within_bounds() -> None:
    """Same seed, same plan; every interval in (dti*(1-jitter), dti]."""
    cfg = SchedulerConfig(dti=10.0, selftest_deadline=1.0, patterns=("p",), jitter=0.4)

    def plan(seed: int) -> list[float]:
        s = joined(cfg, "a", rng=random.Random(seed))
        times: list[float] = []
        for _ in range(50):
            t = s.selftest_due("a")
            (st,) = starts(s.handle(Tick(t)))
            s.handle(SelfTestDone("a", st.test_id, True, t))
            times.append(t)
        return times

    p1, p2, p3 = plan(1), plan(1), plan(2)
    assert p1 == p2 and p1 != p3
    gaps = [b - a for a, b in zip([0.0, *p1], p1, strict=False)]
    assert all(6.0 < g <= 10.0 for g in gaps)


def test_no_jitter_consumes_no_random_draws() -> None:
    """Without jitter the injected rng is left untouched."""
    rng = random.Random(3)
    state = rng.getstate()
    s = joined(CFG, "a", rng=rng)
    s.handle(Tick(10.0))
    assert rng.getstate() == state


# ------------------------------------------------------------------------------- scrubs


# A DTI far beyond the scrub times keeps self-tests out of these scrub checks.
SCFG = SchedulerConfig(
    dti=1000.0, selftest_deadline=2.0, patterns=("p",), scrub_interval=15.0, scrub_deadline=5.0
)


def test_scrubs_run_periodically_and_report_only_nonzero_findings() -> None:
    """A scrub starts every scrub_interval; clean results are silent, findings are reported."""
    s = joined(SCFG)
    assert s.handle(Tick(15.0)) == [StartScrub("a", 20.0)]
    assert s.handle(ScrubDone("a", 0, 0, 16.0)) == []
    assert s.handle(Tick(30.0)) == [StartScrub("a", 35.0)]
    assert s.handle(ScrubDone("a", 3, 1, 31.0)) == [ScrubFindings("a", 3, 1)]


def test_scrub_overrun_is_reported_once_and_late_findings_still_count() -> None:
    """No scrub result by its deadline: one ScrubOverrun; findings that come later are kept."""
    s2 = joined(SCFG)
    s2.handle(Tick(15.0))
    assert s2.handle(Tick(19.0)) == []
    assert s2.handle(Tick(20.0)) == [ScrubOverrun("a", 20.0)]
    assert s2.handle(Tick(21.0)) == []
    assert s2.handle(ScrubDone("a", 0, 2, 22.0)) == [ScrubFindings("a", 0, 2)]
    assert s2.handle(ScrubDone("zz", 0, 2, 22.0)) == []
    assert s2.stale_scrubs == 1


def test_no_scrubs_when_scrubbing_is_off() -> None:
    """scrub_interval=None plans no scrub at all."""
    s = joined()
    out: list[object] = []
    for t in range(1, 100):
        out += s.handle(Tick(float(t)))
    assert not [i for i in out if isinstance(i, StartScrub)]


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("event", "fragment"),
    [
        (Tick(4.0), "backwards"),
        (Tick(float("inf")), "finite"),
        (ChannelJoined("a", 6.0), "joined twice"),
        (ChannelJoined("", 6.0), "non-empty"),
        (RunNow("zz", 6.0), "has not joined"),
        (ScrubDone("a", -1, 0, 6.0), "corrected"),
        (ScrubDone("a", 0, True, 6.0), "uncorrectable"),
        (SelfTestDone("a", 1, 1, 6.0), "passed must be"),  # type: ignore[arg-type]
        (SelfTestDone("a", "1", True, 6.0), "test_id"),  # type: ignore[arg-type]
    ],
)
def test_bad_events_raise_and_leave_the_scheduler_unchanged(event: object, fragment: str) -> None:
    """Malformed events raise InvalidInputError; the state (plan, pending, clock) is untouched."""
    s = joined()
    s.handle(Tick(5.0))
    before = (s.channels, s.selftest_due("a"), s.pending("a"), s.next_wakeup())
    with pytest.raises(InvalidInputError, match=fragment):
        s.handle(event)  # type: ignore[arg-type]
    assert (s.channels, s.selftest_due("a"), s.pending("a"), s.next_wakeup()) == before
    assert s.handle(Tick(5.0)) == []  # the clock did not move


def test_a_rejoin_keeps_the_selftest_and_scrub_the_channel_was_due() -> None:
    """A channel that left to store a weight rejoins with the tests it was due: a due time
    already past starts at once, a later one stays, and neither is pushed to a full
    interval after the rejoin."""
    cfg = SchedulerConfig(dti=10.0, selftest_deadline=2.0, patterns=("p0",), scrub_interval=20.0)
    s = joined(cfg)
    assert s.selftest_due("a") == 10.0 and s.scrub_due("a") == 20.0
    s.handle(ChannelLeft("a", 9.0))
    s.handle(ChannelJoined("a", 12.0, selftest_due=10.0, scrub_due=20.0))
    assert s.selftest_due("a") == 12.0 and s.scrub_due("a") == 20.0
    assert starts(s.handle(Tick(12.0))) == [StartSelfTest("a", 1, "p0", 14.0)]
    with pytest.raises(InvalidInputError, match="selftest_due"):
        s.handle(ChannelJoined("b", 13.0, selftest_due=float("nan")))
