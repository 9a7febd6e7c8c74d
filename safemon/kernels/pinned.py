"""Per-thread page-locked host buffers for small device read-backs.

A copy into pinned memory is one DMA, where a fresh pageable array costs an allocation and
a staged copy. Each `PinnedBuffer` hands a thread the same buffer on every call, so a
caller must have read what the previous read-back left there before queuing the next
(the status blocks of `safemon.kernels.checked`, the digests of
`safemon.kernels.model_gpu`). A request for more words than the buffer holds gets a larger
one; the smaller one stays alive, since a copy queued into it by a caller that never
collected its values may still be in flight.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["PinnedBuffer"]


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
        """This thread's buffer of at least `n` elements (`cp`: the cupy module)."""
        host: npt.NDArray[Any] | None = getattr(self._local, "block", None)
        if host is None or host.size < n:
            count = max(n, self.minimum, 0 if host is None else 2 * host.size)
            mem = cp.cuda.alloc_pinned_memory(self.dtype.itemsize * count)
            host = np.frombuffer(mem, dtype=self.dtype, count=count)
            self._local.block = host
            # The view keeps no reference to mem; every buffer handed out stays alive.
            self._local.mems = [*getattr(self._local, "mems", []), mem]
        return host
