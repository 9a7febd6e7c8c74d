"""`safemon inject --channel NAME --fault KIND | --clear [--channel NAME]` (validation only).

Exit codes: 0 ok, 2 bad usage / invalid configuration / unknown channel or fault,
3 daemon unreachable.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from safemon.channels.faults import FAULT_KINDS
from safemon.commands._daemon_cli import (
    EXIT_OK,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    add_config,
    config_of,
)
from safemon.errors import InvalidInputError

__all__ = ["register", "run"]


def register(subparsers: Any) -> None:
    """Add `inject` to an argparse subparsers object."""
    p = subparsers.add_parser("inject", help="inject a channel-level fault (validation)",
                              description="Inject a fault into one channel, or clear injected faults.")
    add_config(p)
    p.add_argument("--channel", metavar="NAME", help="the channel (all channels for --clear if omitted)")
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--fault", choices=FAULT_KINDS, help="the fault kind")
    g.add_argument("--clear", action="store_true", help="remove injected faults")
    p.add_argument("--timeout", type=float, default=2.0, help="seconds to wait for the daemon")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from safemon.client import Client, DaemonUnreachableError

    config = config_of(args)
    if config is None:
        return EXIT_USAGE
    if args.fault and not args.channel:
        print("safemon: inject --fault needs --channel", file=sys.stderr)
        return EXIT_USAGE
    with Client(config, control_timeout_s=args.timeout) as client:
        try:
            if args.clear:
                client.clear_faults(args.channel)
            else:
                client.inject(args.channel, args.fault)
        except DaemonUnreachableError as exc:
            print(f"safemon: daemon unreachable: {exc}", file=sys.stderr)
            return EXIT_UNREACHABLE
        except InvalidInputError as exc:
            print(f"safemon: {exc}", file=sys.stderr)
            return EXIT_USAGE
    return EXIT_OK
