"""Concurrent GPU load for the determinism audit: other streams and another process.

`StreamLoad` runs cuBLAS matrix products on its own non-blocking stream from a background
thread of this process; `ProcessLoad` starts `python -m safemon.audit.gpu_load`, a separate
process doing the same, and waits until it has started. Both stop on exiting the `with`.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import threading
import time
from types import TracebackType
from typing import Any

__all__ = ["ProcessLoad", "StreamLoad", "main"]

LOAD_SIZE = 2048


def _products(cp: Any, stop: threading.Event | None, seconds: float) -> int:
    a = cp.random.default_rng(7).standard_normal((LOAD_SIZE, LOAD_SIZE), dtype=cp.float32)
    end = time.monotonic() + seconds
    n = 0
    while time.monotonic() < end and not (stop is not None and stop.is_set()):
        a = cp.tanh(a @ a * (1.0 / LOAD_SIZE))
        cp.cuda.get_current_stream().synchronize()
        n += 1
    return n


class StreamLoad:
    """Background thread issuing matrix products on its own CUDA stream."""

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.products = 0

    def _run(self) -> None:
        from safemon.kernels.compiler import import_cupy

        cp = import_cupy()
        with cp.cuda.Stream(non_blocking=True):
            self.products = _products(cp, self._stop, 3600.0)

    def __enter__(self) -> StreamLoad:
        self._thread.start()
        return self

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop.set()
        self._thread.join(timeout=30)


class ProcessLoad:
    """A separate process issuing matrix products until stopped (at most `seconds`)."""

    def __init__(self, seconds: float = 600.0) -> None:
        self.seconds = seconds
        self._proc: subprocess.Popen[str] | None = None

    def __enter__(self) -> ProcessLoad:
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "safemon.audit.gpu_load", "--seconds", str(self.seconds)],
            stdout=subprocess.PIPE, text=True)
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline()
        if "ready" not in line:
            self._proc.kill()
            raise RuntimeError(f"load process did not start (said {line!r})")
        return self

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._proc is not None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            if self._proc.stdout is not None:
                self._proc.stdout.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="GPU load for safemon audit determinism")
    parser.add_argument("--seconds", type=float, default=600.0)
    args = parser.parse_args(argv)
    from safemon.kernels.compiler import import_cupy

    cp = import_cupy()
    cp.ones(1).sum()  # context created before saying ready
    print("ready", flush=True)
    _products(cp, None, args.seconds)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
