"""Stopping a channel process from a signal handler takes no lock.

A SIGTERM handler runs in the main thread between two bytecodes, possibly while that thread
holds a lock, and a second SIGTERM can arrive inside the first handler. A handler that takes
a non-reentrant lock then waits for itself for good: channel processes outlived their
killed daemon that way (PDEATHSIG's SIGTERM and the orphan watcher's stop at once).
"""

from __future__ import annotations

import threading
from pathlib import Path

import zmq

from safemon.channels.worker import ChannelWorker

from ..runtime.helpers import make_config


def _in_thread(fn: object) -> bool:
    """Run `fn` in a thread; True when it returned within 10 s (False: it deadlocked)."""
    t = threading.Thread(target=fn, daemon=True)  # type: ignore[arg-type]
    t.start()
    t.join(10.0)
    return not t.is_alive()


def test_a_channel_stopped_from_a_signal_takes_no_lock(tmp_path: Path) -> None:
    ctx = zmq.Context()
    try:
        worker = ChannelWorker(ctx, make_config(tmp_path, "2oo3"), "c0", incarnation=0,
                               epoch=1, link="")

        def handler_inside_the_events_lock() -> None:
            # As if the signal came while this thread was inside Event.set / Event.wait.
            with worker._stop._cond:
                worker.stop_from_signal()
                worker.stop_from_signal()  # a second SIGTERM inside the first handler

        assert _in_thread(handler_inside_the_events_lock)
        assert worker._stop_signalled  # the loop's condition reads it
    finally:
        ctx.term()
