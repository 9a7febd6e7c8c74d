"""The voter: a sans-IO state machine that decides what the application gets.

Per request, the channels that are currently voting each send a result; the voter applies
the request's policy (the policy table in README.md) and answers the request exactly once,
either by releasing one channel's C or with a typed error. Along the way it emits findings
for the safe-state controller. It never touches sockets, timers or arrays: the daemon
shell stamps every event with `now` (seconds, from one monotonic clock), hashes and keeps
the C / ES arrays, and carries out the decisions.

Contract
--------
Events in (frozen dataclasses), passed to `Voter.handle(event) -> list[Decision]`:

- `Submit(req_id, now, deadline, voters, policy)`: opens a request. The voting set and the
  effective (possibly degraded) policy are fixed here and never change for this request;
  `len(voters)` must equal `policy.channels`.
- `ChannelResult(req_id, channel, now, ok, c_digest, es_digest, variant, error)`: one
  channel's result. `ok=False` means the channel itself reported an error (ECC
  uncorrectable, bad frame, ...); `error` then says what, and the digests are ignored.
- `Tick(now)`: time passes; requests whose deadline is `<= now` are closed.
- `EnterSafe(now)` / `Reset(now)`: the system mode entered / left the latched SAFE state.
- `Postpone(since, seconds, now, limit)`: the shell read no channel message for `seconds`
  of the time after `since` (its loop was busy, stalled or descheduled). Every open request
  whose deadline is after `since` has it moved `seconds` later: time in which the shell could not have heard a result is not counted against the
  channels. No request's deadline moves more than `limit` seconds in all, so a shell that is
  away most of the time cannot keep a silent channel from being judged. A request whose
  deadline fell at or before `since` is judged as before. A `Postpone` neither needs nor
  moves the voter's clock (it is never "time going backwards"); the next other event
  catches up.

Every event but `Postpone` first advances the voter's clock to `event.now` and closes every
request whose deadline is `<= now`, in deadline order, before the event itself is applied.
So a result counts for its request if and only if its `now < deadline`; one stamped at or
after the deadline is a late result. A shell should still send a `Tick` at `next_deadline()`, so that
a request with silent channels is answered on time.

Decisions out (frozen dataclasses), in the order they happen; for one request the answer
comes before the findings it causes:

- `Release(req_id, channel, agreed)`: release the C the shell holds for `channel`'s result.
  `agreed` lists the channels whose results agreed (all of them hold bit-identical C).
- `Fail(req_id, error, detail)`: answer the request with a typed error. `error` is one of
  `"safe_state"` (`SafeStateError`), `"timeout"` (`VoteTimeoutError`), `"disagreement"`
  (`DisagreementError`), `"channel_error"` (a channel reported an error and no agreeing
  quorum is left).
- `Disagreement(req_id, policy, minority, majority)`: the ok results of a request did not
  all agree. `majority` is the set of channels that belong to *every* largest group of
  mutually agreeing results; `minority` is every other channel with an ok result, i.e. the
  suspects. With two channels that differ (2oo2, 1oo2D, or 2oo3 with one channel failed
  or late) nothing singles one out: `minority` is both and `majority` is `()`. In 2oo3 with
  exactly one channel differing from the two others, `minority` is that one channel. With
  diverse variants agreement is not transitive (A~B and B~C on C alone while A and C, of
  one variant, differ in ES): then `majority=(B,)` and `minority=(A, C)`.
- `DeadlineMiss(req_id, channel)`: a voting channel had sent no result by the deadline.
- `ChannelFailed(req_id, channel, reason)`: a channel reported `ok=False`.
- `RequestSelfTest(channels)`: 1oo2D or 1oo3D mismatch; self-test these channels (every
  voter with an ok result) now; the controller isolates each one that fails.

Exactly one `Release` or `Fail` per request, ever. A request is *answered* as soon as the
outcome is certain (2oo3 releases as soon as two results agree; any policy fails as soon as
no quorum of agreeing results is possible any more) and *closed* when every voter has
reported or the deadline has passed. Findings about the request (`DeadlineMiss`,
`Disagreement`, `RequestSelfTest`) come at close, so a 2oo3 request released early still
judges its third channel. Every request is answered no later than the first event with
`now >= deadline`.

Policies (a result "agrees" with another per `agree`):

| policy | released when                     | findings on mismatch                     |
|--------|-----------------------------------|------------------------------------------|
| 1oo1D  | the one channel reports ok        | —                                        |
| 2oo2   | both agree                        | Disagreement (the controller goes SAFE)  |
| 1oo2D  | both agree                        | Disagreement + RequestSelfTest(both)     |
| 2oo3   | any two agree (released at once)  | Disagreement naming the minority         |
| 1oo3D  | all three agree                   | Disagreement + RequestSelfTest(all ok)   |

A 1oo2D request whose other channel reported ok=False is *not* released on the survivor's
word: the table releases only on agreement. The `ChannelFailed` finding lets the
controller isolate the failed channel and degrade to 1oo1D for the requests that follow.
A 1oo2D mismatch is answered at once with `disagreement` instead of being held for the
self-tests: a self-test takes a channel's own input queue slot and often longer than the
remaining deadline, and the answer must not depend on timing.

1oo3D is the HFT 2 policy (`safemon.hft`): three channels, released only when all three
agree, so two faulty channels that return the same wrong result are still outvoted by the
third. Its `Disagreement` describes the split like 2oo3's, but the two that agree are not
trusted over the one that differs (they may be the two faulty ones): the findings ask for
a self-test of every channel with an ok result, and the controller isolates what fails.
The name follows IEC 61508's MooN(D): one healthy channel of three suffices to withhold
a wrong product (1oo3), with diagnostics (D) that localise the fault after a mismatch
so the other channels continue, degraded to 1oo2D.

The `error` of a `Fail` that is not `safe_state`: `disagreement` when two or more ok
results were in hand and no quorum of them agreed (at the deadline: when they did not all
agree; 1oo3D's two agreeing results with a silent third are a `timeout`); otherwise
`timeout` at the deadline or `channel_error` before it.

SAFE: on `EnterSafe` every open request still unanswered fails with `safe_state` and every
open request is closed without further findings (the state is latched; the controller has
already acted). Until `Reset`, each `Submit` is answered at once with `safe_state`, and
nothing is ever released. `EnterSafe` while SAFE and `Reset` while not SAFE change nothing.

Bad events raise `InvalidInputError` and leave the voter unchanged: time going backwards,
a non-finite time, a `Submit` whose `req_id` is open or recently closed, whose deadline is
not after its `now`, or whose voting set does not fit its policy; a `ChannelResult` with
`ok=True` and an empty C digest or an error text, or `ok=False` without one. Results the
protocol can produce in normal operation are counted instead, never raised: duplicates
(`duplicate_results`), results after the request closed (`late_results`), results for a
request id never seen or long forgotten (`unknown_results`), and results from a channel
that is not in the request's voting set (`stray_results`). The voter remembers the ids of
the last `remember_closed` closed requests to tell late results from unknown ones.
"""

