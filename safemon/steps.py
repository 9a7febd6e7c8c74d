"""Step generators: work that yields where it has queued device work and may wait.

A channel's device work (a product, a whole-model pass) is written as a generator that
yields once, after everything is queued on the channel's CUDA stream and before the host
waits for it. A caller with one channel runs it straight through (`run_steps`); the
daemon's loop, which drives every inline channel itself (`safemon.channels.inline`),
queues each channel's work first and waits afterwards, so that the channels' kernels run
side by side.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import TypeVar

__all__ = ["Steps", "run_steps"]

_T = TypeVar("_T")

Steps = Generator[None, None, _T]
"""A step generator returning a `_T` (it yields None, takes nothing)."""


def run_steps(steps: Generator[None, None, _T]) -> _T:
    """Run `steps` to its end and return its result (its exceptions propagate)."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
