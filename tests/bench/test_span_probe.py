"""scripts/span_probe.py's `after_the_reply`: from recorded spans (ns, one clock), how long
an inline lockstep round went on after its reply, and whether the client's next request
was sent before the round ended."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest

from tests.script_module import REPO, load_script

CALL = "client: send + wait for the reply"
REPLY = "daemon: encode + send a reply"
ROUND = "inline: one lockstep round"
HANDLED = "daemon: a client message (core + effects)"
US = 1000  # the spans are in ns

#: Three voted requests with inline channels, times in µs.
THREE = [
    # request 1: reply sent at 800, its round ends at 1,100; the next send is at 1,050
    (0, 1000 * US, CALL), (790 * US, 800 * US, REPLY), (100 * US, 1100 * US, ROUND),
    (50 * US, 90 * US, HANDLED),
    # request 2: reply at 1,900, round ends at 1,950; the next send is at 2,100
    (1050 * US, 2000 * US, CALL), (1890 * US, 1900 * US, REPLY), (1120 * US, 1950 * US, ROUND),
    (1100 * US, 1115 * US, HANDLED),
    # request 3 (the last: nothing after it to compare)
    (2100 * US, 3000 * US, CALL), (2890 * US, 2900 * US, REPLY), (2150 * US, 2950 * US, ROUND),
    (2150 * US, 2160 * US, HANDLED),
]


@pytest.fixture
def probe(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(REPO / "scripts"))  # for its `probe_hook` import
    return load_script("span_probe")


def _write(out: Path, spans: list[tuple[int, int, str]]) -> None:
    (out / "spans").mkdir()
    (out / "spans" / "1.jsonl").write_text("\n".join(json.dumps(s) for s in spans))


def _p50s(text: str) -> dict[str, str]:
    return {cells[1].strip(): cells[2].strip()
            for line in text.splitlines() if line.startswith("| ") and "p50" not in line
            for cells in [line.split("|")]}


def test_a_round_that_outlasts_the_next_send_is_counted_and_measured(
        tmp_path: Path, probe: ModuleType) -> None:
    _write(tmp_path, THREE)
    text = probe.after_the_reply(tmp_path, 0, 10**9)
    p50 = _p50s(text)
    assert "next request sent while the round still ran: 1 of 2" in text
    assert p50["round goes on after the reply (left)"] == "175.0"  # median of 300 and 50
    assert p50["reply to the next send (gap)"] == "225.0"  # of 250 and 200
    assert p50["next request sent before the round ended (blocked)"] == "25.0"  # of 50 and 0
    assert p50["next send to its handling"] == "50.0"  # 50 and 50


def test_spans_outside_the_window_are_left_out(tmp_path: Path, probe: ModuleType) -> None:
    _write(tmp_path, THREE)
    text = probe.after_the_reply(tmp_path, 1050 * US, 10**9)  # request 1 begins before it
    assert "next request sent while the round still ran: 0 of 1" in text
    assert _p50s(text)["round goes on after the reply (left)"] == "50.0"


def test_requests_without_a_lockstep_round_give_no_rows(tmp_path: Path, probe: ModuleType) -> None:
    _write(tmp_path, [s for s in THREE if s[2] != ROUND])  # process channels: no round
    assert "no request" in probe.after_the_reply(tmp_path, 0, 10**9)
