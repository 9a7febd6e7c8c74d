from pathlib import Path

from tests.channels.test_supervisor import _three_registered


def test_one_stale_heartbeat_excuses_a_hung_channel_at_most_the_ftti(tmp_path: Path) -> None:
    """F1. c2 sent its last heartbeat at 0 and hung. The daemon stalls 0-0.9 and 0.9-1.8
    while it handles c0's messages (one loop turn, no poll between); each stall is
    reported on c0's next message. c2's stale heartbeat is read at 1.8. Documented: at most
    ftti (1 s) excused per such message -> silent clock <= 1.0 -> lost at the first tick
    back (1.81). Actual: lost only at 2.11; left unread, c2 is lost at 1.81."""
    sup, cfg = _three_registered(tmp_path)
    assert (cfg.timing.ftti_s, cfg.timing.heartbeat_timeout_s) == (1.0, 0.3)
    sup.on_heartbeat("c0", 0, 0.9)
    sup.postpone(0.0, 0.9, 0.9)
    sup.on_heartbeat("c0", 0, 1.8)
    sup.postpone(0.9, 0.9, 1.8)
    sup.on_heartbeat("c1", 0, 1.8)
    sup.on_heartbeat("c2", 0, 1.8)  # sent at 0, waited through both stalls
    assert [x.channel for x in sup.tick(1.81)] == ["c2"]


def test_a_stale_heartbeat_read_inside_a_long_stall_is_charged(tmp_path: Path) -> None:
    """F1, stamped path: daemon stopped 2 s inside its poll (50 ms timeout from 0.01);
    c0's heartbeat sent at 0 (then hung) is the first message read. The docstring says the
    read 'counts as moved already', and a stall over ftti is 'blamed as before'."""
    sup, _cfg = _three_registered(tmp_path)
    sup.on_heartbeat("c0", 0, 2.0)
    sup.postpone(0.06, 1.94, 2.0)
    for n in ("c1", "c2"):
        sup.on_heartbeat(n, 0, 2.0)
    assert [x.channel for x in sup.tick(2.01)] == ["c0"]


def test_the_first_channel_read_after_a_stall_keeps_the_same_allowance(tmp_path: Path) -> None:
    """F2. c0 and c1 each computed through the stall 0-0.9 and answered just before its end;
    c0's answer is read at 0.9 (before the stall is reported), c1's at 0.901 (after).
    The loop then stalls 0.95-1.85 before either is read again: 0.9 s away since each was
    read, under the ftti of 1 s 'between two messages read'. c0 alone is lost."""
    sup, _cfg = _three_registered(tmp_path)
    for n in ("c0", "c1", "c2"):
        sup.on_work_sent(n, 1, 1.0)
    sup.on_work_done("c0", 1, 0.9)
    sup.postpone(0.0, 0.9, 0.9)
    sup.on_work_done("c1", 1, 0.901)
    sup.on_work_done("c2", 1, 0.901)
    sup.postpone(0.95, 0.9, 1.85)
    assert sup.tick(1.85) == []