from __future__ import annotations

import heapq
import itertools
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Literal, TypeAlias, get_args

from safemon.errors import InvalidInputError
from safemon.seconds import check_seconds, postponed
from safemon.states import Policy

__all__ = [
    "OUTCOMES",
    "ChannelFailed",
    "ChannelResult",
    "DeadlineMiss",
    "Decision",
    "Disagreement",
    "EnterSafe",
    "Event",
    "Fail",
    "FailReason",
    "Outcome",
    "Postpone",
    "Release",
    "RequestSelfTest",
    "Reset",
    "Submit",
    "Tick",
    "Voter",
    "agree",
]

FailReason: TypeAlias = Literal["safe_state", "timeout", "disagreement", "channel_error"]
Outcome: TypeAlias = Literal["released", "safe_state", "timeout", "disagreement", "channel_error"]
#: Every outcome label of `safemon_votes_total{policy,outcome}`, in a stable order.
OUTCOMES: tuple[Outcome, ...] = get_args(Outcome)


# ---------------------------------------------------------------------------- events in


@dataclass(frozen=True, slots=True)
class Submit:
    """Open request `req_id` at `now`; answer it by `deadline` (seconds, same clock).

    `voters` are the names of the channels that vote on it (the UP channels at submit time)
    and `policy` the effective policy; `len(voters) == policy.channels`, names distinct.
    Raises `InvalidInputError` on a malformed submit.
    """

    req_id: int
    now: float
    deadline: float
    voters: tuple[str, ...]
    policy: Policy

    def __post_init__(self) -> None:
        if isinstance(self.req_id, bool) or not isinstance(self.req_id, int):
            raise InvalidInputError(f"req_id must be an int, got {self.req_id!r}")
        check_seconds("now", self.now)
        check_seconds("deadline", self.deadline)
        if self.deadline <= self.now:
            raise InvalidInputError(
                f"request {self.req_id}: deadline {self.deadline} is not after now {self.now}"
            )
        if not isinstance(self.policy, Policy):
            raise InvalidInputError(f"policy must be a Policy, got {self.policy!r}")
        if not isinstance(self.voters, tuple) or not all(
            isinstance(v, str) and v for v in self.voters
        ):
            raise InvalidInputError(
                f"voters must be a tuple of non-empty channel names, got {self.voters!r}"
            )
        if len(set(self.voters)) != len(self.voters):
            raise InvalidInputError(f"request {self.req_id}: duplicate voters {self.voters!r}")
        if len(self.voters) != self.policy.channels:
            raise InvalidInputError(
                f"request {self.req_id}: policy {self.policy.value} needs "
                f"{self.policy.channels} voter(s), got {len(self.voters)}: {self.voters!r}"
            )


