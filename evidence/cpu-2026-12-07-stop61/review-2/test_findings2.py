"""Review of c89f912 (send stamps). Run from /work/main:
PYTHONPATH=/work/main .venv/bin/python -m pytest -q -p no:cacheprovider /tmp/review-sup2/test_findings2.py"""
from __future__ import annotations

import time
from collections.abc import Generator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from safemon.channels import inline
from tests.channels.test_supervisor import _three_registered
from tests.runtime.helpers import make_config, operands, reference, same_bits, system


def test_an_inline_channel_idle_after_its_result_in_a_serial_round_is_kept(tmp_path: Path) -> None:
    """F1 (supervisor level, the daemon's call order). Three inline channels; the pump's
    `inline.tick(1.0)` makes a heartbeat for each, then one lockstep round runs a
    host-memory request channel after channel (0.2 s each, in `launch`): RESULTs stamped
    1.2, 1.4, 1.6. `after_finish` takes every outbox at 1.6; the post-round `_take_inline`
    finds nothing, so the pump returns with no further `inline.tick`, and the loop's next
    `_advance` ticks the supervisor. c0 was silent only while the daemon ran c1 and c2.
    6a30a80 (read times): []. c89f912: c0 lost, 'silent for 0.410 s'."""
    sup, _cfg = _three_registered(tmp_path)
    for n in ("c0", "c1", "c2"):
        sup.on_heartbeat(n, 0, 0.95, 0.95)
        sup.on_work_sent(n, 1, 2.2)
    for n, end in (("c0", 1.2), ("c1", 1.4), ("c2", 1.6)):
        sup.on_heartbeat(n, 0, 1.6, 1.0)
        sup.on_work_done(n, 1, 1.6, end)
    assert sup.tick(1.61) == []


def test_inline_channels_computing_a_request_in_turn_stay_up(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """F1 end to end: real daemon, 2oo3 on three inline channels (NumPy), default timing
    (heartbeat 0.1 / timeout 0.5 / ftti 2.0); each live request takes 0.3 s of host compute
    per channel (a sleep before the real step, in `launch`; request_deadline_s 1.5 stands in
    for the price of that compute, which admission allows: max_ahead_s = 0.8 s).
    6a30a80: no fault, incarnations 0. c89f912: c0 'heartbeat_lost' ('silent for ~0.61 s')
    after the first request, restarted (incarnation 1)."""
    real = inline._InlineWorker._request_steps

    def steps(self: Any, msg: Any) -> Generator[None, None, Any]:
        if msg.meta.get("job") == "live":
            time.sleep(0.3)
        return (yield from real(self, msg))

    monkeypatch.setattr(inline._InlineWorker, "_request_steps", steps)
    timing = {"request_deadline_s": 1.5, "dti_s": 1.0, "selftest_deadline_s": 0.2,
              "scrub_interval_s": 10.0, "heartbeat_interval_s": 0.1,
              "heartbeat_timeout_s": 0.5, "ftti_s": 2.0}
    cfg = make_config(tmp_path, "2oo3", placement="inline", extra={"timing": timing})
    x, w = operands()
    with system(cfg) as (_daemon, client):
        wid = client.register_weight(w)
        for _ in range(3):
            assert same_bits(client.matmul(x, wid, timeout=3.0), reference(x, w, cfg))
            time.sleep(0.3)
        st = client.status()
        assert [f for f in st["faults"] if f.get("kind") == "heartbeat_lost"] == []
        assert [c["incarnation"] for c in st["channels"]] == [0, 0, 0]


def test_a_hung_channel_is_not_found_later_than_before(tmp_path: Path) -> None:
    """F2. c2 sends its last heartbeat at 0.0 and hangs (ftti 1.0, timeout 0.3).
    A: the daemon is stopped in a poll 0.05-0.55; c2's heartbeat is read at 0.55, then the
    stretch is reported. New: clock 0 -> 0.5 (moved 0.5), expires 0.8; old: 0.55 (moved 0.5).
    B: away 0.81-1.31 (the last tick was 0.79). New: c2's silence expired before `since`, so
    neither its clock nor `moved` changes; old: its clock moves 0.1 and `moved` reaches 1.0.
    At 1.31 the timers send c2 a self-test (deadline 1.81) before `supervisor.tick(1.31)`:
    that work now excuses it. C: away 1.32-2.22. New: the self-test's deadline moves by the
    0.5 left (-> 2.31); old: by 0. 6a30a80 finds c2 at tick(2.22); c89f912 only after 2.61."""
    sup, _cfg = _three_registered(tmp_path)

    def others(t: float) -> None:
        for n in ("c0", "c1"):
            sup.on_heartbeat(n, 0, t, t)

    sup.on_heartbeat("c2", 0, 0.55, 0.0)
    sup.postpone(0.05, 0.5, 0.55)
    others(0.55)
    assert sup.tick(0.79) == []
    others(0.79)
    sup.postpone(0.81, 0.5, 1.31)
    others(1.31)
    sup.on_work_sent("c2", 7, 1.81)
    assert sup.tick(1.31) == []
    sup.postpone(1.32, 0.9, 2.22)
    others(2.22)
    assert [x.channel for x in sup.tick(2.22)] == ["c2"]
