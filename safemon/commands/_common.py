"""Helpers shared by the evidence sub-commands (dc, bench, select)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence


def standalone(register: Callable[[argparse._SubParsersAction[argparse.ArgumentParser]], None],
               name: str, argv: Sequence[str] | None = None) -> int:
    """Run one sub-command without the top-level CLI (`python -m safemon.commands.<name>`)."""
    parser = argparse.ArgumentParser(prog=f"safemon {name}")
    sub = parser.add_subparsers(dest="command")
    register(sub)
    args = parser.parse_args([name, *(sys.argv[1:] if argv is None else argv)])
    return int(args.handler(args))


def current_device_name() -> str | None:
    """The current CUDA device's name, or None without a usable device."""
    from safemon.kernels.compiler import cuda_available, import_cupy

    if not cuda_available():
        return None
    cp = import_cupy()
    name = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)["name"]
    return name.decode() if isinstance(name, bytes) else str(name)
