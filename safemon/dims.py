"""Matrix sizes of the evidence: `Dims` (M×N×K), parsing, and the seed paper's named sizes."""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["BENCH_DIMS", "SEED_DC_DIMS", "Dims", "parse_dims", "parse_dims_list"]


@dataclass(frozen=True, order=True)
class Dims:
    """C (M×N) = A (M×K) · B (K×N); all three positive."""

    m: int
    n: int
    k: int

    def __post_init__(self) -> None:
        if min(self.m, self.n, self.k) <= 0:
            raise ValueError(f"matrix dimensions must be positive, got {self.m}x{self.n}x{self.k}")

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
