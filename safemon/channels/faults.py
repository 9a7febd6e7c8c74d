"""Channel-level fault injection for validation (issue 5, item 5): pure functions, no I/O.

A channel holds at most one `FaultState`; the worker consults it around each result. KINDs:

- `bitflip-c`: one bit of the *next* C (live or self-test) is flipped: element 0, exponent
  bit 30 (bit 29 if flipping 30 would make the value non-finite), so the value changes by
  orders of magnitude. Transient: applies once.
- `bitflip-es`: bit 0 of the first word of the next ES array is flipped. Transient.
- `stuck`: permanent output-lane fault: bit 30 of *every* element of every later C is forced
  to the complement of its value in element 0 of the first affected C (a stuck-at bit).
- `crash`: the channel exits at once (process mode: `os._exit(70)`; stream mode: its
  thread ends without a word).
- `hang`: the channel stops answering (no results, no heartbeats) but still obeys `clear`
  and `stop`.
- `slow`: every later result is sent only after its request's deadline has passed.
- `corrupt-frame`: the next result's C frame is corrupted after its CRC was computed, so
  the receiver rejects it (`bad_crc`). Transient.

`clear` removes every injected fault.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt

from safemon.errors import InvalidInputError

__all__ = ["FAULT_KINDS", "FaultState", "flip_c", "flip_es", "force_stuck"]

FAULT_KINDS: Final[tuple[str, ...]] = (
    "bitflip-c",
    "bitflip-es",
    "stuck",
    "crash",
    "hang",
    "slow",
    "corrupt-frame",
)
_EXP_BIT: Final = 30


@dataclass
class FaultState:
    """The faults currently injected into one channel (mutable, owned by its worker)."""

    bitflip_c: bool = False
    bitflip_es: bool = False
    stuck_value: int | None = None  # forced value (0/1) of bit 30 once a stuck fault is armed
    stuck_armed: bool = False
    crash: bool = False
    hang: bool = False
    slow: bool = False
    corrupt_frame: bool = False

    def inject(self, kind: str) -> None:
        """Arm fault `kind` (one of `FAULT_KINDS`).

        Raises:
            InvalidInputError: unknown kind.
        """
        if kind not in FAULT_KINDS:
            raise InvalidInputError(f"unknown fault kind {kind!r}; known: {', '.join(FAULT_KINDS)}")
        if kind == "stuck":
            self.stuck_armed = True
        else:
            setattr(self, kind.replace("-", "_"), True)

    def clear(self) -> None:
        """Remove every injected fault."""
        self.__init__()  # type: ignore[misc]

    def apply(self, c: npt.NDArray[np.float32], es: npt.NDArray[np.uint32]) -> None:
        """Apply the data faults to a fresh result in place (C (M, N) float32, ES uint32)."""
        if self.stuck_armed:
            if self.stuck_value is None and c.size:
                bits = c.reshape(-1).view(np.uint32)
                self.stuck_value = int(((bits[0] >> _EXP_BIT) & 1) ^ 1)
            if self.stuck_value is not None:
                force_stuck(c, self.stuck_value)
        if self.bitflip_c and c.size:
            flip_c(c)
            self.bitflip_c = False
        if self.bitflip_es and es.size:
            flip_es(es)
            self.bitflip_es = False


def flip_c(c: npt.NDArray[np.float32]) -> int:
    """Flip one exponent bit of element 0 of `c` in place; returns the bit flipped.

    Bit 30 unless that would give inf/NaN (|c| in [1, 2)), then bit 29: always finite,
    always a different value.
    """
    bits = c.reshape(-1).view(np.uint32)
    for bit in (_EXP_BIT, _EXP_BIT - 1):
        candidate = np.uint32(bits[0] ^ np.uint32(1 << bit))
        if np.isfinite(candidate.view(np.float32)):
            bits[0] = candidate
            return bit
    raise AssertionError("unreachable: one of bits 29/30 always flips to a finite value")


def flip_es(es: npt.NDArray[np.uint32]) -> None:
    """Flip bit 0 of the first ES word in place."""
    flat = es.reshape(-1)
    flat[0] ^= np.uint32(1)


def force_stuck(c: npt.NDArray[np.float32], value: int) -> None:
    """Force bit 30 of every element of `c` to `value` (0 or 1) in place."""
    bits = c.reshape(-1).view(np.uint32)
    mask = np.uint32(1 << _EXP_BIT)
    if value:
        bits |= mask
    else:
        bits &= ~mask
