"""Matrix sizes: `Dims` (M×N×K), the one parser of their text forms, and the seed's sizes.

Every "MxNxK" in safemon is read here:

* `parse_key` reads the canonical form `Dims.key` writes ("16x16x16": decimal, no sign, no
  leading zero, lowercase x, no spaces): configuration files and golden-pattern stores.
* `parse_dims` / `parse_dims_list` read what a person types on a command line: also
  "N" (N×N×N), "X" or "×" separators, spaces, and the seed's layer names ("L1".."L3", "L91").
* `as_dims` takes either a canonical string or three positive ints.

`Dims` is a named tuple, so code that wants `(M, N, K)` gets exactly that.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import NamedTuple

__all__ = [
    "BENCH_DIMS",
    "SEED_DC_DIMS",
    "Dims",
    "as_dims",
    "parse_dims",
    "parse_dims_list",
    "parse_key",
]


class _MNK(NamedTuple):
    m: int
    n: int
    k: int


class Dims(_MNK):
    """C (M×N) = A (M×K) · B (K×N); all three positive ints. A tuple (M, N, K).

    Raises (on construction):
        ValueError: a dimension is not positive.
    """

    __slots__ = ()

    def __new__(cls, m: int, n: int, k: int) -> Dims:
        if min(m, n, k) <= 0:
            raise ValueError(f"matrix dimensions must be positive, got {m}x{n}x{k}")
        return super().__new__(cls, m, n, k)

    @property
    def key(self) -> str:
        """The canonical text form "MxNxK" used in evidence files and on the command line."""
        return f"{self.m}x{self.n}x{self.k}"

    @property
    def label(self) -> str:
        """Short human label: "80²" for square sizes, else the key (or the seed's layer name)."""
        for name, d in {**SEED_DC_DIMS, **BENCH_DIMS}.items():
            if d == self and not name[0].isdigit():
                return name
        if self.m == self.n == self.k:
            return f"{self.m}²"
        return self.key

    @property
    def input_bits(self) -> int:
        """Bits in A and B together: the number of single-bit faults of an exhaustive campaign."""
        return 32 * (self.m * self.k + self.k * self.n)

    @property
    def flops(self) -> int:
        """Floating-point operations of one product (2·M·N·K)."""
        return 2 * self.m * self.n * self.k


#: The seed paper's DC sizes (its Table 2): squares N×N×N and three CNN layers (M×N×K).
SEED_DC_DIMS: dict[str, Dims] = {
    "20": Dims(20, 20, 20),
    "40": Dims(40, 40, 40),
    "80": Dims(80, 80, 80),
    "L1": Dims(32, 29, 144),
    "L2": Dims(8, 900, 8),
    "L3": Dims(15, 225, 48),
}

#: The overhead-benchmark sizes: the seed's performance sizes, 1024³ and 4096³, and three
#: inference shapes (a batch-1 layer, a 64-token batch, a 256-row layer with K = 4096).
BENCH_DIMS: dict[str, Dims] = {
    "80": Dims(80, 80, 80),
    "160": Dims(160, 160, 160),
    "320": Dims(320, 320, 320),
    "L91": Dims(18, 230400, 64),
    "1024": Dims(1024, 1024, 1024),
    "4096": Dims(4096, 4096, 4096),
    "1x4096x4096": Dims(1, 4096, 4096),
    "64x4096x4096": Dims(64, 4096, 4096),
    "256x1024x4096": Dims(256, 1024, 4096),
}

_DIMS_RE = re.compile(r"^\s*(\d+)\s*[xX×]\s*(\d+)\s*[xX×]\s*(\d+)\s*$")
_KEY_RE = re.compile(r"^([1-9][0-9]*)x([1-9][0-9]*)x([1-9][0-9]*)$")


def parse_key(text: str) -> Dims:
    """The canonical "MxNxK" (as `Dims.key` writes it) and nothing else.

    Raises:
        ValueError: any other text (the message says "is not 'MxNxK' with positive integers").
    """
    m = _KEY_RE.match(text)
    if m is None:
        raise ValueError(f"dims {text!r} is not 'MxNxK' with positive integers")
    return Dims(int(m.group(1)), int(m.group(2)), int(m.group(3)))


def as_dims(d: str | Sequence[int]) -> Dims:
    """`parse_key(d)` for a string, else three positive ints (M, N, K) (bools refused).

    Raises:
        ValueError: a malformed string, or not three positive ints.
    """
    if isinstance(d, str):
        return parse_key(d)
    t = tuple(d)
    if len(t) != 3 or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in t):
        raise ValueError(f"dims must be three positive ints (M, N, K), got {d!r}")
    return Dims(t[0], t[1], t[2])


def parse_dims(text: str) -> Dims:
    """Parse "MxNxK", a square size "N" (N×N×N), or a seed layer name ("L1".."L3", "L91").

    Raises:
        ValueError: anything else, or a non-positive dimension.
    """
    s = text.strip()
    for table in (SEED_DC_DIMS, BENCH_DIMS):
        if s in table and not s.isdigit():
            return table[s]
    if s.isdigit():
        n = int(s)
        return Dims(n, n, n)
    m = _DIMS_RE.match(s)
    if m is None:
        raise ValueError(
            f"cannot read matrix size {text!r}: use MxNxK (e.g. 18x230400x64), a square size N, "
            f"or one of {', '.join(k for k in {**SEED_DC_DIMS, **BENCH_DIMS} if not k.isdigit())}"
        )
    return Dims(int(m.group(1)), int(m.group(2)), int(m.group(3)))


def parse_dims_list(text: str) -> list[Dims]:
    """A comma-separated list of `parse_dims` forms; "seed-dc" and "bench" name the standard sets."""
    out: list[Dims] = []
    for part in text.split(","):
        p = part.strip()
        if not p:
            continue
        if p == "seed-dc":
            out.extend(SEED_DC_DIMS.values())
        elif p == "bench":
            out.extend(BENCH_DIMS.values())
        else:
            out.append(parse_dims(p))
    if not out:
        raise ValueError(f"no matrix size in {text!r}")
    return out
