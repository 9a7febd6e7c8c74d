"""Per-thread page-locked host buffers for small device read-backs.

A copy into pinned memory is one DMA, where a fresh pageable array costs an allocation and
a staged copy. Each `PinnedBuffer` hands a thread the same buffer on every call, so a
caller must have read what the previous read-back left there before queuing the next
(the status blocks of `safemon.kernels.checked`, the digests of
`safemon.kernels.model_gpu`). A request for more words than the buffer holds gets a larger
one; the smaller one stays alive, since a copy queued into it by a caller that never
collected its values may still be in flight.

One thread that keeps several read-backs in flight at once (the daemon's loop driving
inline channels, `safemon.channels.inline`) gives each its own buffers: inside
`with lane(key):` every `PinnedBuffer` hands out the buffer of that key, not the thread's
default one.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Hashable, Iterator
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["PinnedBuffer", "lane"]

_lanes = threading.local()


@contextlib.contextmanager
def lane(key: Hashable) -> Iterator[None]:
    """Within this block, this thread's `PinnedBuffer`s hand out the buffers of `key`
    (nested blocks restore the outer key on exit)."""
    outer = getattr(_lanes, "key", None)
    _lanes.key = key
    try:
        yield
    finally:
        _lanes.key = outer


class PinnedBuffer:
    """A page-locked 1-D buffer of `dtype` per thread, grown by doubling.

    Args:
        dtype: the element type.
        minimum: elements of the first buffer a thread gets.
    """

    def __init__(self, dtype: type[np.generic], minimum: int) -> None:
        self.dtype = np.dtype(dtype)
        self.minimum = minimum
        self._local = threading.local()

    def get(self, cp: Any, n: int) -> npt.NDArray[Any]:
        """This thread's buffer (of the current `lane`) of at least `n` elements (`cp`: the
        cupy module)."""
        blocks: dict[Hashable, npt.NDArray[Any]] | None = getattr(self._local, "blocks", None)
        if blocks is None:
            blocks = self._local.blocks = {}
            self._local.mems = []
        key = getattr(_lanes, "key", None)
        host = blocks.get(key)
        if host is None or host.size < n:
            count = max(n, self.minimum, 0 if host is None else 2 * host.size)
            mem = cp.cuda.alloc_pinned_memory(self.dtype.itemsize * count)
            host = np.frombuffer(mem, dtype=self.dtype, count=count)
            blocks[key] = host
            # The view keeps no reference to mem; every buffer handed out stays alive.
            self._local.mems.append(mem)
        return host