@dataclass(frozen=True, slots=True)
class ChannelResult:
    """One channel's result for request `req_id`, received at `now`.

    `c_digest` / `es_digest` are digests (any fixed hash the shell picks, the same for all
    channels) of the C and ES arrays' bytes; `variant` names the kernel variant (tile config
    and signature) so that diverse channels compare C only. `ok=False` means the channel
    reported an error, described by `error`; the digests are then ignored.
    Raises `InvalidInputError` on a malformed result.
    """

    req_id: int
    channel: str
    now: float
    ok: bool
    c_digest: bytes
    es_digest: bytes
    variant: str
    error: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.req_id, bool) or not isinstance(self.req_id, int):
            raise InvalidInputError(f"req_id must be an int, got {self.req_id!r}")
        if not isinstance(self.channel, str) or not self.channel:
            raise InvalidInputError(f"channel must be a non-empty name, got {self.channel!r}")
        check_seconds("now", self.now)
        if not isinstance(self.ok, bool):
            raise InvalidInputError(f"ok must be a bool, got {self.ok!r}")
        if not isinstance(self.c_digest, bytes) or not isinstance(self.es_digest, bytes):
            raise InvalidInputError("c_digest and es_digest must be bytes")
        if not isinstance(self.variant, str):
            raise InvalidInputError(f"variant must be a str, got {self.variant!r}")
        if self.ok:
            if self.error is not None:
                raise InvalidInputError(
                    f"{self.channel} request {self.req_id}: ok=True with error {self.error!r}"
                )
            if not self.c_digest:
                # An empty digest would make two broken channels "agree" on nothing.
                raise InvalidInputError(
                    f"{self.channel} request {self.req_id}: ok=True with an empty c_digest"
                )
        elif not isinstance(self.error, str) or not self.error:
            raise InvalidInputError(
                f"{self.channel} request {self.req_id}: ok=False needs an error text"
            )


@dataclass(frozen=True, slots=True)
class Tick:
    """Time is now `now` seconds; close every request whose deadline is `<= now`."""

    now: float

    def __post_init__(self) -> None:
        check_seconds("now", self.now)


@dataclass(frozen=True, slots=True)
class EnterSafe:
    """The system mode became SAFE (latched): fail everything pending, release nothing."""

    now: float

    def __post_init__(self) -> None:
        check_seconds("now", self.now)


@dataclass(frozen=True, slots=True)
class Reset:
    """An operator reset left SAFE: requests submitted from now on are voted again."""

    now: float

    def __post_init__(self) -> None:
        check_seconds("now", self.now)


@dataclass(frozen=True, slots=True)
class Postpone:
    """The shell read no channel message for `seconds` of the time after `since` (seconds,
    same clock; `0 <= seconds <= now - since`): every open request whose deadline is after
    `since` is answered and judged `seconds` later, but no request more than `limit`
    (seconds, >= 0) later in all. Raises `InvalidInputError` otherwise."""

    since: float
    seconds: float
    now: float
    limit: float

    def __post_init__(self) -> None:
        for name in ("since", "seconds", "now", "limit"):
            check_seconds(name, getattr(self, name))
        if self.limit < 0:
            raise InvalidInputError(f"postpone: limit must be >= 0, got {self.limit}")
        if not 0.0 <= self.seconds <= self.now - self.since:
            raise InvalidInputError(
                f"postpone: seconds {self.seconds} must lie in [0, now - since = "
                f"{self.now - self.since}]"
            )


Event: TypeAlias = Submit | ChannelResult | Tick | EnterSafe | Reset | Postpone

# ------------------------------------------------------------------------- decisions out


