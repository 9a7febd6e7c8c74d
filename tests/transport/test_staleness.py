"""StalenessFilter: epoch must match; monotonic kinds need a newer seq; answers use a replay window."""

from __future__ import annotations

import pytest

from safemon.transport.wire import Header, Kind, Rejected, RejectReason, StalenessFilter


def h(kind: Kind, seq: int, *, epoch: int = 5, channel: str = "ch0") -> Header:
    return Header(v=1, epoch=epoch, seq=seq, channel=channel, kind=kind)


def stale(f: StalenessFilter, header: Header) -> bool:
    try:
        f.check(header)
    except Rejected as rejected:
        assert rejected.reason is RejectReason.STALE
        return True
    return False


def test_other_epochs_are_stale_in_both_directions() -> None:
    f = StalenessFilter(epoch=5)
    assert stale(f, h(Kind.HEARTBEAT, 1, epoch=4))
    assert stale(f, h(Kind.HEARTBEAT, 1, epoch=6))
    assert not stale(f, h(Kind.HEARTBEAT, 1))


@pytest.mark.parametrize(
    "kind", [Kind.REQUEST, Kind.HEARTBEAT, Kind.CONTROL, Kind.REGISTER, Kind.EVENT]
)
def test_monotonic_kinds_need_a_strictly_newer_seq(kind: Kind) -> None:
    f = StalenessFilter(epoch=5)
    assert not stale(f, h(kind, 10))
    assert stale(f, h(kind, 10))  # replay
    assert stale(f, h(kind, 3))  # older
    assert not stale(f, h(kind, 11))
    assert not stale(f, h(kind, 1000))  # gaps are fine (lost messages are not stale)
    assert stale(f, h(kind, 999))


def test_streams_are_independent_per_channel_and_kind() -> None:
    f = StalenessFilter(epoch=5)
    assert not stale(f, h(Kind.HEARTBEAT, 10, channel="a"))
    assert not stale(f, h(Kind.HEARTBEAT, 1, channel="b"))
    assert not stale(f, h(Kind.EVENT, 1, channel="a"))


@pytest.mark.parametrize("kind", [Kind.RESULT, Kind.REPLY, Kind.ERROR])
def test_answer_kinds_accept_reordering_but_not_duplicates(kind: Kind) -> None:
    f = StalenessFilter(epoch=5, window=8)
    for seq in (4, 2, 3, 9, 5):
        assert not stale(f, h(kind, seq)), seq
    for seq in (4, 2, 3, 9, 5):
        assert stale(f, h(kind, seq)), seq
    assert stale(f, h(kind, 1))  # 9 - 1 = 8: outside the window of 8
    assert not stale(f, h(kind, 6))  # inside the window, never seen
    assert not stale(f, h(kind, 100))  # a jump past the window forgets the old bitmap...
    assert stale(f, h(kind, 100))
    assert not stale(f, h(kind, 99))  # ...but tracks the new one
    assert stale(f, h(kind, 92))


def test_rejected_messages_leave_no_trace() -> None:
    f = StalenessFilter(epoch=5)
    assert stale(f, h(Kind.REQUEST, 50, epoch=4))
    assert not stale(f, h(Kind.REQUEST, 1))  # the wrong-epoch 50 did not advance the stream


def test_reset_starts_a_new_epoch_with_empty_history() -> None:
    f = StalenessFilter(epoch=5)
    assert not stale(f, h(Kind.REQUEST, 10))
    f.reset(6)
    assert f.epoch == 6
    assert stale(f, h(Kind.REQUEST, 11))  # epoch 5 is over
    assert not stale(f, h(Kind.REQUEST, 1, epoch=6))


def test_stream_count_is_bounded() -> None:
    f = StalenessFilter(epoch=5, max_streams=2)
    assert not stale(f, h(Kind.REQUEST, 1, channel="a"))
    assert not stale(f, h(Kind.REQUEST, 1, channel="b"))
    assert stale(f, h(Kind.REQUEST, 1, channel="c"))
    assert not stale(f, h(Kind.REQUEST, 2, channel="a"))
