"""The scheduler's catch-up rule (issue 13): an event stamped `now` after timers fell due
settles them itself, earliest first; a start the shell reaches late happens at `now` with
its full deadline (`DtiLate` names the shell's lateness); only work handed out and not
finished in time is a `DtiOverrun`. Injected time only, no sleeping."""

from __future__ import annotations

from safemon.patterns.scheduler import (
    ChannelJoined,
    DtiLate,
    DtiOverrun,
    Scheduler,
    SchedulerConfig,
    ScrubOverrun,
    SelfTestDone,
    SelfTestPassed,
    StartScrub,
    StartSelfTest,
    Tick,
)

CFG = SchedulerConfig(dti=10.0, selftest_deadline=2.0, patterns=("p0", "p1"))


def test_a_shell_late_by_more_than_the_deadline_blames_no_channel() -> None:
    """The shell wakes 5 s after a self-test fell due (longer than its 2 s deadline): the
    test starts now and may take its full 2 s; no overrun is reported for it."""
    s = Scheduler(CFG)
    s.handle(ChannelJoined("a", 0.0))
    out = s.handle(Tick(15.0))
    assert out == [DtiLate("a", 10.0, 15.0), StartSelfTest("a", 1, "p0", 17.0)]
    assert s.handle(SelfTestDone("a", 1, True, 16.5)) == [SelfTestPassed("a", 1, 1.5)]


def test_a_shell_late_by_many_dtis_starts_one_test_not_one_per_missed_dti() -> None:
    """Missed periodic starts are not replayed into the past: one late start, one DtiLate,
    and the next test is planned one DTI after it."""
    s = Scheduler(CFG)
    s.handle(ChannelJoined("a", 0.0))
    out = s.handle(Tick(55.0))
    assert out == [DtiLate("a", 10.0, 55.0), StartSelfTest("a", 1, "p0", 57.0)]
    assert s.selftest_due("a") == 65.0


def test_work_handed_out_and_unfinished_overruns_at_its_own_deadline() -> None:
    """A test that was started and not answered is the channel's overrun, reported with its
    deadline even when the shell notices only later; the start due in the same gap follows."""
    s = Scheduler(CFG)
    s.handle(ChannelJoined("a", 0.0))
    s.handle(Tick(10.0))  # test 1, deadline 12
    out = s.handle(Tick(21.0))
    assert out == [DtiOverrun("a", 1, 12.0), DtiLate("a", 20.0, 21.0),
                   StartSelfTest("a", 2, "p1", 23.0)]


def test_timers_of_several_channels_are_settled_in_time_order() -> None:
    """b's start fell due (15) before a's overrun (19) and a's next start (20): across
    channels the earliest timer comes first, not channel by channel in join order."""
    s = Scheduler(SchedulerConfig(dti=10.0, selftest_deadline=9.0, patterns=("p0", "p1")))
    s.handle(ChannelJoined("a", 0.0))
    s.handle(ChannelJoined("b", 5.0))
    s.handle(Tick(10.0))  # a: test 1, deadline 19
    out = s.handle(Tick(20.0))
    assert out == [DtiLate("b", 15.0, 20.0), StartSelfTest("b", 2, "p0", 29.0),
                   DtiOverrun("a", 1, 19.0), StartSelfTest("a", 3, "p1", 29.0)]


def test_equal_due_times_settle_overruns_first_then_join_order() -> None:
    """Ties: at one instant an overrun comes before a start, and channels in join order."""
    s = Scheduler(SchedulerConfig(dti=10.0, selftest_deadline=10.0, patterns=("p0",)))
    s.handle(ChannelJoined("a", 0.0))
    s.handle(ChannelJoined("b", 0.0))
    s.handle(Tick(10.0))  # tests 1 (a) and 2 (b), deadlines 20, next due 20
    out = s.handle(Tick(20.0))
    assert out == [DtiOverrun("a", 1, 20.0), DtiOverrun("b", 2, 20.0),
                   StartSelfTest("a", 3, "p0", 30.0), StartSelfTest("b", 4, "p0", 30.0)]


def test_a_late_scrub_overrun_is_settled_before_the_scrub_that_replaces_it() -> None:
    """Scrubs follow the same rule: the old scrub's overrun, then the new scrub from now."""
    cfg = SchedulerConfig(dti=100.0, selftest_deadline=1.0, patterns=("p0",),
                          scrub_interval=10.0, scrub_deadline=4.0)
    s = Scheduler(cfg)
    s.handle(ChannelJoined("a", 0.0))
    assert s.handle(Tick(10.0)) == [StartScrub("a", 14.0)]
    assert s.handle(Tick(23.0)) == [ScrubOverrun("a", 14.0), StartScrub("a", 27.0)]