@dataclass(frozen=True, slots=True)
class Release:
    """Answer `req_id` with the C held for `channel`'s result; `agreed` agreed bit-for-bit."""

    req_id: int
    channel: str
    agreed: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Fail:
    """Answer `req_id` with the typed error `error`; `detail` is for humans and logs."""

    req_id: int
    error: FailReason
    detail: str


@dataclass(frozen=True, slots=True)
class Disagreement:
    """The ok results of `req_id` did not all agree (see the module docstring for the sets)."""

    req_id: int
    policy: Policy
    minority: tuple[str, ...]
    majority: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class DeadlineMiss:
    """`channel` had sent no result for `req_id` by the deadline: failed for that request."""

    req_id: int
    channel: str


@dataclass(frozen=True, slots=True)
class ChannelFailed:
    """`channel` reported an error for `req_id`; `reason` is the channel's error text."""

    req_id: int
    channel: str
    reason: str


@dataclass(frozen=True, slots=True)
class RequestSelfTest:
    """Self-test each of `channels` now (1oo2D/1oo3D mismatch); each that fails is isolated."""

    channels: tuple[str, ...]


Decision: TypeAlias = Release | Fail | Disagreement | DeadlineMiss | ChannelFailed | RequestSelfTest


def agree(a: ChannelResult, b: ChannelResult) -> bool:
    """Whether two results agree: both ok, bit-identical C, and for one variant identical ES.

    Channels of different variants ("diverse") have different thread layouts, so their ES
    arrays are not comparable; each is checked against its own golden pattern instead.
    """
    if not (a.ok and b.ok) or a.c_digest != b.c_digest:
        return False
    return a.variant != b.variant or a.es_digest == b.es_digest


# ------------------------------------------------------------------------------ the core


@dataclass(slots=True)
class _Request:
    submit: Submit
    seq: int  # tells this request's heap entry from a stale one of an evicted, reused id
    deadline: float  # the submit's, moved later by every `Postpone` that found it open
    postponed: float = 0.0  # how much later, in all (at most a `Postpone`'s limit)
    results: dict[str, ChannelResult] = field(default_factory=dict)
    answered: bool = False


