"""Property tests of the DTI scheduler over random event sequences (hypothesis)."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from safemon.patterns.scheduler import (
    ChannelJoined,
    ChannelLeft,
    DtiLate,
    DtiOverrun,
    RunNow,
    Scheduler,
    SchedulerConfig,
    SchedulerEvent,
    SelfTestDone,
    SelfTestFailed,
    SelfTestPassed,
    StartSelfTest,
    Tick,
)

CHANNELS = ("a", "b", "c")

# One step of the shell: let time pass (clipped to the next wakeup, as a correct shell
# does), join/leave a channel, ask for a test now, or report a result for some test id
# (the id may be outstanding, settled, foreign or never issued).
step = st.one_of(
    st.tuples(st.just("wait"), st.floats(0.0, 7.0)),
    st.tuples(st.just("join"), st.sampled_from(CHANNELS)),
    st.tuples(st.just("leave"), st.sampled_from(CHANNELS)),
    st.tuples(st.just("run_now"), st.sampled_from(CHANNELS)),
    st.tuples(st.just("done"), st.sampled_from(CHANNELS), st.integers(0, 40), st.booleans()),
)


@settings(max_examples=150, deadline=None)
@given(
    dti=st.floats(0.5, 10.0),
    deadline_frac=st.floats(0.05, 1.0),
    jitter=st.sampled_from([0.0, 0.25, 0.9]),
    seed=st.integers(0, 2**16),
    steps=st.lists(step, max_size=80),
)
def test_dti_bound_overruns_and_stale_results_hold_for_any_sequence(
    dti: float, deadline_frac: float, jitter: float, seed: int, steps: list[tuple[object, ...]]
) -> None:
    """For any event order, with ticks never later than next_wakeup():
    no joined channel goes more than one DTI without a started self-test (join counts),
    jitter never plans a gap shorter than dti*(1-jitter) for periodic tests,
    every started test is settled at most once (pass, fail or overrun) and never after its
    channel left, settlement respects the deadline, and DtiLate never happens."""
    cfg = SchedulerConfig(
        dti=dti, selftest_deadline=dti * deadline_frac, patterns=("p0", "p1"), jitter=jitter
    )
    s = Scheduler(cfg, random.Random(seed))
    now = 0.0
    last_start: dict[str, float] = {}  # join time or latest start, per joined channel
    open_tests: dict[int, tuple[str, float, float]] = {}  # id -> (channel, start, deadline)
    settled: set[int] = set()

    def apply(event: SchedulerEvent) -> None:
        nonlocal now
        # Bound check *before* the event: nothing may be overdue at any instant we reach.
        for ch, t in last_start.items():
            assert event.now - t <= cfg.dti + 1e-9, f"{ch} went {event.now - t} s without a test"
        out = s.handle(event)
        now = event.now
        for ins in out:
            assert not isinstance(ins, DtiLate)
            if isinstance(ins, StartSelfTest):
                assert ins.channel in last_start
                assert ins.test_id not in open_tests and ins.test_id not in settled
                gap = now - last_start[ins.channel]
                if not isinstance(event, RunNow):
                    # Periodic start: exactly at its planned time, never later than one DTI.
                    assert gap <= cfg.dti + 1e-9
                assert ins.deadline == now + cfg.selftest_deadline
                open_tests[ins.test_id] = (ins.channel, now, ins.deadline)
                last_start[ins.channel] = now
            elif isinstance(ins, SelfTestPassed | SelfTestFailed | DtiOverrun):
                assert ins.test_id in open_tests, f"settled twice or unknown: {ins}"
                ch, start, deadline = open_tests.pop(ins.test_id)
                settled.add(ins.test_id)
                assert ins.channel == ch and ch in last_start
                if isinstance(ins, DtiOverrun):
                    assert now >= deadline == ins.deadline
                else:
                    assert isinstance(event, SelfTestDone) and event.test_id == ins.test_id
                    assert now < deadline
                    if isinstance(ins, SelfTestPassed):
                        assert ins.latency == now - start
        # No test stays open past its deadline once time has reached it.
        for tid, (ch, _, deadline) in open_tests.items():
            assert now < deadline, f"test {tid} of {ch} open past its deadline"

    for st_ in steps:
        kind = st_[0]
        if kind == "wait":
            wake = s.next_wakeup()
            delta = float(st_[1])  # type: ignore[arg-type]
            target = now + delta if wake is None else min(now + delta, wake)
            apply(Tick(max(target, now)))
        elif kind == "join":
            ch = str(st_[1])
            if ch not in last_start:
                apply(ChannelJoined(ch, now))
                last_start[ch] = now
        elif kind == "leave":
            ch = str(st_[1])
            apply(ChannelLeft(ch, now))
            last_start.pop(ch, None)
            for tid in [t for t, v in open_tests.items() if v[0] == ch]:
                del open_tests[tid]
                settled.add(tid)  # dropped: any later result must be ignored
        elif kind == "run_now":
            ch = str(st_[1])
            if ch in last_start:
                apply(RunNow(ch, now))
        else:
            ch, tid, passed = str(st_[1]), int(st_[2]), bool(st_[3])  # type: ignore[call-overload]
            known = tid in open_tests and open_tests[tid][0] == ch
            stale_before = s.stale_results
            apply(SelfTestDone(ch, tid, passed, now))
            if not known:
                assert s.stale_results == stale_before + 1


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**16), n=st.integers(1, 40))
def test_patterns_are_used_round_robin_for_any_mix_of_periodic_and_on_demand_tests(
    seed: int, n: int
) -> None:
    """The k-th test of a channel uses patterns[k % len(patterns)], whatever triggered it."""
    cfg = SchedulerConfig(dti=1.0, selftest_deadline=0.5, patterns=("x", "y", "z"))
    s = Scheduler(cfg)
    s.handle(ChannelJoined("a", 0.0))
    rng = random.Random(seed)
    used: list[str] = []
    now = 0.0
    while len(used) < n:
        now = s.selftest_due("a") if rng.random() < 0.5 else now + 0.1
        event: SchedulerEvent = Tick(now) if rng.random() < 0.5 else RunNow("a", now)
        used += [i.pattern_id for i in s.handle(event) if isinstance(i, StartSelfTest)]
    assert used[:n] == [("x", "y", "z")[k % 3] for k in range(n)]
