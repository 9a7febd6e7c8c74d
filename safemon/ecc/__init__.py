"""Software SEC-DED ECC for GPU (and host) buffers.

* `encode` / `decode`: Hsiao (39,32) and (72,64) codes over any C-contiguous NumPy or
  CuPy array, check bytes packed four per uint32 (docs/ECC.md).
* `ProtectedArray`: data + check bits owned together; every read checks first and an
  uncorrectable error raises `safemon.errors.UncorrectableError`.
* `ProtectedArray.scrub()`: one patrol of a buffer (the channel worker scrubs its resident
  weights when the daemon's scrub timer asks it to).

Pure algebra lives in `safemon.ecc.code`, the CuPy kernels in `safemon.ecc.gpu`
(`cuda/ecc.cu`), the benchmark in `safemon.bench.ecc`.
"""

from __future__ import annotations

from safemon.ecc.api import decode, encode
from safemon.ecc.code import EccReport
from safemon.ecc.gpu import nvcc_builds
from safemon.ecc.protected import ProtectedArray, ScrubResult

__all__ = [
    "EccReport",
    "ProtectedArray",
    "ScrubResult",
    "decode",
    "encode",
    "nvcc_builds",
]
