"""`safemon reset [--config FILE]`: operator reset (leave the latched SAFE state).

Exit codes: 0 ok, 2 invalid configuration, 3 daemon unreachable.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from safemon.commands._daemon_cli import (
    EXIT_OK,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    add_config,
    config_of,
)

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
    from safemon.client import Client, DaemonUnreachableError

    config = config_of(args)
    if config is None:
        return EXIT_USAGE
    with Client(config, control_timeout_s=args.timeout) as client:
        try:
            client.reset()
        except DaemonUnreachableError as exc:
            print(f"safemon: daemon unreachable: {exc}", file=sys.stderr)
            return EXIT_UNREACHABLE
    print("reset sent")
    return EXIT_OK
