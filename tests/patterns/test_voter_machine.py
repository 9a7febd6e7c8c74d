"""Stateful property test of the voter: random submits, results, ticks, SAFE and resets.

The model below does not re-implement the voter. It keeps what the test itself sent (which
results each channel sent first and when, the deadlines, the SAFE periods) and checks the
voter's answers against the contract's invariants after every step.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from safemon.patterns.voter import (
    ChannelFailed,
    ChannelResult,
    DeadlineMiss,
    Decision,
    Disagreement,
    EnterSafe,
    Fail,
    Release,
    RequestSelfTest,
    Reset,
    Submit,
    Tick,
    Voter,
)
from safemon.states import Policy

CHANNELS = ("a", "b", "c", "d")
UNKNOWN_REQ = 10_000
#: Agreeing results that release a request: the test's own statement of the policy table.
QUORUM = {
    Policy.ONE_OO_ONE_D: 1,
    Policy.TWO_OO_TWO: 2,
    Policy.ONE_OO_TWO_D: 2,
    Policy.TWO_OO_THREE: 2,
    Policy.ONE_OO_THREE_D: 3,
}


def agree(a: ChannelResult, b: ChannelResult) -> bool:
    """The test's own statement of agreement, independent of the voter's."""
    same_es = a.es_digest == b.es_digest or a.variant != b.variant
    return a.ok and b.ok and a.c_digest == b.c_digest and same_es


@dataclass
class _Req:
    submit: Submit
    safe_at_submit: bool
    answers: list[Release | Fail] = field(default_factory=list)
    # The first result of each channel, as the voter must have kept it (duplicates ignored).
    first: dict[str, ChannelResult] = field(default_factory=dict)
    hit_by_safe: bool = False  # a SAFE entry happened while it was still open
    findings: list[Decision] = field(default_factory=list)

    def counted(self) -> dict[str, ChannelResult]:
        """First results from voters that arrived before the deadline."""
        return {
            ch: r
            for ch, r in self.first.items()
            if ch in self.submit.voters and r.now < self.submit.deadline
        }


class VoterMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.voter = Voter()
        self.now = 0.0
        self.safe = False
        self.reqs: dict[int, _Req] = {}
        self.next_id = 0
        self.variants: dict[str, str] = {}

    @initialize(variants=st.lists(st.sampled_from(["v1", "v2"]), min_size=4, max_size=4))
    def pick_variants(self, variants: list[str]) -> None:
        self.variants = dict(zip(CHANNELS, variants, strict=True))

    # ------------------------------------------------------------------ plumbing

    def _handle(self, event: Submit | ChannelResult | Tick | EnterSafe | Reset) -> list[Decision]:
        out = self.voter.handle(event)
        for d in out:
            if isinstance(d, Release | Fail):
                req = self.reqs[d.req_id]
                # Invariant: no request is answered twice.
                assert not req.answers, f"request {d.req_id} answered twice: {req.answers}, {d}"
                req.answers.append(d)
                if isinstance(d, Release):
                    self._check_release(req, d)
            elif isinstance(d, Disagreement | DeadlineMiss | ChannelFailed):
                req = self.reqs[d.req_id]
                if isinstance(d, Disagreement) and d.policy is Policy.ONE_OO_THREE_D:
                    # Invariant: a 1oo3D mismatch trusts no majority; every channel that
                    # answered is self-tested.
                    answered = {*d.minority, *d.majority}
                    assert any(
                        isinstance(x, RequestSelfTest) and set(x.channels) == answered
                        for x in out
                    ), f"{d} without a self-test of {sorted(answered)}: {out}"
                if isinstance(d, Disagreement | DeadlineMiss):
                    # Judged at close, and a request closes only once it is answered.
                    assert req.answers, f"{d} before request {d.req_id} was answered"
                    assert d not in req.findings, f"{d} reported twice"
                req.findings.append(d)
        return out

    def _check_release(self, req: _Req, rel: Release) -> None:
        # Invariant: nothing is released while SAFE, nor for a request SAFE already failed.
        assert not self.safe, f"release {rel} while SAFE"
        assert not req.hit_by_safe and not req.safe_at_submit
        counted = req.counted()
        assert rel.channel in counted and counted[rel.channel].ok
        policy = req.submit.policy
        if policy is not Policy.ONE_OO_ONE_D:
            # Invariant: the released channel agreed with another voting channel.
            assert any(
                agree(counted[rel.channel], r) for ch, r in counted.items() if ch != rel.channel
            ), f"released {rel.channel} without agreement: {counted}"
        # Invariant: a quorum of counted results agrees, each with every other.
        agreed = [counted[ch] for ch in rel.agreed if ch in counted]
        assert len(agreed) == len(rel.agreed) >= QUORUM[policy], f"{rel}: {counted}"
        assert all(agree(a, b) for a in agreed for b in agreed if a is not b), f"{rel}: {counted}"
        if QUORUM[policy] == policy.channels > 1:
            # Invariant (2oo2, 1oo2D, 1oo3D): nothing is released unless every voting
            # channel sent an ok result and all of them agree.
            assert set(counted) == set(req.submit.voters), f"{rel} without all voters: {counted}"
            results = list(counted.values())
            assert all(agree(a, b) for a in results for b in results if a is not b), (
                f"{rel} although the voting channels disagree: {counted}"
            )

    def _advance(self, dt: float) -> float:
        self.now += dt
        return self.now

    # --------------------------------------------------------------------- rules

    @rule(
        policy=st.sampled_from(
            [*Policy, Policy.TWO_OO_THREE, Policy.TWO_OO_THREE, Policy.ONE_OO_THREE_D]
        ),
        data=st.data(),
        dt=st.sampled_from([0.0, 0.1, 0.5]),
        timeout=st.sampled_from([0.3, 1.0, 3.0, 3.0]),
    )
    def submit(self, policy: Policy, data: st.DataObject, dt: float, timeout: float) -> None:
        voters = data.draw(st.permutations(CHANNELS))[: policy.channels]
        now = self._advance(dt)
        ev = Submit(self.next_id, now, now + timeout, tuple(voters), policy)
        self.reqs[self.next_id] = _Req(ev, safe_at_submit=self.safe)
        self.next_id += 1
        self._handle(ev)
        if self.safe:
            (answer,) = self.reqs[ev.req_id].answers
            assert isinstance(answer, Fail) and answer.error == "safe_state"

    @precondition(lambda self: bool(self.reqs))
    @rule(
        data=st.data(),
        ok=st.sampled_from([True, True, True, False]),
        c=st.sampled_from([b"c0", b"c0", b"c0", b"c1"]),
        es=st.sampled_from([b"e0", b"e0", b"e1"]),
        dt=st.sampled_from([0.0, 0.0, 0.1, 0.4]),
        to_voter=st.sampled_from([True, True, True, True, False]),
    )
    def result(
        self, data: st.DataObject, ok: bool, c: bytes, es: bytes, dt: float, to_voter: bool
    ) -> None:
        # Mostly recent requests, so that results usually land while the request is open.
        ids = [*sorted(self.reqs)[-4:], UNKNOWN_REQ]
        req_id = data.draw(st.sampled_from(ids))
        if req_id == UNKNOWN_REQ:
            channel = data.draw(st.sampled_from(CHANNELS))
        else:
            voters = self.reqs[req_id].submit.voters
            others = [ch for ch in CHANNELS if ch not in voters]
            pool = list(voters) if to_voter or not others else others
            channel = data.draw(st.sampled_from(pool))
        now = self._advance(dt)
        variant = self.variants[channel]
        ev = (
            ChannelResult(req_id, channel, now, True, c, es, variant)
            if ok
            else ChannelResult(req_id, channel, now, False, b"", b"", variant, "ecc")
        )
        req = self.reqs.get(req_id)
        if req is not None:
            req.first.setdefault(channel, ev)
        out = self._handle(ev)
        if req is not None:
            self._check_2oo3_minority(req, ev, out)

    def _pending(self) -> list[tuple[int, str]]:
        """(request, voter) pairs whose result the voter still waits for, as far as sent."""
        return [
            (req_id, ch)
            for req_id, req in self.reqs.items()
            if req.submit.deadline > self.now and not req.hit_by_safe and not req.safe_at_submit
            for ch in req.submit.voters
            if ch not in req.first
        ]

    @precondition(lambda self: bool(self._pending()))
    @rule(
        data=st.data(),
        ok=st.sampled_from([True] * 9 + [False]),
        odd=st.sampled_from([None, None, "c", "es"]),
        dt=st.sampled_from([0.0, 0.05]),
    )
    def deliver(self, data: st.DataObject, ok: bool, odd: str | None, dt: float) -> None:
        """A voter's first result for an open request: mostly ok and mostly agreeing."""
        req_id, channel = data.draw(st.sampled_from(self._pending()))
        now = self._advance(dt)
        variant = self.variants[channel]
        ev = (
            ChannelResult(
                req_id,
                channel,
                now,
                True,
                b"c1" if odd == "c" else b"c0",
                b"e1" if odd == "es" else b"e0",
                variant,
            )
            if ok
            else ChannelResult(req_id, channel, now, False, b"", b"", variant, "bad frame")
        )
        req = self.reqs[req_id]
        req.first.setdefault(channel, ev)
        out = self._handle(ev)
        self._check_2oo3_minority(req, ev, out)

    def _check_2oo3_minority(self, req: _Req, ev: ChannelResult, out: list[Decision]) -> None:
        """Invariant: in 2oo3, when exactly one of three ok results differs, it is named."""
        if req.submit.policy is not Policy.TWO_OO_THREE or req.hit_by_safe or req.safe_at_submit:
            return
        counted = req.counted()
        if len(counted) != 3 or not all(r.ok for r in counted.values()):
            return
        # Only the event that completed the three results closes the request and judges it.
        if counted.get(ev.channel) is not ev:
            return
        for odd in req.submit.voters:
            pair = [counted[ch] for ch in req.submit.voters if ch != odd]
            if agree(*pair) and not any(agree(counted[odd], r) for r in pair):
                expected = Disagreement(
                    req.submit.req_id,
                    Policy.TWO_OO_THREE,
                    minority=(odd,),
                    majority=tuple(ch for ch in req.submit.voters if ch != odd),
                )
                assert expected in out, f"minority {odd} not named: {out}"
                assert isinstance(req.answers[0], Release)
                assert req.answers[0].channel != odd

    @rule(dt=st.sampled_from([0.0, 0.1, 0.2, 1.0, 3.0]))
    def tick(self, dt: float) -> None:
        self._handle(Tick(self._advance(dt)))

    # One rule for both mode changes, weighted: SAFE ends every vote in flight, so it must
    # stay rare enough that votes get to finish.
    @rule(change=st.sampled_from(["safe", "reset", "reset"]), dt=st.sampled_from([0.0, 0.1]))
    def mode(self, change: str, dt: float) -> None:
        now = self._advance(dt)
        if change == "reset":
            self.safe = False
            self._handle(Reset(now))
            return
        for req in self.reqs.values():
            # Open as far as the test can tell: deadline still ahead and not closed early.
            if req.submit.deadline > now:
                req.hit_by_safe = True
        self.safe = True
        self._handle(EnterSafe(now))

    # ---------------------------------------------------------------- invariants

    @invariant()
    def every_request_is_answered_by_its_deadline(self) -> None:
        for req in self.reqs.values():
            if req.submit.deadline <= self.now:
                assert req.answers, f"request {req.submit.req_id} unanswered past its deadline"

    @invariant()
    def every_silent_voter_is_reported_at_the_deadline(self) -> None:
        for req in self.reqs.values():
            if req.submit.deadline > self.now or req.hit_by_safe or req.safe_at_submit:
                continue
            counted = req.counted()
            for ch in req.submit.voters:
                if ch not in counted:
                    assert DeadlineMiss(req.submit.req_id, ch) in req.findings, (
                        f"{ch} missed request {req.submit.req_id} unreported: {req.findings}"
                    )

    @invariant()
    def safe_leaves_nothing_pending(self) -> None:
        if self.safe:
            assert all(req.answers for req in self.reqs.values())
            assert self.voter.open_requests == 0 and self.voter.safe

    @invariant()
    def an_agreeing_quorum_is_always_released(self) -> None:
        for req in self.reqs.values():
            if req.hit_by_safe or req.safe_at_submit:
                continue
            counted = [r for r in req.counted().values() if r.ok]
            quorum = QUORUM[req.submit.policy]
            found = any(
                all(agree(a, b) for a, b in itertools.combinations(group, 2))
                for group in itertools.combinations(counted, quorum)
            )
            if found:
                assert req.answers and isinstance(req.answers[0], Release), (
                    f"request {req.submit.req_id} had an agreeing quorum but got {req.answers}"
                )

    @invariant()
    def vote_counters_match_the_answers(self) -> None:
        answered = sum(1 for req in self.reqs.values() if req.answers)
        assert sum(self.voter.votes().values()) == answered
        released = sum(
            1 for req in self.reqs.values() if req.answers and isinstance(req.answers[0], Release)
        )
        assert sum(n for (_, o), n in self.voter.votes().items() if o == "released") == released
        assert self.voter.unanswered == sum(
            1
            for req in self.reqs.values()
            if not req.answers and req.submit.deadline > self.now and not self.safe
        )


TestVoterMachine = VoterMachine.TestCase
TestVoterMachine.settings = settings(
    max_examples=150,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
