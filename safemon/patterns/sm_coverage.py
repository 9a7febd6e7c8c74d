"""Self-tests that cover the device: sizing, per-block SM attribution, coverage over a DTI.

Pure functions and a sans-IO bookkeeping class; the GPU launch that records `%smid` per block
is `safemon.kernels.gpu.gpu_matmul_recording_sm` (the self-test build, `SAFEMON_RECORD_SM=1`;
production builds do not contain it).

- `cover_dims(sm_count, tile)`: the device-covering size of the golden patterns (every
  family of `golden.FAMILIES` at this size forms the device-covering pattern family that a
  GPU deployment self-tests with by default): its launch has at least
  `blocks_per_sm · sm_count` blocks (default 2 per SM), so the block scheduler has work for
  every SM. Whether every SM actually ran a block is measured, not assumed: the
  self-test build reports each block's SM.
- `failing_blocks(expected_c, expected_es, c, es, tile)`: the linear ids of the blocks whose
  ES rows or C tile differ from the golden pattern; `failing_sms` maps them to SMs, so a
  failed self-test can name the SM.
- `SmCoverage`: per channel, the SMs that ran a block of a *passed* self-test, and when; the
  coverage ratio over the last DTI is the share of the device's SMs seen within it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from safemon.dims import Dims
from safemon.errors import InvalidInputError
from safemon.kernels.catalog import TileConfig, Variant

if TYPE_CHECKING:
    from safemon.patterns.golden import GoldenPattern

__all__ = [
    "SmCoverage",
    "cover_dims",
    "cover_pattern",
    "device_sm_count",
    "failing_blocks",
    "failing_sms",
    "sm_report",
]
#: K of the cover pattern: two k-tiles of the `small` tile, enough for every fold level.
COVER_K = 16


def cover_dims(sm_count: int, tile: TileConfig, *, blocks_per_sm: int = 2, k: int = COVER_K) -> Dims:
    """The smallest near-square grid with ≥ blocks_per_sm·sm_count blocks, as M×N×K.

    Raises:
        ValueError: a non-positive SM count, blocks per SM or K.
    """
    if sm_count < 1 or blocks_per_sm < 1 or k < 1:
        raise ValueError(f"need positive sm_count, blocks_per_sm and k, got {sm_count}, "
                         f"{blocks_per_sm}, {k}")
    blocks = sm_count * blocks_per_sm
    gy = math.isqrt(blocks)
    gy = gy if gy * gy >= blocks else gy + 1
    gx = -(-blocks // gy)
    return Dims(gy * tile.bm, gx * tile.bn, k)


def cover_pattern(sm_count: int, variant: Variant, *, family: str = "random",
                  blocks_per_sm: int = 2) -> GoldenPattern:
    """The golden pattern of `family` at the device-covering size of `variant`'s tile for a
    device with `sm_count` SMs (expected values from the NumPy reference)."""
    from safemon.patterns.golden import make_pattern

    d = cover_dims(sm_count, variant.tile, blocks_per_sm=blocks_per_sm)
    return make_pattern(family, (d.m, d.n, d.k), variant)


def device_sm_count(gpus: Iterable[int]) -> int:
    """The largest SM count among the CUDA devices `gpus` (sizing for it gives every device
    at least 2 blocks per SM). Raises BackendUnavailableError without CuPy or a device."""
    from safemon.kernels.compiler import import_cupy

    cp = import_cupy()
    ids = sorted(set(gpus)) or [0]
    return max(int(cp.cuda.runtime.getDeviceProperties(i)["multiProcessorCount"]) for i in ids)


def sm_report(
    sm_count: object, per_block: object, pattern: object, c: object, es: object, passed: bool,
) -> tuple[tuple[int, ...], int | None, tuple[int, ...]]:
    """From a self-test RESULT (meta `sm_count`, third frame: the SM id of every block, uint32):
    the SMs that ran blocks, the device's SM count and, for a failed test whose golden
    `pattern` (expected_c, expected_es, variant) is at hand, the SMs of the failing blocks.
    Malformed or absent parts give ((), None, ()): coverage is then simply unknown."""
    if not (isinstance(sm_count, int) and not isinstance(sm_count, bool) and sm_count > 0
            and isinstance(per_block, np.ndarray) and per_block.ndim == 1 and per_block.size
            and per_block.dtype == np.uint32 and int(per_block.max()) < sm_count):
        return (), None, ()
    count = sm_count
    sms = per_block
    failing: tuple[int, ...] = ()
    exp_c, exp_es = getattr(pattern, "expected_c", None), getattr(pattern, "expected_es", None)
    variant = getattr(pattern, "variant", None)
    if (not passed and isinstance(c, np.ndarray) and isinstance(es, np.ndarray)
            and isinstance(exp_c, np.ndarray) and isinstance(exp_es, np.ndarray)
            and isinstance(variant, Variant)):
        try:
            failing = failing_sms(failing_blocks(exp_c, exp_es, c, es, variant.tile), per_block)
        except (ValueError, IndexError):
            failing = ()
    return tuple(int(s) for s in np.unique(sms)), count, failing


def failing_blocks(
    expected_c: npt.NDArray[np.float32], expected_es: npt.NDArray[np.uint32],
    c: npt.NDArray[np.float32], es: npt.NDArray[np.uint32], tile: TileConfig,
) -> list[int]:
    """Linear block ids (by·gx + bx) whose ES rows or C tile differ bit for bit from golden.

    Raises:
        ValueError: shapes that do not match each other or the tile's decomposition.
    """
    m, n = expected_c.shape
    gx, gy = tile.grid(m, n)
    if c.shape != expected_c.shape or es.shape != expected_es.shape or \
            es.shape[0] != gx * gy * tile.threads:
        raise ValueError(f"shapes do not match: C {c.shape} vs {expected_c.shape}, "
                         f"ES {es.shape} vs {expected_es.shape} for {gx}x{gy} blocks")
    bad = np.zeros(gx * gy, dtype=bool)
    es_bad = (es != expected_es).reshape(gx * gy, -1).any(axis=1)
    bad |= es_bad
    c_diff = c.view(np.uint32) != expected_c.view(np.uint32)
    pad = np.zeros((gy * tile.bm, gx * tile.bn), dtype=bool)
    pad[:m, :n] = c_diff
    bad |= pad.reshape(gy, tile.bm, gx, tile.bn).any(axis=(1, 3)).reshape(-1)
    return [int(i) for i in np.flatnonzero(bad)]


def failing_sms(blocks: Iterable[int], sm_of_block: npt.NDArray[np.uint32]) -> tuple[int, ...]:
    """The distinct SMs (sorted) that ran the given blocks."""
    return tuple(sorted({int(sm_of_block[b]) for b in blocks}))


@dataclass
class SmCoverage:
    """Which SMs a channel's passed self-tests covered, and when (sans-IO; times in seconds).

    Args:
        sm_count: SMs of the channel's device (from the device properties).
    """

    sm_count: int
    _last_seen: dict[int, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.sm_count < 1:
            raise InvalidInputError(f"sm_count must be positive, got {self.sm_count}")

    def record(self, sms: Iterable[int], now: float) -> None:
        """A self-test that passed at `now` ran blocks on `sms`.

        Raises:
            InvalidInputError: an SM id outside 0..sm_count−1.
        """
        ids = [int(s) for s in sms]
        for s in ids:
            if not 0 <= s < self.sm_count:
                raise InvalidInputError(f"SM {s} outside 0..{self.sm_count - 1}")
        for s in ids:
            self._last_seen[s] = now

    def covered(self, now: float, window: float) -> frozenset[int]:
        """SMs seen by a passed self-test in [now − window, now]."""
        return frozenset(s for s, t in self._last_seen.items() if now - window <= t <= now)

    def ratio(self, now: float, window: float) -> float:
        """Share of the device's SMs covered in the last `window` seconds (0.0 .. 1.0)."""
        return len(self.covered(now, window)) / self.sm_count

    def uncovered(self, now: float, window: float) -> tuple[int, ...]:
        """SMs not covered in the last `window` seconds, sorted."""
        seen = self.covered(now, window)
        return tuple(s for s in range(self.sm_count) if s not in seen)
