"""`LoopAttention`: which stretches of the daemon's loop count as time away from its channels."""

from __future__ import annotations

import pytest

from safemon.loop_attention import AWAY_THRESHOLD_S, Away, LoopAttention


def test_a_short_stretch_is_a_loop_turn_and_a_long_one_is_reported_once() -> None:
    a = LoopAttention(10.0)
    assert a.away(10.0 + AWAY_THRESHOLD_S * 0.9) is None  # under the threshold: a loop turn
    assert a.away(10.5) == Away(10.0, pytest.approx(0.5))
    assert a.away(10.52) is None  # reported: the loop counts as listening from 10.5
    assert a.away(10.6) == Away(10.5, pytest.approx(0.1))


def test_polls_and_pumps_are_listening_and_the_stretch_before_them_is_returned() -> None:
    a = LoopAttention(0.0)
    assert a.start_listening(0.01) is None
    assert a.away(5.0) is None  # nothing is away while the loop listens
    a.stop_listening(0.04, timeout_s=0.05)
    assert a.listened_at == 0.04
    assert a.start_listening(1.04) == Away(0.04, pytest.approx(1.0))  # one long message
    a.stop_listening(1.5)  # a pump of inline channels: their time is theirs
    assert a.away(1.52) is None
    assert a.away(1.6) == Away(1.5, pytest.approx(0.1))


def test_a_poll_that_comes_back_late_listened_only_until_its_timeout() -> None:
    """Descheduled inside a 50 ms poll for 2 s: what lies past the timeout is away."""
    a = LoopAttention(0.0)
    a.start_listening(1.0)
    a.stop_listening(3.05, timeout_s=0.05)
    assert a.away(3.05) == Away(1.05, pytest.approx(2.0))
    a.start_listening(4.0)
    a.stop_listening(4.09, timeout_s=0.05)  # late by less than the threshold: listened
    assert a.listened_at == 4.09


def test_misuse_is_refused() -> None:
    with pytest.raises(ValueError, match="threshold_s"):
        LoopAttention(0.0, threshold_s=0.0)
    with pytest.raises(RuntimeError, match="start_listening"):
        LoopAttention(0.0).stop_listening(1.0)
