"""The `safemon` command line. Each sub-command lives in its own module under
`safemon/commands/` and exposes `register(subparsers)`; this file only assembles them.

Exit codes: 0 success, 1 a check failed (self-test, verification), 2 bad usage or invalid
configuration, 3 the daemon could not be reached.
"""

from __future__ import annotations

import argparse
import importlib
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


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help(sys.stderr)
        return 2
    return int(handler(args))
