"""`safemon keys generate DIR`: CURVE key pairs for tcp:// endpoints (secret files 0600).

Exit codes: 0 ok, 2 bad usage or the directory/keys are unusable.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from safemon.commands._daemon_cli import EXIT_OK, EXIT_USAGE
from safemon.errors import ConfigError

__all__ = ["register", "run"]


def register(subparsers: Any) -> None:
    """Add `keys` (with `generate`) to an argparse subparsers object."""
    p = subparsers.add_parser("keys", help="manage CURVE keys", description="Manage CURVE keys.")
    sub = p.add_subparsers(dest="keys_command", metavar="ACTION")
    p.set_defaults(handler=lambda a: (p.print_help(sys.stderr), EXIT_USAGE)[1])
    g = sub.add_parser("generate", help="write server and client key pairs into DIR",
                       description="Write server.key(_secret), client.key(_secret) and "
                       "allowed_clients/client.key into DIR (created 0700).")
    g.add_argument("dir", metavar="DIR")
    g.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from safemon.transport import keys_generate

    try:
        files = keys_generate(args.dir)
    except ConfigError as exc:
        print(f"safemon: {exc}", file=sys.stderr)
        return EXIT_USAGE
    for f in files:
        print(f)
    return EXIT_OK
