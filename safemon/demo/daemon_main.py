"""`python -m safemon.demo.daemon_main LOG [CONFIG]`: the demo's daemon in its own process.

The demo runs the daemon in a child process, not on a thread of its own: the app's work
(and the reference checks of every released C) would otherwise share the GIL with the
daemon's loop and delay it, which shows up as self-test deadline misses of healthy
channels. The configuration is `load_config(CONFIG)` with the SAFEMON_* environment the
parent set; logs go (JSON) to the file LOG. SIGTERM drains and exits 0.
"""

from __future__ import annotations

import signal
import sys
from typing import Any

import structlog


def main(argv: list[str] | None = None) -> int:
    from safemon.config import load_config
    from safemon.daemon import Daemon
    from safemon.errors import SafemonError
    from safemon.logging import configure_logging

    args = sys.argv[1:] if argv is None else argv
    if not 1 <= len(args) <= 2:
        print("usage: python -m safemon.demo.daemon_main LOG [CONFIG]", file=sys.stderr)
        return 2
    config = load_config(args[1] if len(args) == 2 else None)
    # Open for the process's life: structlog writes to it until exit.
    stream = open(args[0], "a", encoding="utf-8")  # noqa: SIM115
    configure_logging("json", "info", role="daemon", stream=stream)
    daemon = Daemon(config, serve_metrics=True)
    try:
        daemon.start()
    except (SafemonError, OSError) as exc:
        why = f"{type(exc).__name__}: {exc}"
        print(f"safemon demo daemon: cannot start: {why}", file=sys.stderr)
        # Also in LOG, which the demo's error names.
        structlog.get_logger().error("daemon_cannot_start", error=why)
        return 2

    def _stop(signum: int, frame: Any) -> None:
        daemon.request_stop()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    daemon.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
