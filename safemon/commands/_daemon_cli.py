"""Shared helpers of the daemon-facing sub-commands (config loading, exit codes).

(Not `_common.py`: that name belongs to the evidence sub-commands.)
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from safemon.config import Config, load_config
from safemon.errors import ConfigError

__all__ = ["EXIT_CHECK_FAILED", "EXIT_OK", "EXIT_UNREACHABLE", "EXIT_USAGE", "add_config", "config_of"]

EXIT_OK = 0
EXIT_CHECK_FAILED = 1
EXIT_USAGE = 2
EXIT_UNREACHABLE = 3


def add_config(parser: argparse.ArgumentParser) -> None:
    """`--config FILE` (default: $SAFEMON_CONFIG, else the embedded default)."""
    parser.add_argument("--config", metavar="FILE", default=None,
                        help="configuration file (default: $SAFEMON_CONFIG or the embedded default)")


def config_of(args: Any) -> Config | None:
    """Load the configuration; on ConfigError print it to stderr and return None (exit 2)."""
    path = args.config or os.environ.get("SAFEMON_CONFIG") or None
    try:
        return load_config(path)
    except ConfigError as exc:
        print(f"safemon: {exc}", file=sys.stderr)
        return None


def call_daemon(args: Any, action: Any) -> tuple[int, Any]:
    """Connect a Client for `args.config`, run `action(client)`, map the usual failures.

    Returns (EXIT_OK, action's result), (EXIT_USAGE, None) for an invalid configuration, or
    (EXIT_UNREACHABLE, None) when the daemon does not answer (the reason goes to stderr).
    Other exceptions from `action` propagate.
    """
    from safemon.client import Client, DaemonUnreachableError
    from safemon.errors import SafemonError

    config = config_of(args)
    if config is None:
        return EXIT_USAGE, None
    try:
        client = Client(config, control_timeout_s=args.timeout)
    except SafemonError as exc:  # e.g. a client secret key readable by others
        print(f"safemon: {exc}", file=sys.stderr)
        return EXIT_USAGE, None
    with client:
        try:
            return EXIT_OK, action(client)
        except DaemonUnreachableError as exc:
            print(f"safemon: daemon unreachable: {exc}", file=sys.stderr)
            return EXIT_UNREACHABLE, None
