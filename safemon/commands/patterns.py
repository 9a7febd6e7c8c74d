"""`safemon patterns build|verify`: create and check golden pattern stores.

build: generates every (dims, channel variant, family) pattern of a configuration into a
directory with its manifest (`safemon.golden_store.build_patterns`).
verify: checks a store (manifest, SHA-256, shapes, and a recomputation of every expected
C and ES with the NumPy reference) and prints one line per problem.

Exit codes: 0 ok, 1 problems found, 2 bad usage or invalid configuration.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from safemon.errors import ConfigError

__all__ = ["register", "run_build", "run_verify"]


def register(subparsers: Any) -> None:
    """Add the `patterns` command (with `build` and `verify`) to an argparse subparsers object."""
    parser = subparsers.add_parser(
        "patterns",
        help="build or verify golden pattern stores",
        description="Build or verify golden pattern stores (self-test reference data).",
    )
    sub = parser.add_subparsers(dest="patterns_command", metavar="ACTION")
    parser.set_defaults(handler=_no_action(parser))

    build = sub.add_parser(
        "build",
        help="generate the configured patterns and their manifest",
        description="Generate every configured (dims, variant, family) golden pattern with the "
        "NumPy reference and write the manifest.",
    )
    build.add_argument(
        "--dir",
        type=Path,
        default=None,
        help="output directory (default: patterns.dir of the config)",
    )
    build.add_argument(
        "--config",
        type=Path,
        default=None,
        help="configuration file (default: $SAFEMON_CONFIG, else the embedded default)",
    )
    build.set_defaults(handler=run_build)

    verify = sub.add_parser(
        "verify",
        help="check a store against its manifest and the NumPy reference",
        description="Check a golden pattern store: manifest, SHA-256 of every file, array shapes, "
        "and every expected C/ES recomputed with the NumPy reference.",
    )
    verify.add_argument(
        "--dir", type=Path, default=None, help="store directory (default: the built-in store)"
    )
    verify.set_defaults(handler=run_verify)


def _no_action(parser: argparse.ArgumentParser) -> Any:
    def handler(args: argparse.Namespace) -> int:
        parser.print_help(sys.stderr)
        return 2

    return handler


def run_build(args: argparse.Namespace) -> int:
    """Handler of `safemon patterns build`; returns the exit code."""
    from safemon.config import load_config
    from safemon.golden_store import build_patterns

    config_path = args.config or os.environ.get("SAFEMON_CONFIG") or None
    try:
        config = load_config(config_path)
    except ConfigError as exc:
        print(f"safemon patterns build: {exc}", file=sys.stderr)
        return 2
    directory = args.dir if args.dir is not None else config.patterns.dir
    if directory is None:
        # Writing into the installed package by default would silently change what every
        # deployment on this host self-tests against.
        print(
            "safemon patterns build: give --dir DIR or set patterns.dir in the configuration",
            file=sys.stderr,
        )
        return 2
    if directory.exists() and not directory.is_dir():
        print(f"safemon patterns build: {str(directory)!r} is not a directory", file=sys.stderr)
        return 2
    channels = config.channels or []
    manifest = build_patterns(directory, config.patterns.dims, [ch.variant for ch in channels])
    print(f"wrote {manifest}")
    return 0


def run_verify(args: argparse.Namespace) -> int:
    """Handler of `safemon patterns verify`; returns the exit code."""
    from safemon.golden_store import BUILTIN_DIR, verify_patterns

    directory = args.dir if args.dir is not None else BUILTIN_DIR
    if not directory.is_dir():
        print(f"safemon patterns verify: {str(directory)!r} is not a directory", file=sys.stderr)
        return 2
    problems = verify_patterns(directory)
    for line in problems:
        print(line)
    if problems:
        print(f"{len(problems)} problem(s) in {directory}", file=sys.stderr)
        return 1
    print(f"ok: {directory}")
    return 0
