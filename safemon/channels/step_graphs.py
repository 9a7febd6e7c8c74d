"""Captured device steps: a channel's queued work for one request key, replayed as a graph.

Queuing one device-resident product costs a channel about 340 µs of Python and CuPy calls
on the H100 host (`evidence/h100-2026-11-24-inline/`), for a few tens of µs of GPU work at
80³. A request that repeats (same weight, same shape, same client buffers at the same
device addresses) queues the same kernels on the same memory every time, so the channel
records that sequence once as a CUDA graph (stream capture) and afterwards launches the
graph: one call in place of the whole sequence.

Contract (`StepGraphs.capture`):
- The sequence is captured on the channel's own stream, with every allocation it makes
  drawn from a memory pool of its own. The pool is kept with the graph and nothing else
  allocates from it, so the memory the graph reads and writes (the copy of x, C, ES, the
  status block, the digest words, split-K partials) is never handed to anyone else.
- The objects the sequence returns (the digest batch, the pending result, the status
  read-backs) are kept with the graph; after each launch the caller waits and reads them
  exactly as after queuing by hand. Their page-locked read-back rows are the lane's own
  (`safemon.kernels.pinned.lane`): one request per channel is in flight at a time.
- The key must name everything the graph depends on: the weight object and its storage
  arrays (kept, so their addresses are not reused), the variant, the device addresses and
  shapes of the client's buffers. A key is captured the second time it is seen (the first
  request runs by hand, which also compiles and loads every kernel), and at most
  `capacity` graphs are kept, the least recently used dropped first.
- Only steps of at most `MAX_GRAPH_ELEMENTS` activation elements are captured
  (`worth_a_graph`).
- Anything that needs the host between kernels (an injected data fault, an ECC correction
  and recomputation) runs by hand, outside the graph.
"""

from __future__ import annotations

import collections
import contextlib
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

__all__ = ["MAX_GRAPH_ELEMENTS", "CapturedStep", "StepGraphs", "worth_a_graph"]

_T = TypeVar("_T")

#: Graphs a channel keeps (each holds the device memory of one request's step).
DEFAULT_CAPACITY = 16

#: Steps whose activations hold more float32 elements than this (rows × (x's columns + every
#: layer's output columns)) are queued by hand: a graph would keep their large buffers (x,
#: C, split-K partials) allocated, and their kernels take long enough that the launches do
#: not matter. 2**24 (64 MiB) admits the 4-layer 64×4096 MLP, not a 4096³ product.
MAX_GRAPH_ELEMENTS = 2**24


def worth_a_graph(rows: int, widths: Sequence[int]) -> bool:
    """Whether a step over `rows` rows whose x and layer outputs have `widths` columns
    (x's first) is captured (`MAX_GRAPH_ELEMENTS`)."""
    return 0 < rows * sum(widths) <= MAX_GRAPH_ELEMENTS


@dataclass
class CapturedStep(Generic[_T]):
    """One captured step: the graph, its private memory pool, what the captured sequence
    returned (`outputs`), and objects kept alive for as long as the graph may run."""

    graph: Any
    pool: Any
    outputs: _T
    keep: tuple[Any, ...] = field(default=())

    def launch(self, stream: Any) -> _T:
        """Run the step on `stream` (no wait); returns the outputs to wait on and read."""
        self.graph.launch(stream)
        return self.outputs


class StepGraphs:
    """A channel's captured steps by key. Not thread-safe (one channel's loop uses it).

    Args:
        capacity: graphs kept at most (least recently used dropped first).
    """

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self._steps: collections.OrderedDict[Hashable, CapturedStep[Any]] = (
            collections.OrderedDict())
        self._seen: collections.OrderedDict[Hashable, None] = collections.OrderedDict()
        #: keys whose capture failed: queued by hand from then on (the latest few)
        self._refused: collections.OrderedDict[Hashable, None] = collections.OrderedDict()
        self.captured = 0

    def __len__(self) -> int:
        return len(self._steps)

    def drop_holding(self, obj: object) -> int:
        """Forget every captured step that keeps `obj` alive (a weight the channel dropped),
        so that its memory can be freed; returns how many were dropped. Their keys name
        `obj` by its `id`, which a later object may reuse: those keys are forgotten too, so
        nothing is launched for a new object on the strength of the old one's sightings."""
        gone = [key for key, step in self._steps.items()
                if any(kept is obj for kept in step.keep)]
        for key in gone:
            del self._steps[key]
            self._seen.pop(key, None)
        ident = id(obj)
        for seen in [key for key in self._seen if isinstance(key, tuple) and ident in key]:
            del self._seen[seen]
        return len(gone)

    def get(self, key: Hashable) -> CapturedStep[Any] | None:
        """The captured step of `key`, or None."""
        step = self._steps.get(key)
        if step is not None:
            self._steps.move_to_end(key)
        return step

    def seen_before(self, key: Hashable) -> bool:
        """Whether `key` was seen before (this call records it): capture on the second
        sight, so that a one-off request never pays for a capture. Always False for a key
        whose capture failed."""
        if key in self._refused:
            return False
        if key in self._seen:
            self._seen.move_to_end(key)
            return True
        self._seen[key] = None
        while len(self._seen) > 4 * self.capacity:
            self._seen.popitem(last=False)
        return False

    def capture(self, key: Hashable, stream: Any, queue: Callable[[], _T],
                keep: tuple[Any, ...] = ()) -> CapturedStep[_T]:
        """Record `queue()` (which queues work on the current stream, `stream`, and returns
        the handles to read afterwards) as a graph under `key`. Nothing runs: launch the
        returned step to run it.

        Raises:
            whatever `queue` or the capture raises (the capture is ended and discarded
            first, and `key` is never captured again: `seen_before` answers False).
        """
        from safemon.kernels.compiler import import_cupy

        cp = import_cupy()
        pool = cp.cuda.MemoryPool()
        with cp.cuda.using_allocator(pool.malloc):
            stream.begin_capture(mode=cp.cuda.runtime.streamCaptureModeRelaxed)
            try:
                outputs = queue()
            except BaseException:
                self._refuse(key)
                with contextlib.suppress(Exception):  # a capture the error invalidated
                    stream.end_capture()  # end it: the stream must not stay capturing
                raise
            try:
                graph = stream.end_capture()
            except BaseException:
                self._refuse(key)
                raise
        step = CapturedStep(graph, pool, outputs, keep)
        self._steps[key] = step
        self.captured += 1
        while len(self._steps) > self.capacity:
            self._steps.popitem(last=False)
        return step

    def _refuse(self, key: Hashable) -> None:
        self._refused[key] = None
        while len(self._refused) > 4 * self.capacity:
            self._refused.popitem(last=False)

    def clear(self) -> None:
        """Drop every graph (their memory goes back with their pools)."""
        self._steps.clear()
        self._seen.clear()
        self._refused.clear()
