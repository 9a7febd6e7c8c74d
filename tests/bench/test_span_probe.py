"""scripts/span_probe.py's `after_the_reply`: from recorded spans (ns, one clock), how long
an inline lockstep round went on after its reply, and whether the client's next request
was sent before the round ended."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.script_module import REPO, load_script

CALL = "client: send + wait for the reply"
REPLY = "daemon: encode + send a reply"
ROUND = "inline: one lockstep round"
HANDLED = "daemon: a client message (core + effects)"


def _write(out: Path, spans: list[tuple[int, int, str]]) -> None:
    (out / "spans").mkdir()
    (out / "spans" / "1.jsonl").write_text("\n".join(json.dumps(s) for s in spans))


def _rows(text: str) -> dict[str, tuple[str, str]]:
    return {cells[1].strip(): (cells[2].strip(), cells[3].strip())
            for line in text.splitlines() if line.startswith("| ") and "p50" not in line
            for cells in [line.split("|")]}


def test_a_round_that_outlasts_the_next_send_is_counted_and_measured(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(REPO / "scripts"))
    probe = load_script("span_probe")
    us = 1000  # the spans are in ns
    _write(tmp_path, [
        # request 1: reply sent at 800 µs, its round ends at 1,100; the next send is at 1,050
        (0, 1000 * us, CALL), (790 * us, 800 * us, REPLY), (100 * us, 1100 * us, ROUND),
        (50 * us, 90 * us, HANDLED),
        # request 2: reply at 1,900, round ends at 1,950; the next send is at 2,100
        (1050 * us, 2000 * us, CALL), (1890 * us, 1900 * us, REPLY), (1120 * us, 1950 * us, ROUND),
        (1100 * us, 1115 * us, HANDLED),
        # request 3 (the last: nothing after it to compare)
        (2100 * us, 3000 * us, CALL), (2890 * us, 2900 * us, REPLY), (2150 * us, 2950 * us, ROUND),
        (2150 * us, 2160 * us, HANDLED),
    ])
    text = probe.after_the_reply(tmp_path, 0, 10**9)
    rows = _rows(text)
    assert "next request sent while the round still ran: 1 of 2" in text
    assert rows["round goes on after the reply (left)"][0] == "175.0"  # median of 300 and 50
    assert rows["reply to the next send (gap)"][0] == "225.0"  # of 250 and 200
    assert rows["next request sent before the round ended (blocked)"][0] == "25.0"  # of 50, 0
    assert rows["next send to its handling"][0] == "50.0"  # 50 and 50


def test_spans_outside_the_window_or_without_a_round_give_no_rows(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(REPO / "scripts"))
    probe = load_script("span_probe")
    _write(tmp_path, [(0, 1000, CALL), (790, 800, REPLY), (1050, 2000, CALL), (1100, 1115, HANDLED)])
    assert "no request" in probe.after_the_reply(tmp_path, 0, 10**9)  # process channels: no round
    assert "no request" in probe.after_the_reply(tmp_path, 5000, 10**9)
