"""Content addresses of weights: one function, used by the daemon (to name a weight) and
by every channel (to refuse a weight whose content does not match the id it came with)."""

from __future__ import annotations

import hashlib

import numpy as np
import numpy.typing as npt

__all__ = ["weight_id_of"]


def weight_id_of(w: npt.NDArray[np.float32]) -> str:
    """Content address of a weight: the same array always gets the same id (any epoch);
    24 hex characters of SHA-256 over dtype, shape and the C-order bytes."""
    h = hashlib.sha256()
    h.update(f"{w.dtype.str}{w.shape}".encode())
    h.update(np.ascontiguousarray(w).reshape(-1).view(np.uint8).data)
    return h.hexdigest()[:24]
