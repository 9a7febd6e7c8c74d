"""Pure parts of the robustness work: acknowledged weight delivery bookkeeping, the daemon
lock, channel-link tokens, the descriptor budget."""

from __future__ import annotations

import resource
from pathlib import Path

import pytest

from safemon.channels.link import LINK_FIELD, link_ok, link_token, new_link_key
from safemon.daemon_lock import DaemonLock, DaemonLockedError
from safemon.errors import ConfigError
from safemon.fdlimit import RESERVED_FDS, ensure_fd_budget
from safemon.weight_delivery import WeightDelivery


def test_delivery_keeps_at_most_window_unacknowledged_and_is_idle_when_all_acked() -> None:
    d = WeightDelivery(window=2)
    d.begin(["a", "b", "c"])
    sent = []
    while (w := d.next_to_send()) is not None:
        d.sent(w, deadline=1.0)
        sent.append(w)
    assert sent == ["a", "b"] and not d.idle
    assert d.ack("a") and not d.ack("a")  # a second ack is not awaited
    assert d.next_to_send() == "c"
    d.sent("c", 2.0)
    assert d.overdue(1.5) == ["b"] and d.next_deadline() == 1.0
    assert d.ack("b") and d.ack("c") and d.idle


def test_delivery_add_owes_a_new_weight_once_and_begin_starts_afresh() -> None:
    d = WeightDelivery()
    d.begin([])
    assert d.idle
    d.add("x")
    d.add("x")
    assert d.owes("x") and d.next_to_send() == "x"
    d.begin(())
    assert d.idle and not d.owes("x")
    with pytest.raises(ValueError):
        WeightDelivery(window=0)


def test_delivery_postpone_moves_only_acknowledgements_due_after_since() -> None:
    d = WeightDelivery()
    d.begin(["a", "b"])
    d.sent(d.next_to_send() or "", 1.0)
    d.sent(d.next_to_send() or "", 3.0)
    d.postpone(2.0, 1.5, 2.0)
    assert d.overdue(4.4) == ["a"]
    assert d.overdue(4.5) == ["a", "b"]
    d.postpone(4.0, 1.5, 2.0)  # at most 2 s in all: only 0.5 s of this one
    assert d.overdue(4.9) == ["a"]
    assert d.overdue(5.0) == ["a", "b"]


def test_a_second_lock_on_the_same_runtime_dir_is_refused_and_released_on_release(
        tmp_path: Path) -> None:
    rd = tmp_path / "rt"
    first = DaemonLock.acquire(rd, "x")
    assert (rd.stat().st_mode & 0o777) == 0o700
    with pytest.raises(DaemonLockedError, match="another safemon daemon named 'x'"):
        DaemonLock.acquire(rd, "x")
    first.release()
    DaemonLock.acquire(rd, "x").release()


def test_a_runtime_dir_open_to_others_is_refused(tmp_path: Path) -> None:
    rd = tmp_path / "open"
    rd.mkdir(mode=0o755)
    rd.chmod(0o755)
    with pytest.raises(ConfigError):
        DaemonLock.acquire(rd, "x")


def test_link_tokens_differ_per_key_channel_and_incarnation() -> None:
    k1, k2 = new_link_key(), new_link_key()
    t = link_token(k1, "c0", 0)
    assert len({t, link_token(k1, "c0", 1), link_token(k1, "c1", 0), link_token(k2, "c0", 0)}) == 4
    assert link_ok({LINK_FIELD: t}, t)
    assert not link_ok({}, t) and not link_ok({LINK_FIELD: 5}, t)
    assert not link_ok({LINK_FIELD: link_token(k2, "c0", 0)}, t)


def test_fd_budget_raises_the_soft_limit_and_refuses_an_impossible_bound() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        assert ensure_fd_budget(16) >= 16 + RESERVED_FDS
        if hard != resource.RLIM_INFINITY:
            with pytest.raises(ConfigError, match="LimitNOFILE"):
                ensure_fd_budget(int(hard))
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
