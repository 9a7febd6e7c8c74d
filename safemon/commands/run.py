"""`safemon run [--config FILE]`: the daemon, in the foreground.

Prints where its metrics and sockets are, notifies systemd (READY=1 once the voting set
is formed, WATCHDOG=1 periodically) when NOTIFY_SOCKET is set, and on SIGTERM/SIGINT
drains in-flight requests (each answered or errored) and exits within
`timing.drain_timeout_s` (plus at most `daemon.DRAIN_SWEEP_S` answering the requests still
queued). Refuses bad keys, bad golden patterns and unusable GPU ids with
a clear message.

Exit codes: 0 clean shutdown, 2 invalid configuration / keys / patterns / GPU ids.
"""

from __future__ import annotations

import argparse
import signal
import sys
from typing import Any

from safemon.commands._daemon_cli import EXIT_OK, EXIT_USAGE, add_config, config_of
from safemon.errors import SafemonError

__all__ = ["register", "run"]


def register(subparsers: Any) -> None:
    """Add `run` to an argparse subparsers object."""
    p = subparsers.add_parser("run", help="run the daemon in the foreground",
                              description="Run the safemon daemon (channels, voter, scheduler, "
                              "controller, metrics) until SIGTERM/SIGINT.")
    add_config(p)
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    config = config_of(args)
    if config is None:
        return EXIT_USAGE
    from safemon.daemon import Daemon
    from safemon.logging import configure_logging
    from safemon.transport import ensure_private_dir

    configure_logging(config.logging.format, config.logging.level, role="daemon")
    daemon = Daemon(config, serve_metrics=True)
    # Until the loop runs, Ctrl-C / SIGTERM stop the start cleanly (no traceback).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        if config.endpoints.runtime_dir is not None:
            ensure_private_dir(config.endpoints.runtime_dir)
        daemon.start()
    except (SafemonError, OSError) as exc:
        print(f"safemon: cannot start: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("safemon: interrupted during start", file=sys.stderr)
        daemon.close()  # stops what was started, removes its socket files, drops the lock
        return EXIT_OK
    print(f"safemon {config.name}: metrics {daemon.metrics_url}", flush=True)
    for key, address in daemon.sockets().items():
        print(f"  {key:<8} {address}", flush=True)

    def _stop(signum: int, frame: Any) -> None:
        daemon.request_stop()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    daemon.run()
    return EXIT_OK
