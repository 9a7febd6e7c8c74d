"""A daemon whose own loop stops (SIGSTOP: a process descheduled, a VM paused) blames none of
its channels for it, and still finds a channel that failed meanwhile
(`safemon.loop_attention`, docs/SAFETY.md "Who is late").

A real daemon process (`safemon run`), three channel processes on ipc://, a client thread
sending products throughout. Until 2026-12-06 a 2 s stop of the daemon alone drove it to
SAFE: every channel's results and heartbeats waited unread, and were stamped late when the
loop read them.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from safemon.client import Client
from safemon.config import Config
from safemon.errors import SafemonError
from tests.runtime.helpers import make_config, operands, reference, same_bits, wait_for

#: How long the daemon's process is stopped: four heartbeat timeouts, and several times
#: every request's budget; under the 3 s FTTI, the most any deadline is moved.
STOP_S = 2.0
TIMING = {"heartbeat_interval_s": 0.1, "heartbeat_timeout_s": 0.5, "dti_s": 1.0,
          "selftest_deadline_s": 0.3, "ftti_s": 3.0, "request_deadline_s": 0.5}


def _status(client: Client) -> dict[str, Any] | None:
    try:
        return client.status()
    except SafemonError:
        return None


@contextmanager
def _daemon(tmp_path: Path, *, injection: bool = False) -> Iterator[tuple[Config, subprocess.Popen[bytes]]]:
    cfg = make_config(tmp_path, "2oo3", placement="process", transport="ipc",
                      extra={"timing": TIMING}, injection=injection)
    path = tmp_path / "daemon.yaml"
    path.write_text(yaml.safe_dump(json.loads(cfg.model_dump_json())))
    with (tmp_path / "daemon.err").open("wb") as err:
        proc = subprocess.Popen([sys.executable, "-m", "safemon", "run", "--config", str(path)],
                                stdout=subprocess.DEVNULL, stderr=err)
    try:
        yield cfg, proc
    finally:
        os.kill(proc.pid, signal.SIGCONT)  # never leave it stopped
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def _stop_under_traffic(cfg: Config, proc: subprocess.Popen[bytes], client: Client,
                        before_stop: Any = None) -> list[object]:
    """Products from another client before, during and after a `STOP_S` stop of the daemon
    process; every answer (True: bit-exact, or the error's type name)."""
    x, w = operands()
    want = reference(x, w, cfg)
    wid = client.register_weight(w)
    answers: list[object] = []
    stop = threading.Event()

    def traffic() -> None:
        other = Client(cfg)
        try:
            while not stop.is_set():
                try:
                    answers.append(same_bits(other.matmul(x, wid, timeout=10.0), want))
                except SafemonError as exc:  # every answer is checked by the caller
                    answers.append(type(exc).__name__)
        finally:
            other.close()

    sender = threading.Thread(target=traffic)
    sender.start()
    try:
        time.sleep(1.0)
        if before_stop is not None:
            before_stop()
        os.kill(proc.pid, signal.SIGSTOP)
        time.sleep(STOP_S)
        os.kill(proc.pid, signal.SIGCONT)
        time.sleep(2.0)  # several heartbeat timeouts and DTIs after the stop
    finally:
        stop.set()
        sender.join(30)
    return answers


def _loop_away_seconds(status: dict[str, Any]) -> float:
    with urllib.request.urlopen(status["metrics_url"], timeout=10) as r:
        text = r.read().decode()
    (line,) = [ln for ln in text.splitlines() if ln.startswith("safemon_loop_away_seconds_total ")]
    return float(line.split()[1])


def test_a_stopped_daemon_blames_no_channel_and_says_how_long_it_was_away(tmp_path: Path) -> None:
    with _daemon(tmp_path) as (cfg, proc):
        client = Client(cfg)
        try:
            assert wait_for(lambda: (_status(client) or {}).get("mode") == "NORMAL", 60)
            answers = _stop_under_traffic(cfg, proc, client)
            st = client.status()
            assert st["mode"] == "NORMAL" and not st["faults"], st
            assert [c["incarnation"] for c in st["channels"]] == [0, 0, 0], st["channels"]
            # Products sent before, during and after the stop: each bit-exact.
            assert len(answers) > 10 and all(a is True for a in answers), answers[-5:]
            assert _loop_away_seconds(st) >= STOP_S * 0.9
        finally:
            client.close()


def test_a_channel_that_hangs_while_the_daemon_is_stopped_is_still_found(tmp_path: Path) -> None:
    """c1 hangs just before the stop: it alone is faulted afterwards, the daemon degrades
    and keeps releasing bit-exact products from c0 and c2; nothing wrong is released."""
    with _daemon(tmp_path, injection=True) as (cfg, proc):
        client = Client(cfg)
        try:
            assert wait_for(lambda: (_status(client) or {}).get("mode") == "NORMAL", 60)
            answers = _stop_under_traffic(cfg, proc, client, lambda: client.inject("c1", "hang"))
            st = client.status()
            assert {f["channel"] for f in st["faults"]} == {"c1"}, st["faults"]
            assert st["mode"] != "SAFE", st
            assert answers and all(a is True or a in ("VoteTimeoutError", "BusyError")
                                   for a in answers), answers
            assert answers[-1] is True  # served by c0 and c2 after the stop
        finally:
            client.close()
