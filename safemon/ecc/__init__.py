"""Software SEC-DED ECC for GPU (and host) buffers.

* `encode` / `decode`: Hsiao (39,32) and (72,64) codes over any C-contiguous NumPy or
  CuPy array, check bytes packed four per uint32 (docs/ECC.md).
* `ProtectedArray`: data + check bits owned together; every read checks first and an
  uncorrectable error raises `safemon.errors.UncorrectableError`.
* `ScrubRegistry`: patrols the registered buffers and keeps per-buffer counts.

Pure algebra lives in `safemon.ecc.code`, the CuPy kernels in `safemon.ecc.gpu`
(`cuda/ecc.cu`), the benchmark in `safemon.bench.ecc`.
"""

from __future__ import annotations

from safemon.ecc.api import decode, encode
from safemon.ecc.code import EccReport
from safemon.ecc.gpu import nvcc_builds
from safemon.ecc.protected import ProtectedArray, ScrubResult
from safemon.ecc.scrub import EccCounts, ScrubRegistry

__all__ = [
    "EccCounts",
    "EccReport",
    "ProtectedArray",
    "ScrubRegistry",
    "ScrubResult",
    "decode",
    "encode",
    "nvcc_builds",
]