class Voter:
    """The voting state machine. One instance per daemon; not thread-safe.

    `remember_closed`: how many closed request ids are kept to classify late results
    (must be >= 0). See the module docstring for the full contract.
    """

    def __init__(self, *, remember_closed: int = 65536) -> None:
        if isinstance(remember_closed, bool) or not isinstance(remember_closed, int):
            raise InvalidInputError(f"remember_closed must be an int, got {remember_closed!r}")
        if remember_closed < 0:
            raise InvalidInputError(f"remember_closed must be >= 0, got {remember_closed}")
        self._remember = remember_closed
        self._now: float | None = None
        self._safe = False
        self._open: dict[int, _Request] = {}
        self._closed: OrderedDict[int, None] = OrderedDict()
        self._deadlines: list[tuple[float, int, int]] = []  # (deadline, seq, req_id)
        self._seq = itertools.count()
        self._votes: dict[tuple[Policy, Outcome], int] = {
            (p, o): 0 for p in Policy for o in OUTCOMES
        }
        self._late = 0
        self._duplicates = 0
        self._unknown = 0
        self._stray = 0

    # -------------------------------------------------------------- introspection

    @property
    def now(self) -> float | None:
        """The `now` of the last event handled (seconds), or None before the first."""
        return self._now

    @property
    def safe(self) -> bool:
        """Whether the voter is in the latched SAFE state."""
        return self._safe

    @property
    def open_requests(self) -> int:
        """Requests not yet closed (including answered 2oo3 requests still judging)."""
        return len(self._open)

    @property
    def unanswered(self) -> int:
        """Open requests that have had neither a Release nor a Fail yet."""
        return sum(1 for r in self._open.values() if not r.answered)

    @property
    def late_results(self) -> int:
        """Results that arrived after their request closed (never released)."""
        return self._late

    @property
    def duplicate_results(self) -> int:
        """Second and later results from one channel for one open request (ignored)."""
        return self._duplicates

    @property
    def unknown_results(self) -> int:
        """Results for a request id that was never submitted or is no longer remembered."""
        return self._unknown

    @property
    def stray_results(self) -> int:
        """Results from a channel outside the request's voting set (ignored)."""
        return self._stray

    def votes(self) -> dict[tuple[Policy, Outcome], int]:
        """Answered requests by (policy, outcome), every pair present; a copy.

        Feeds `safemon_votes_total{policy,outcome}`; the counts only grow.
        """
        return dict(self._votes)

    def next_deadline(self) -> float | None:
        """The earliest deadline of an open request (seconds), or None: when to send a Tick."""
        while self._deadlines:
            _, seq, req_id = self._deadlines[0]
            req = self._open.get(req_id)
            if req is not None and req.seq == seq:
                return self._deadlines[0][0]
            heapq.heappop(self._deadlines)  # the request closed early: a stale entry
        return None

    # -------------------------------------------------------------------- events

    def handle(self, event: Event) -> list[Decision]:
        """Apply one event and return the decisions it causes, in order.

        Raises `InvalidInputError` (and changes nothing) if time goes backwards or a
        `Submit` reuses an open or remembered request id; `TypeError` for a non-event.
        """
        if not isinstance(event, Submit | ChannelResult | Tick | EnterSafe | Reset | Postpone):
            raise TypeError(f"not a voter event: {event!r}")
        if isinstance(event, Postpone):  # moves deadlines; needs and moves no clock
            self._postpone(event)
            return []
        if self._now is not None and event.now < self._now:
            raise InvalidInputError(
                f"time went backwards: {type(event).__name__} at {event.now} after {self._now}"
            )
        if isinstance(event, Submit) and (
            event.req_id in self._open or event.req_id in self._closed
        ):
            raise InvalidInputError(f"request id {event.req_id} was already submitted")
        self._now = event.now
        out: list[Decision] = []
        self._expire(event.now, out)
        if isinstance(event, Submit):
            self._submit(event, out)
        elif isinstance(event, ChannelResult):
            self._result(event, out)
        elif isinstance(event, EnterSafe):
            self._enter_safe(out)
        elif isinstance(event, Reset):
            self._safe = False
        return out

    # ------------------------------------------------------------------ internals

    def _submit(self, ev: Submit, out: list[Decision]) -> None:
        if self._safe:
            out.append(self._fail_once(ev, "safe_state", "the system is in the SAFE state"))
            self._remember_closed(ev.req_id)
            return
        req = _Request(submit=ev, seq=next(self._seq), deadline=ev.deadline)
        self._open[ev.req_id] = req
        heapq.heappush(self._deadlines, (ev.deadline, req.seq, ev.req_id))

    def _result(self, ev: ChannelResult, out: list[Decision]) -> None:
        req = self._open.get(ev.req_id)
        if req is None:
            if ev.req_id in self._closed:
                self._late += 1
            else:
                self._unknown += 1
            return
        if ev.channel not in req.submit.voters:
            self._stray += 1
            return
        if ev.channel in req.results:
            self._duplicates += 1
            return
        req.results[ev.channel] = ev
        if not req.answered:
            self._answer_early(req, out)
        if not ev.ok:
            assert ev.error is not None  # ChannelResult.__post_init__ guarantees it
            out.append(ChannelFailed(ev.req_id, ev.channel, ev.error))
        if len(req.results) == len(req.submit.voters):
            self._close(req, out)

    def _answer_early(self, req: _Request, out: list[Decision]) -> None:
        """Release if a quorum agrees; fail if no quorum can agree any more; else wait."""
        voters = req.submit.voters
        quorum = req.submit.policy.quorum
        for group in itertools.combinations(voters, quorum):
            got = [req.results[ch] for ch in group if ch in req.results]
            if len(got) == quorum and all(r.ok for r in got) and _all_agree(got):
                out.append(self._release(req, group))
                return
        if not any(
            self._could_agree(req, group) for group in itertools.combinations(voters, quorum)
        ):
            oks = [ch for ch in voters if ch in req.results and req.results[ch].ok]
            if len(oks) >= 2:
                detail = (
                    f"results of {', '.join(oks)} do not agree (policy {req.submit.policy.value})"
                )
                out.append(self._fail(req, "disagreement", detail))
            else:
                errs = [f"{ch}: {r.error}" for ch, r in req.results.items() if not r.ok]
                out.append(self._fail(req, "channel_error", "; ".join(errs)))

    @staticmethod
    def _could_agree(req: _Request, group: tuple[str, ...]) -> bool:
        """Whether `group` may still become an agreeing quorum as more results arrive."""
        got = [req.results[ch] for ch in group if ch in req.results]
        return all(r.ok for r in got) and _all_agree(got)

    def _postpone(self, ev: Postpone) -> None:
        moved = False
        for req in self._open.values():
            before = req.deadline
            req.deadline, req.postponed = postponed(
                req.deadline, req.postponed, since=ev.since, seconds=ev.seconds, limit=ev.limit)
            moved = moved or req.deadline != before
        if moved:  # one heap entry per open request, at its new deadline
            self._deadlines = [(r.deadline, r.seq, rid) for rid, r in self._open.items()]
            heapq.heapify(self._deadlines)

    def _expire(self, now: float, out: list[Decision]) -> None:
        while self._deadlines and self._deadlines[0][0] <= now:
            _, seq, req_id = heapq.heappop(self._deadlines)
            req = self._open.get(req_id)
            if req is None or req.seq != seq:
                continue  # closed early, before its deadline
            missing = [ch for ch in req.submit.voters if ch not in req.results]
            if not req.answered:
                oks = [ch for ch, r in req.results.items() if r.ok]
                if len(oks) >= 2 and not _all_agree([req.results[ch] for ch in oks]):
                    detail = (
                        f"results of {', '.join(oks)} do not agree and "
                        f"{', '.join(missing)} missed the deadline"
                    )
                    out.append(self._fail(req, "disagreement", detail))
                else:
                    budget = req.submit.deadline - req.submit.now
                    detail = f"{', '.join(missing)} sent no result within {budget:.3g} s"
                    if req.postponed:
                        detail += f" (and {req.postponed:.3g} s in which the shell read nothing)"
                    out.append(self._fail(req, "timeout", detail))
            out.extend(DeadlineMiss(req_id, ch) for ch in missing)
            self._close(req, out)

    def _close(self, req: _Request, out: list[Decision]) -> None:
        """Judge the request's ok results, emit the findings, forget the request."""
        assert req.answered, "a request must be answered before it closes"
        voters = req.submit.voters
        ok = {ch: r for ch, r in req.results.items() if r.ok}
        majority = _majority(ok)
        minority = tuple(ch for ch in voters if ch in ok and ch not in majority)
        if minority:
            policy = req.submit.policy
            out.append(
                Disagreement(
                    req.submit.req_id,
                    policy,
                    minority=minority,
                    majority=tuple(ch for ch in voters if ch in majority),
                )
            )
            if policy is Policy.ONE_OO_TWO_D:
                out.append(RequestSelfTest(minority))
            elif policy is Policy.ONE_OO_THREE_D:
                # Agreement of two proves nothing here: test every channel that answered.
                out.append(RequestSelfTest(tuple(ch for ch in voters if ch in ok)))
        del self._open[req.submit.req_id]
        self._remember_closed(req.submit.req_id)

    def _enter_safe(self, out: list[Decision]) -> None:
        self._safe = True
        for req in list(self._open.values()):
            if not req.answered:
                out.append(self._fail(req, "safe_state", "the system entered the SAFE state"))
            # Latched: no findings. The controller already acted on what caused SAFE.
            del self._open[req.submit.req_id]
            self._remember_closed(req.submit.req_id)

    def _release(self, req: _Request, group: tuple[str, ...]) -> Release:
        assert not self._safe and not req.answered
        req.answered = True
        self._votes[(req.submit.policy, "released")] += 1
        return Release(req.submit.req_id, group[0], group)

    def _fail(self, req: _Request, error: FailReason, detail: str) -> Fail:
        assert not req.answered
        req.answered = True
        return self._fail_once(req.submit, error, detail)

    def _fail_once(self, submit: Submit, error: FailReason, detail: str) -> Fail:
        self._votes[(submit.policy, error)] += 1
        return Fail(submit.req_id, error, detail)

    def _remember_closed(self, req_id: int) -> None:
        if self._remember == 0:
            return
        self._closed[req_id] = None
        while len(self._closed) > self._remember:
            self._closed.popitem(last=False)


def _all_agree(results: list[ChannelResult]) -> bool:
    return all(agree(a, b) for a, b in itertools.combinations(results, 2))


def _majority(ok: dict[str, ChannelResult]) -> frozenset[str]:
    """The channels in every largest group of mutually agreeing ok results.

    Brute force over subsets: a request has at most three voters, so at most seven subsets.
    If every result agrees, that is all of them (no minority). With a tie between largest
    groups only their common members are trusted, so two differing results give no majority.
    """
    names = list(ok)
    for size in range(len(names), 0, -1):
        cliques = [
            frozenset(g)
            for g in itertools.combinations(names, size)
            if _all_agree([ok[ch] for ch in g])
        ]
        if cliques:
            return frozenset.intersection(*cliques)
    return frozenset()
