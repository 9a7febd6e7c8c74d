"""`safemon status [--config FILE] [--json]`: the running daemon's mode, policy and channels.

Exit codes (so a script or a probe can act on the mode without parsing the output):
0 NORMAL, 2 invalid configuration, 3 daemon unreachable, 4 DEGRADED (serving with less
redundancy than configured), 5 SAFE (latched, nothing released until `safemon reset`),
6 STARTING (no voting set yet). The status is printed in every mode.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from safemon.commands._daemon_cli import EXIT_OK, add_config, call_daemon

__all__ = ["EXIT_DEGRADED", "EXIT_SAFE", "EXIT_STARTING", "exit_code_of", "register", "run"]

EXIT_DEGRADED = 4
EXIT_SAFE = 5
EXIT_STARTING = 6
_BY_MODE = {"NORMAL": EXIT_OK, "DEGRADED": EXIT_DEGRADED, "SAFE": EXIT_SAFE,
            "STARTING": EXIT_STARTING}


def exit_code_of(mode: str) -> int:
    """The exit code of `safemon status` for the daemon's `mode` (an unknown mode: SAFE's,
    since nothing known to be safe to use)."""
    return _BY_MODE.get(mode, EXIT_SAFE)


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
        return exit_code_of(str(status.get("mode")))
    else:
        print(f"mode {status['mode']}  policy {status['policy']} "
              f"(effective {status['effective_policy']})  metrics {status['metrics_url']}")
        print(f"HFT declared {status['hft_declared']}, effective {status['hft_effective']}: "
              f"{status['hft_reason']}")
        if status.get("safe_reason"):
            print(f"  SAFE because: {status['safe_reason']}  (an operator must `safemon reset`)")
            # The controller's channel states are latched with SAFE: a channel whose
            # restart was pending stays RESTARTING after its new process registered.
            print("  channel states as SAFE latched them (until the reset); process: as now")
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
    return exit_code_of(str(status.get("mode")))
