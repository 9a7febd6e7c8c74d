"""The `safemon` command line as a whole: what every sub-command shares (safemon/cli.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

#: 128 + SIGPIPE, what a shell reports for a process SIGPIPE ended (`safemon.cli`).
EXIT_BROKEN_PIPE = 141

#: `safemon status` against a stand-in daemon, so that no daemon need run.
_STATUS_WITHOUT_DAEMON = """
from safemon.commands import status
st = {"mode": "NORMAL", "policy": "2oo3", "effective_policy": "2oo3", "metrics_url": None,
      "hft_declared": 1, "hft_effective": 1, "hft_reason": "2oo3",
      "channels": [{"name": f"ch{i}", "state": "UP"} for i in range(3)], "faults": []}
status.call_daemon = lambda args, fn: (0, st)
from safemon.cli import main
raise SystemExit(main(["status"]))
"""


def _into_closed_pipe(argv: list[str]) -> subprocess.CompletedProcess[str]:
    """Run `argv` with stdout a pipe whose reader has already gone (`... | head -0`)."""
    r, w = os.pipe()
    os.close(r)
    try:
        return subprocess.run(argv, stdout=w, stderr=subprocess.PIPE, text=True, timeout=60,
                              check=False)
    finally:
        os.close(w)


def test_status_into_a_closed_pipe_exits_quietly_with_141() -> None:
    """`safemon status | head -1`: no BrokenPipeError traceback, exit 128 + SIGPIPE."""
    r = _into_closed_pipe([sys.executable, "-c", _STATUS_WITHOUT_DAEMON])
    assert r.stderr == ""
    assert r.returncode == EXIT_BROKEN_PIPE


def test_every_subcommand_gets_it_keys_generate_into_a_closed_pipe(tmp_path: Path) -> None:
    """The handling is in main, so another sub-command that prints is quiet too."""
    r = _into_closed_pipe([sys.executable, "-m", "safemon", "keys", "generate",
                           str(tmp_path / "keys")])
    assert r.stderr == ""
    assert r.returncode == EXIT_BROKEN_PIPE


def test_the_exit_code_is_128_plus_sigpipe() -> None:
    import signal

    from safemon import cli

    assert cli.EXIT_BROKEN_PIPE == EXIT_BROKEN_PIPE == 128 + signal.SIGPIPE


def test_output_to_a_live_pipe_is_unchanged(tmp_path: Path) -> None:
    """A reader that stays gets the whole output and the sub-command's own exit code."""
    r = subprocess.run([sys.executable, "-c", _STATUS_WITHOUT_DAEMON], capture_output=True,
                       text=True, timeout=60, check=False)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("mode NORMAL") and "ch2" in r.stdout


def test_a_broken_pipe_other_than_stdout_is_not_hidden() -> None:
    """A BrokenPipeError while stdout's reader is still there (some other pipe or socket)
    still raises: only a gone stdout reader is taken as `| head`."""
    code = """
from safemon.commands import status
def boom(args): raise BrokenPipeError(32, "some socket")
status.run = boom
from safemon.cli import main
raise SystemExit(main(["status"]))
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=60, check=False)
    assert "BrokenPipeError" in r.stderr and r.returncode == 1
