"""`safemon reset [--config FILE]`: operator reset (leave the latched SAFE state).

Exit codes: 0 ok, 2 invalid configuration, 3 daemon unreachable.
"""

from __future__ import annotations

import argparse
from typing import Any

from safemon.commands._daemon_cli import EXIT_OK, add_config, call_daemon

__all__ = ["register", "run"]


def register(subparsers: Any) -> None:
    """Add `reset` to an argparse subparsers object."""
    p = subparsers.add_parser("reset", help="reset the daemon out of the latched SAFE state",
                              description="Operator reset: every channel must pass a self-test "
                              "before the voting set is formed again.")
    add_config(p)
    p.add_argument("--timeout", type=float, default=2.0, help="seconds to wait for the daemon")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    rc, _ = call_daemon(args, lambda client: client.reset())
    if rc == EXIT_OK:
        print("reset sent")
    return rc
