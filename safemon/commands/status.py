"""`safemon status [--config FILE] [--json]`: the running daemon's mode, policy and channels.

Exit codes: 0 ok, 2 invalid configuration, 3 daemon unreachable.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from safemon.commands._daemon_cli import EXIT_OK, add_config, call_daemon

__all__ = ["register", "run"]


def register(subparsers: Any) -> None:
    """Add `status` to an argparse subparsers object."""
    p = subparsers.add_parser("status", help="show the running daemon's status",
                              description="Ask the running daemon for its mode, policy and channels.")
    add_config(p)
    p.add_argument("--json", action="store_true", help="print JSON (mode, policy, hft_declared, hft_effective, hft_reason, channels, ...)")
    p.add_argument("--timeout", type=float, default=2.0, help="seconds to wait for the daemon")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    rc, status = call_daemon(args, lambda client: client.status())
    if rc != EXIT_OK:
        return rc
    if args.json:
        print(json.dumps(status, indent=2, sort_keys=True))
    else:
        print(f"mode {status['mode']}  policy {status['policy']} "
              f"(effective {status['effective_policy']})  metrics {status['metrics_url']}")
        print(f"HFT declared {status['hft_declared']}, effective {status['hft_effective']}: "
              f"{status['hft_reason']}")
        if status.get("safe_reason"):
            print(f"  SAFE because: {status['safe_reason']}  (an operator must `safemon reset`)")
        if status.get("fault_injection"):
            print("  fault injection ENABLED (testing.fault_injection: a test configuration)")
        for ch in status["channels"]:
            print(f"  {ch['name']:<12} {ch['state']:<12} incarnation {ch.get('incarnation', '?')}"
                  f"  process {ch.get('process', '?')}")
        faults = status.get("faults") or []
        if faults:
            print("  last faults (oldest first):")
        for f in faults[-10:]:
            fdti = "-" if f.get("fdti_s") is None else f"{f['fdti_s']:.3f} s"
            print(f"    {f['age_s']:>8.1f} s ago  {f['kind']:<24} {f.get('channel') or '-':<8} "
                  f"{f['class']:<12} FDTI {fdti}  FRTI {f['frti_s']:.3f} s")
    return EXIT_OK
