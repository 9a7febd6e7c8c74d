"""The `safemon` command line. Each sub-command lives in its own module under
`safemon/commands/` and exposes `register(subparsers)`; this file only assembles them.

Exit codes: 0 success, 1 a check failed (self-test, verification), 2 bad usage or invalid
configuration, 3 the daemon could not be reached, 141 (128 + SIGPIPE, what a shell reports
for a process SIGPIPE ended) the reader of stdout went away (`safemon status | head -1`):
the rest of the output is dropped without a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import os
import select
import signal
import sys
from collections.abc import Sequence

import safemon

#: Sub-command modules in the order `--help` lists them.
COMMAND_MODULES: tuple[str, ...] = (
    "run", "status", "reset", "selftest", "inject", "keys", "patterns",
    "dc", "bench", "select", "demo", "audit",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="safemon",
        description="Runtime safety patterns for GPU inference: protected MMM, ECC, redundant channels, voting.",
    )
    parser.add_argument("--version", action="version", version=f"safemon {safemon.__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(f"safemon.commands.{name}").register(sub)
    return parser


#: The exit code when stdout's reader has gone (see the module docstring).
EXIT_BROKEN_PIPE = 128 + signal.SIGPIPE


def main(argv: Sequence[str] | None = None) -> int:
    """Run the sub-command `argv` names; returns its exit code."""
    try:
        try:
            return _dispatch(argv)
        finally:
            # Written now, inside the handler below, not at interpreter exit, where a
            # broken pipe can only be reported as an ignored exception.
            sys.stdout.flush()
    except BrokenPipeError:
        if not _stdout_reader_gone():
            raise  # some other pipe or socket: not ours to hide
        # Python's documented idiom: later writes (and the flush at exit) go nowhere.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return EXIT_BROKEN_PIPE


def _stdout_reader_gone() -> bool:
    """Whether stdout is a pipe or socket whose reading end is closed (poll reports an
    error or hang-up on it)."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        events = poller.poll(0)
    except (OSError, ValueError, AttributeError):
        return False
    return any(ev & (select.POLLERR | select.POLLHUP) for _, ev in events)


def _dispatch(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help(sys.stderr)
        return 2
    return int(handler(args))
