"""`safemon demo [--config FILE] [--duration S] [--json] [--keep-run-dir]`: the app protected
by safemon while faults are injected into one channel; prints the report
(`safemon.demo.report`). The daemon's runtime directory (sockets, log, metrics snapshot) is a
temporary directory, removed at the end unless --keep-run-dir.

Exit codes: 0 the demo ran and no wrong output was released; 1 it ran but a wrong output
was released, a fault went undetected (`faults_undetected`: a fault injected after the
daemon had latched SAFE is reported as not exercised, not as undetected), or faults were
injected after SAFE that no detected fault had latched (`demo_passed`); 2 bad usage or
invalid configuration; 3 the daemon could not be started.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

__all__ = ["register", "run"]


def register(subparsers: Any) -> None:
    """Add the `demo` command to an argparse subparsers object."""
    parser = subparsers.add_parser(
        "demo",
        help="run an inference app under safemon while injecting faults",
        description="Train (once) and run a digits MLP through safemon while a bit flip, a "
        "stuck bit, a crash and a hang are injected into one channel; compare with the "
        "same app without safemon.",
    )
    parser.add_argument(
        "--config",
        type=Path,
        default=None,
        help="configuration (default: the embedded 2oo3 default)",
    )
    parser.add_argument(
        "--duration",
        type=float,
        default=12.0,
        metavar="S",
        help="seconds the protected run is spread over (default 12)",
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument(
        "--keep-run-dir",
        action="store_true",
        help="keep the daemon's temporary runtime directory (its log and last metrics "
        "scrape; removed at the end otherwise)",
    )
    parser.set_defaults(handler=run)


def missing_demo_extra() -> str | None:
    """What to install when the demo's own dependency (scikit-learn, for the digits data
    set) is missing from this environment, or None when it is there."""
    try:
        import sklearn  # noqa: F401
    except ImportError:
        return ("the demo needs scikit-learn, which a plain install does not include: "
                "pip install 'safemon[demo]'")
    return None


def run(args: argparse.Namespace) -> int:
    """Handler of `safemon demo`; returns the exit code (2 when the [demo] extra is missing)."""
    from safemon.demo.runner import run_demo
    from safemon.errors import ConfigError, PatternError, SafemonError

    if not args.duration > 0 or args.duration > 3600:
        print("safemon demo: --duration must be in (0, 3600] seconds", file=sys.stderr)
        return 2
    missing = missing_demo_extra()
    if missing is not None:
        print(f"safemon demo: {missing}", file=sys.stderr)
        return 2

    def progress(msg: str) -> None:
        if not args.json:
            print(f"... {msg}", file=sys.stderr, flush=True)

    try:
        report = run_demo(
            args.config,
            duration_s=args.duration,
            keep_run_dir=args.keep_run_dir,
            progress=progress,
        )
    except ConfigError as exc:
        print(f"safemon demo: {exc}", file=sys.stderr)
        return 2
    except (PatternError, SafemonError) as exc:
        print(f"safemon demo: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 3
    data = report.as_json()
    if args.json:
        print(json.dumps(data, indent=2))
    else:
        print(report.table())
    return 0 if demo_passed(data) else 1


def demo_passed(data: dict[str, Any]) -> bool:
    """Whether a demo report (`DemoReport.as_json()`) is a pass: no wrong output released,
    no fault injected while the daemon served left undetected, and, when faults were
    injected after SAFE was latched (not exercised), SAFE was latched by a fault the daemon
    detected: a daemon in SAFE before any fault tested nothing."""
    if data["wrong_outputs_released"] != 0 or data["faults_undetected"] != 0:
        return False
    return bool(data["faults_injected_in_safe"] == 0 or data["faults_detected"] > 0)
