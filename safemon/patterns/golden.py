"""Golden patterns: design-time fixed inputs with their expected C and ES.

A golden pattern is an input pair (A, B) from a deterministic generator plus the C and the ES
array that the NumPy reference backend computes for one kernel variant. The expected values
never come from the GPU under test (docs/SIGNATURES.md): a latent fault of that GPU would
otherwise be baked into its own reference.

Identity
--------
`GoldenPattern.id` names the *inputs*: `<family>-<M>x<N>x<K>`, e.g. `random-16x16x16`. The
inputs do not depend on the variant, so every channel runs the same ids (the DTI scheduler
hands them out round-robin to all channels); each channel checks its result against the
pattern of its *own* variant, found with `find_pattern(patterns, id, variant)`. The pair
(id, variant) is unique in what `load_patterns` returns.

Families (all inputs finite; `_check_no_overflow` proves that no product or partial sum can
overflow float32, so every expected C is finite):

- ``random``: seeded standard normal.
- ``walking``: walking ones. Elements cycle through 1.0 with one mantissa bit set (bits 0..22)
  and one-hot exponent fields (exponent bits 23..30, mantissa zero: 2^-126 .. 2^1), with the
  sign alternating per cycle, so every mantissa and exponent bit of the operand path is 1 in
  some element and 0 in its neighbours.
- ``checkerboard``: the bit patterns 0x55555555 / 0xAAAAAAAA and 0x33333333 / 0xCCCCCCCC laid
  out as a spatial checkerboard (horizontal neighbours are bitwise complements; the pair
  changes every two rows), so adjacent lanes toggle every bit.
- ``extremes``: ±0, the smallest and largest subnormals, the smallest normal, FLT_MAX, 2^127,
  2^100 ... On even k, A takes the large values and B the tiny ones; on odd k the roles swap.
  Products therefore span subnormal results, underflow to ±0, and large exponents, without
  overflow.

The file store that holds built patterns (manifest, one .npz per pattern, SHA-256 checks) is
`safemon.golden_store`; this module does no I/O.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

import numpy as np
import numpy.typing as npt

from safemon.dims import Dims, as_dims
from safemon.errors import PatternError
from safemon.kernels.api import run_variant
from safemon.kernels.catalog import TILES, Variant

if TYPE_CHECKING:
    from safemon.config import ChannelConfig, Config

__all__ = [
    "ARRAYS",
    "FAMILIES",
    "GENERATOR_VERSION",
    "GoldenPattern",
    "channel_pattern_shapes",
    "find_pattern",
    "generate_inputs",
    "make_pattern",
    "pattern_id",
    "pattern_shapes",
    "same_bits",
]

#: Bump when the generator or the store layout changes: stores built by another version are
#: refused at load, because their inputs (or expected values) no longer match this code.
GENERATOR_VERSION: Final = 1
FAMILIES: Final[tuple[str, ...]] = ("random", "walking", "checkerboard", "extremes")
#: The pattern's arrays, by field name (also the array names in a store file).
ARRAYS: Final = ("a", "b", "expected_c", "expected_es")

_FLT_MAX: Final = float(np.finfo(np.float32).max)

F32 = npt.NDArray[np.float32]
U32 = npt.NDArray[np.uint32]


# --------------------------------------------------------------------------------------------
# The pattern object
# --------------------------------------------------------------------------------------------


def _host(x: Any, name: str) -> np.ndarray[Any, Any]:
    """A NumPy view of `x` (CuPy arrays are copied to the host); no dtype conversion."""
    if isinstance(x, np.ndarray):
        return x
    if type(x).__module__.split(".")[0] == "cupy":
        out: np.ndarray[Any, Any] = x.get()
        return out
    raise TypeError(f"{name} must be a NumPy or CuPy array, not {type(x).__name__}")


@dataclass(frozen=True, eq=False)
class GoldenPattern:
    """One golden pattern: inputs and the reference's expected outputs for one variant.

    Attributes:
        id: `<family>-<M>x<N>x<K>`; names the inputs, shared by every variant.
        family: one of `FAMILIES`.
        a: (M, K) float32, finite, read-only.
        b: (K, N) float32, finite, read-only.
        variant: the kernel variant the expected values belong to.
        expected_c: (M, N) float32, read-only.
        expected_es: (variant.tile.total_threads(M, N), variant.words) uint32, read-only.

    Equality is identity (the fields hold arrays); compare `key` to match patterns.
    """

    id: str
    family: str
    a: F32 = field(repr=False)
    b: F32 = field(repr=False)
    variant: Variant
    expected_c: F32 = field(repr=False)
    expected_es: U32 = field(repr=False)

    def __post_init__(self) -> None:
        # Read-only so that a channel cannot corrupt the reference it is checked against.
        for name in ARRAYS:
            arr = getattr(self, name)
            if arr.flags.writeable:
                arr = arr.copy()
                arr.setflags(write=False)
                object.__setattr__(self, name, arr)

    @property
    def dims(self) -> Dims:
        """(M, N, K)."""
        m, k = self.a.shape
        return Dims(int(m), int(self.b.shape[1]), int(k))

    @property
    def key(self) -> tuple[str, Variant]:
        """(id, variant): unique within one `load_patterns` result."""
        return (self.id, self.variant)

    def check(self, c: Any, es: Any) -> bool:
        """True when `c` and `es` equal the expected values bit for bit.

        Args:
            c: the channel's (M, N) float32 result, NumPy or CuPy.
            es: the channel's ES array, (threads, words) uint32, NumPy or CuPy.

        Returns:
            False on any differing bit (±0 and NaN payloads included), and also on a wrong
            shape or dtype: a result that is not the expected one is a failed self-test,
            nothing is converted.

        Raises:
            TypeError: `c` or `es` is not a NumPy or CuPy array.
        """
        c_h = _host(c, "c")
        es_h = _host(es, "es")
        return same_bits(c_h, self.expected_c) and same_bits(es_h, self.expected_es)


def same_bits(x: np.ndarray[Any, Any], ref: np.ndarray[Any, Any]) -> bool:
    if x.dtype != ref.dtype or x.shape != ref.shape:
        return False
    # Compare the raw bit patterns: float == would call -0.0 equal to +0.0 and NaN unequal.
    return bool(np.array_equal(np.ascontiguousarray(x).view(np.uint32), ref.view(np.uint32)))


def pattern_id(family: str, dims: Dims | Sequence[int]) -> str:
    """`<family>-<M>x<N>x<K>` (the id of the inputs)."""
    return f"{family}-{as_dims(dims).key}"


def find_pattern(
    patterns: Iterable[GoldenPattern], pattern_id: str, variant: Variant
) -> GoldenPattern:
    """The pattern with this id whose expected values belong to `variant`.

    Raises:
        PatternError: there is none (the channel's variant was not configured when the
            patterns were loaded).
    """
    for p in patterns:
        if p.id == pattern_id and p.variant == variant:
            return p
    raise PatternError(f"no golden pattern {pattern_id!r} for variant {variant.name}")


# --------------------------------------------------------------------------------------------
# The deterministic generator
# --------------------------------------------------------------------------------------------


def _seed(family: str, dims: Dims, operand: str) -> int:
    # A hash of the names, not Python's hash() (salted per process) and not a counter
    # (adding a family must not change the others).
    text = f"safemon-golden:v{GENERATOR_VERSION}:{family}:{dims.key}:{operand}"
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")


def _from_bits(bits: npt.NDArray[np.uint32]) -> F32:
    return np.ascontiguousarray(bits.astype(np.uint32)).view(np.float32)


def _walking(rows: int, cols: int, phase: int) -> F32:
    one = 0x3F800000
    cycle = [one | (1 << b) for b in range(23)] + [(1 << e) << 23 for e in range(8)]
    words = np.array(cycle, dtype=np.uint32)
    # A row offset that is coprime to the cycle length (31) so rows differ even when `cols`
    # is a multiple of 31; `phase` de-aligns A from B.
    idx = np.arange(rows)[:, None] * (cols + 3) + np.arange(cols)[None, :] + phase
    bits = words[idx % len(cycle)]
    sign = ((idx // len(cycle)) % 2).astype(np.uint32) << np.uint32(31)
    return _from_bits(bits | sign)


def _checkerboard(rows: int, cols: int, phase: int) -> F32:
    i = np.arange(rows)[:, None]
    j = np.arange(cols)[None, :]
    # 0x55.. (≈1.2e13), 0x33.. (≈4e-8) and their complements 0xAA.. (≈-3.1e-13),
    # 0xCC.. (≈-1.1e8): the largest product is ≈1.4e26, far from FLT_MAX even summed 4096×.
    base = np.where(((i // 2 + phase) % 2) == 0, 0x55555555, 0x33333333).astype(np.uint32)
    flip = ((i + j + phase) % 2).astype(bool)
    bits = np.where(flip, ~base, base)
    return _from_bits(bits)


#: Large magnitudes (exponent field up to 254) and tiny ones (subnormals, ±0, min normal).
_BIG_BITS: Final = (
    0x7F7FFFFF,  # FLT_MAX
    0xFF000000,  # -2^127
    0x71800000,  # 2^100
    0xDFC00000,  # -1.5 * 2^64
    0x3F800000,  # 1.0
    0x80000000,  # -0.0
    0x40400000,  # 3.0
)
_TINY_BITS: Final = (
    0x00000001,  # 2^-149, smallest subnormal
    0x007FFFFF,  # largest subnormal
    0x80800000,  # -2^-126, smallest normal
    0x30800000,  # 2^-30
    0x00000000,  # +0.0
    0x80000001,  # -2^-149
    0xB3A00000,  # -1.25 * 2^-24
    0x00400000,  # 2^-127, a subnormal with one bit set
    0x80000000,  # -0.0
)


def _extremes(rows: int, cols: int, *, k_axis: int, phase: int) -> F32:
    i = np.arange(rows)[:, None]
    j = np.arange(cols)[None, :]
    k = i if k_axis == 0 else j
    other = j if k_axis == 0 else i
    big = np.array(_BIG_BITS, dtype=np.uint32)
    tiny = np.array(_TINY_BITS, dtype=np.uint32)
    # A (k on axis 1, phase 0) is big on even k; B (k on axis 0, phase 1) is tiny on even k.
    use_big = ((k + phase) % 2) == 0
    idx = other * 5 + k // 2
    bits = np.where(use_big, big[idx % len(big)], tiny[idx % len(tiny)])
    return _from_bits(bits)


#: Moderate values that keep tiny operands tiny: the products land in the subnormal range.
_UNIT_BITS: Final = (0x3F800000, 0xBF800000, 0x3F000000, 0x00000000, 0x80000000)
#: Subnormals and zeros only.
_SUB_BITS: Final = (
    0x00000001,
    0x80012345,
    0x00000000,
    0x00400000,
    0x80000000,
    0x007FFFFF,
    0x80000001,
)


def _extremes_pair(m: int, n: int, k: int) -> tuple[F32, F32]:
    a = _extremes(m, k, k_axis=1, phase=0)
    b = _extremes(k, n, k_axis=0, phase=1)
    # Every third row of A holds only subnormals and ±0, and every third column of B holds
    # ±1, 0.5, ±0 on odd k (where the other rows of A are tiny too), so those outputs are
    # sums of subnormal products: subnormal and ±0 results rather than ones swamped by 2^100.
    sub = np.array(_SUB_BITS, dtype=np.uint32)
    unit = np.array(_UNIT_BITS, dtype=np.uint32)
    rows = np.arange(m)[:, None]
    cols = np.arange(k)[None, :]
    a_bits = a.view(np.uint32).copy()
    special_rows = (rows % 3 == 2) & (cols >= 0)
    a_bits[special_rows] = sub[((rows + cols * 2) % len(sub))][special_rows]
    kk = np.arange(k)[:, None]
    jj = np.arange(n)[None, :]
    b_bits = b.view(np.uint32).copy()
    special_cols = (jj % 3 == 2) & (kk % 2 == 1)
    b_bits[special_cols] = unit[((kk // 2 + jj) % len(unit))][special_cols]
    return _from_bits(a_bits), _from_bits(b_bits)


def _check_no_overflow(a: F32, b: F32, family: str) -> None:
    """Refuse inputs whose MMM could overflow: every |partial sum| ≤ (|A|·|B|)[i, j].

    A factor 2 of margin covers float32 rounding of the K partial sums (relative error
    ≤ K·2^-24 < 1 for K ≤ 4096).
    """
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        raise AssertionError(f"golden generator produced non-finite inputs for {family}")
    bound = np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64))
    if bound.size and float(bound.max()) * 2.0 >= _FLT_MAX:
        raise AssertionError(f"golden generator inputs for {family} could overflow float32")


def generate_inputs(family: str, dims: Sequence[int] | str) -> tuple[F32, F32]:
    """The deterministic inputs (A, B) of one family and shape.

    Args:
        family: one of `FAMILIES`.
        dims: (M, N, K) or "MxNxK".

    Returns:
        (a, b): (M, K) and (K, N) float32, C-contiguous, finite; identical on every call and
        machine for the same `GENERATOR_VERSION`.

    Raises:
        ValueError: unknown family or malformed dims.
    """
    d = as_dims(dims)
    m, n, k = d
    if family == "random":
        a = np.random.default_rng(_seed(family, d, "a")).standard_normal((m, k))
        b = np.random.default_rng(_seed(family, d, "b")).standard_normal((k, n))
        a32, b32 = a.astype(np.float32), b.astype(np.float32)
    elif family == "walking":
        a32, b32 = _walking(m, k, 0), _walking(k, n, 11)
    elif family == "checkerboard":
        a32, b32 = _checkerboard(m, k, 0), _checkerboard(k, n, 1)
    elif family == "extremes":
        a32, b32 = _extremes_pair(m, n, k)
    else:
        raise ValueError(f"unknown golden pattern family {family!r}; known: {', '.join(FAMILIES)}")
    a32, b32 = np.ascontiguousarray(a32), np.ascontiguousarray(b32)
    _check_no_overflow(a32, b32, family)
    return a32, b32


def make_pattern(family: str, dims: Sequence[int] | str, variant: Variant) -> GoldenPattern:
    """Generate the inputs and compute the expected C and ES with the NumPy reference.

    Raises:
        ValueError: unknown family or malformed dims.
    """
    d = as_dims(dims)
    a, b = generate_inputs(family, d)
    res = run_variant(a, b, variant, backend="numpy")
    return GoldenPattern(
        id=pattern_id(family, d),
        family=family,
        a=a,
        b=b,
        variant=variant,
        expected_c=np.asarray(res.c),
        expected_es=np.asarray(res.es),
    )


# --------------------------------------------------------------------------------------------
# Shapes the self-tests run
# --------------------------------------------------------------------------------------------


def pattern_shapes(config: Config, sm_count: int | None = None) -> list[Dims]:
    """The (M, N, K) shapes any channel's self-tests run (`load_patterns` loads them all):
    each channel's `channel_pattern_shapes`, in channel order, without repeats."""
    shapes: list[Dims] = []
    for ch in config.channels or []:
        shapes += [s for s in channel_pattern_shapes(config, ch, sm_count) if s not in shapes]
    return shapes or config.patterns.shapes()


def channel_pattern_shapes(
    config: Config, channel: ChannelConfig, sm_count: int | None = None
) -> list[Dims]:
    """The (M, N, K) shapes `channel`'s self-tests run: when covering is on for `sm_count`,
    the shape that puts >= 2 blocks on every SM *with this channel's own tile* first, then
    the dims the config names (none when it names none); else the configured dims.

    Channels with different tiles get different covering shapes: a shape sized for another
    tile would leave SMs idle (a large tile at the small tile's covering shape fills 20 SMs).
    """
    if sm_count is None or not config.patterns.covers(sm_count):
        return config.patterns.shapes()
    from safemon.patterns.sm_coverage import cover_dims

    # The cover shape is sized for the tile the variant picks at that shape; "auto" picks
    # by shape, so size with `small`'s cover and resolve again (on a GPU of up to about 210
    # SMs auto resolves small's cover shape to small; from there on to large, whose own
    # cover shape it then uses).
    d = cover_dims(sm_count, TILES["small"])
    d = cover_dims(sm_count, channel.variant.tile_for(d.m, d.n, d.k))
    shapes = [d]
    if "dims" in config.patterns.model_fields_set:
        shapes += [s for s in config.patterns.shapes() if s not in shapes]
    return shapes


