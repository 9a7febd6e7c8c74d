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

Store layout (a directory)
--------------------------
- `manifest.json`: `{"format": "safemon-golden", "generator_version": int, "patterns": [...]}`;
  each entry has `id`, `family`, `dims` ("MxNxK"), `variant` (`Variant.as_dict()`),
  `variant_name`, `file` (a bare file name in the directory) and `sha256` (hex of the file).
- one `.npz` per (id, variant) with the arrays `a`, `b` (float32), `expected_c` (float32),
  `expected_es` (uint32). Written without compression and with fixed zip timestamps, so the
  same generator version produces byte-identical files (and SHA-256 sums) on every machine.
  Read with `allow_pickle=False`: no pickle, anywhere.

The built-in store (package data, `safemon/patterns/data/`) holds the embedded default's
patterns (16x16x16, the default variant, all four families).
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import zipfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import numpy as np
import numpy.typing as npt

from safemon.errors import PatternError
from safemon.kernels.api import run_variant
from safemon.kernels.catalog import TileConfig, Variant, make_variant

if TYPE_CHECKING:
    from safemon.config import ChannelConfig, Config, VariantConfig

__all__ = [
    "BUILTIN_DIR",
    "FAMILIES",
    "GENERATOR_VERSION",
    "MANIFEST_NAME",
    "GoldenPattern",
    "build_patterns",
    "channel_pattern_shapes",
    "find_pattern",
    "generate_inputs",
    "load_patterns",
    "make_pattern",
    "pattern_id",
    "pattern_shapes",
    "verify_patterns",
]

#: Bump when the generator or the store layout changes: stores built by another version are
#: refused at load, because their inputs (or expected values) no longer match this code.
GENERATOR_VERSION: Final = 1
FAMILIES: Final[tuple[str, ...]] = ("random", "walking", "checkerboard", "extremes")
MANIFEST_NAME: Final = "manifest.json"
MANIFEST_FORMAT: Final = "safemon-golden"
#: The package's own store (the embedded default's patterns).
BUILTIN_DIR: Final = Path(__file__).resolve().parent / "data"

_ARRAYS: Final = ("a", "b", "expected_c", "expected_es")
_FLT_MAX: Final = float(np.finfo(np.float32).max)
_DIMS_RE: Final = re.compile(r"^([1-9][0-9]*)x([1-9][0-9]*)x([1-9][0-9]*)$")
#: 1980-01-01 is the earliest zip timestamp; any fixed value makes the bytes reproducible.
_ZIP_TIME: Final = (1980, 1, 1, 0, 0, 0)

Dims = tuple[int, int, int]
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
        for name in _ARRAYS:
            arr = getattr(self, name)
            if arr.flags.writeable:
                arr = arr.copy()
                arr.setflags(write=False)
                object.__setattr__(self, name, arr)

    @property
    def dims(self) -> Dims:
        """(M, N, K)."""
        m, k = self.a.shape
        return (int(m), int(self.b.shape[1]), int(k))

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
        return _same_bits(c_h, self.expected_c) and _same_bits(es_h, self.expected_es)


def _same_bits(x: np.ndarray[Any, Any], ref: np.ndarray[Any, Any]) -> bool:
    if x.dtype != ref.dtype or x.shape != ref.shape:
        return False
    # Compare the raw bit patterns: float == would call -0.0 equal to +0.0 and NaN unequal.
    return bool(np.array_equal(np.ascontiguousarray(x).view(np.uint32), ref.view(np.uint32)))


def pattern_id(family: str, dims: Dims) -> str:
    """`<family>-<M>x<N>x<K>` (the id of the inputs)."""
    return f"{family}-{_dims_str(dims)}"


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


def _dims_str(dims: Dims) -> str:
    return f"{dims[0]}x{dims[1]}x{dims[2]}"


def _parse_dims(d: str | Sequence[int]) -> Dims:
    if isinstance(d, str):
        mt = _DIMS_RE.match(d)
        if mt is None:
            raise ValueError(f"dims {d!r} is not 'MxNxK' with positive integers")
        return (int(mt.group(1)), int(mt.group(2)), int(mt.group(3)))
    t = tuple(d)
    if len(t) != 3 or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in t):
        raise ValueError(f"dims must be three positive ints (M, N, K), got {d!r}")
    return (t[0], t[1], t[2])


def _seed(family: str, dims: Dims, operand: str) -> int:
    # A hash of the names, not Python's hash() (salted per process) and not a counter
    # (adding a family must not change the others).
    text = f"safemon-golden:v{GENERATOR_VERSION}:{family}:{_dims_str(dims)}:{operand}"
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


def generate_inputs(family: str, dims: Dims | str) -> tuple[F32, F32]:
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
    m, n, k = _parse_dims(dims)
    if family == "random":
        a = np.random.default_rng(_seed(family, (m, n, k), "a")).standard_normal((m, k))
        b = np.random.default_rng(_seed(family, (m, n, k), "b")).standard_normal((k, n))
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


def make_pattern(family: str, dims: Dims | str, variant: Variant) -> GoldenPattern:
    """Generate the inputs and compute the expected C and ES with the NumPy reference.

    Raises:
        ValueError: unknown family or malformed dims.
    """
    d = _parse_dims(dims)
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
# The store
# --------------------------------------------------------------------------------------------


def _file_name(pid: str, variant: Variant) -> str:
    slug = re.sub(r"[^A-Za-z0-9._-]", "_", variant.name.replace("/", "-"))
    return f"{pid}--{slug}.npz"


def _npz_bytes(arrays: dict[str, np.ndarray[Any, Any]]) -> bytes:
    """A .npz archive with fixed timestamps and no compression: reproducible bytes."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_STORED) as zf:
        for name, arr in arrays.items():
            member = io.BytesIO()
            np.lib.format.write_array(member, np.ascontiguousarray(arr), allow_pickle=False)
            info = zipfile.ZipInfo(f"{name}.npy", date_time=_ZIP_TIME)
            info.external_attr = 0o644 << 16
            zf.writestr(info, member.getvalue())
    return buf.getvalue()


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _variants_for(dims: Dims, variants: Sequence[Variant | VariantConfig]) -> list[Variant]:
    out: list[Variant] = []
    for v in variants:
        concrete = v if isinstance(v, Variant) else v.to_variant(dims[0], dims[1])
        if concrete not in out:
            out.append(concrete)
    return out


def build_patterns(
    directory: str | Path,
    dims_list: Sequence[Dims | str],
    variants: Sequence[Variant | VariantConfig],
    families: Sequence[str] = FAMILIES,
) -> Path:
    """Generate every (dims, variant, family) pattern into `directory` and write its manifest.

    Args:
        directory: created if missing. Pattern files of the same names are overwritten; the
            new manifest lists exactly the patterns built now.
        dims_list: shapes as (M, N, K) or "MxNxK".
        variants: concrete `Variant`s, or `VariantConfig`s (resolved per shape, so tile
            "auto" gets the tile a channel would run). Duplicates are built once.
        families: a subset of `FAMILIES`.

    Returns:
        The manifest's path.

    Raises:
        ValueError: malformed dims, an unknown family, an empty dims_list or variants.
    """
    if not dims_list or not variants:
        raise ValueError("build_patterns needs at least one dims and one variant")
    for fam in families:
        if fam not in FAMILIES:
            raise ValueError(f"unknown golden pattern family {fam!r}; known: {', '.join(FAMILIES)}")
    out_dir = Path(directory)
    out_dir.mkdir(parents=True, exist_ok=True)
    entries: list[dict[str, Any]] = []
    seen: set[str] = set()
    for raw in dims_list:
        dims = _parse_dims(raw)
        for variant in _variants_for(dims, variants):
            for fam in families:
                p = make_pattern(fam, dims, variant)
                name = _file_name(p.id, variant)
                if name in seen:
                    continue  # the same shape listed twice
                seen.add(name)
                data = _npz_bytes({n: getattr(p, n) for n in _ARRAYS})
                (out_dir / name).write_bytes(data)
                entries.append(
                    {
                        "id": p.id,
                        "family": fam,
                        "dims": _dims_str(dims),
                        "variant": variant.as_dict(),
                        "variant_name": variant.name,
                        "file": name,
                        "sha256": hashlib.sha256(data).hexdigest(),
                    }
                )
    manifest = {
        "format": MANIFEST_FORMAT,
        "generator_version": GENERATOR_VERSION,
        "patterns": entries,
    }
    path = out_dir / MANIFEST_NAME
    path.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return path


@dataclass(frozen=True)
class _Entry:
    id: str
    family: str
    dims: Dims
    variant: Variant
    file: str
    sha256: str


def _variant_from_dict(d: Any) -> Variant:
    if not isinstance(d, dict) or not isinstance(d.get("tile"), dict):
        raise ValueError("variant must be an object with a tile object")
    t = d["tile"]
    tile = TileConfig(
        str(t["name"]), int(t["bm"]), int(t["bn"]), int(t["bk"]), int(t["tm"]), int(t["tn"])
    )
    v = make_variant(d["checksum"], d["level"], str(d["mode"]), tile)
    if v.as_dict() != d:
        raise ValueError(f"variant {d!r} does not describe a catalog variant exactly")
    return v


def _read_manifest(directory: Path) -> tuple[int, list[_Entry]]:
    """(generator_version, entries). Raises PatternError naming the manifest on any problem."""
    path = directory / MANIFEST_NAME
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise PatternError(
            f"golden pattern manifest {str(path)!r} is missing "
            "(run `safemon patterns build --dir DIR`)"
        ) from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise PatternError(f"golden pattern manifest {str(path)!r} is unreadable: {exc}") from None
    try:
        if not isinstance(raw, dict) or raw.get("format") != MANIFEST_FORMAT:
            raise ValueError(f"format must be {MANIFEST_FORMAT!r}")
        version = raw["generator_version"]
        if not isinstance(version, int) or isinstance(version, bool):
            raise ValueError("generator_version must be an integer")
        if not isinstance(raw["patterns"], list):
            raise ValueError("patterns must be a list")
        entries: list[_Entry] = []
        for i, e in enumerate(raw["patterns"]):
            try:
                fname = str(e["file"])
                if Path(fname).name != fname or not fname.endswith(".npz"):
                    # A path outside the store would let a manifest point anywhere.
                    raise ValueError(f"file must be a bare .npz name, got {fname!r}")
                dims = _parse_dims(str(e["dims"]))
                family = str(e["family"])
                if family not in FAMILIES:
                    raise ValueError(f"unknown family {family!r}")
                pid = str(e["id"])
                if pid != pattern_id(family, dims):
                    raise ValueError(f"id {pid!r} does not match family and dims")
                sha = str(e["sha256"])
                if not re.fullmatch(r"[0-9a-f]{64}", sha):
                    raise ValueError("sha256 must be 64 lowercase hex digits")
                entries.append(
                    _Entry(pid, family, dims, _variant_from_dict(e["variant"]), fname, sha)
                )
            except (KeyError, TypeError, ValueError) as exc:
                raise ValueError(f"patterns[{i}]: {exc}") from None
    except (KeyError, TypeError, ValueError) as exc:
        raise PatternError(f"golden pattern manifest {str(path)!r} is invalid: {exc}") from None
    return version, entries


def _check_file(directory: Path, entry: _Entry) -> Path:
    path = directory / entry.file
    if not path.is_file():
        raise PatternError(f"golden pattern file {str(path)!r} listed in the manifest is missing")
    if _sha256(path) != entry.sha256:
        raise PatternError(
            f"golden pattern file {str(path)!r} does not match its SHA-256 in the manifest "
            "(tampered with or corrupted)"
        )
    return path


def _load_file(path: Path, entry: _Entry) -> GoldenPattern:
    """Read one pattern file and check its arrays against the entry (PatternError names it)."""
    m, n, k = entry.dims
    v = entry.variant
    want = {
        "a": ((m, k), np.float32),
        "b": ((k, n), np.float32),
        "expected_c": ((m, n), np.float32),
        "expected_es": ((v.tile.total_threads(m, n), v.words), np.uint32),
    }
    arrays: dict[str, np.ndarray[Any, Any]] = {}
    try:
        with np.load(path, allow_pickle=False) as npz:
            for name, (shape, dtype) in want.items():
                arr = npz[name]
                if arr.shape != shape or arr.dtype != dtype:
                    raise ValueError(
                        f"{name} is {arr.dtype}{arr.shape}, expected {np.dtype(dtype)}{shape}"
                    )
                arrays[name] = arr
    except (OSError, KeyError, ValueError, zipfile.BadZipFile) as exc:
        raise PatternError(f"golden pattern file {str(path)!r} is malformed: {exc}") from None
    if not (np.isfinite(arrays["a"]).all() and np.isfinite(arrays["b"]).all()):
        raise PatternError(f"golden pattern file {str(path)!r} has non-finite inputs")
    return GoldenPattern(
        id=entry.id,
        family=entry.family,
        a=arrays["a"],
        b=arrays["b"],
        variant=v,
        expected_c=arrays["expected_c"],
        expected_es=arrays["expected_es"],
    )


def _open_store(directory: Path) -> list[_Entry]:
    """The manifest's entries after every listed file passed its SHA-256 check."""
    version, entries = _read_manifest(directory)
    if version != GENERATOR_VERSION:
        raise PatternError(
            f"golden pattern manifest {str(directory / MANIFEST_NAME)!r} was built by generator "
            f"version {version}, this safemon uses {GENERATOR_VERSION} (rebuild the store)"
        )
    for e in entries:
        _check_file(directory, e)
    return entries


def load_patterns(config: Config, *, sm_count: int | None = None) -> list[GoldenPattern]:
    """Every golden pattern the deployment's self-tests need.

    For each shape, each distinct channel variant (resolved for that shape) and each family in
    `FAMILIES`, one `GoldenPattern`, in that order. The shapes are `config.patterns.dims`;
    when the device covering is on (`config.patterns.covers(sm_count)`: on a GPU by default)
    the device-covering shape `sm_coverage.cover_dims(sm_count, tile)` comes first and the
    configured dims are kept only where the config names them explicitly, so every default
    self-test on a GPU puts ≥ 2 blocks on every SM. They come from
    the store `config.patterns.dir` (or the built-in store when it is None); a pattern the
    store does not hold is generated in memory with the NumPy reference.

    Every file the manifest lists is checked against its SHA-256 before anything is used, so
    a tampered store refuses start-up even when the tampered pattern is not configured.

    Raises:
        PatternError: naming the file — the manifest is missing, unreadable or invalid, or
            from another generator version; a listed file is missing, fails its SHA-256
            check or holds malformed arrays.
    """
    directory = BUILTIN_DIR if config.patterns.dir is None else Path(config.patterns.dir)
    entries = _open_store(directory)
    index = {(e.id, e.variant): e for e in entries}
    channels = config.channels or []
    out: list[GoldenPattern] = []
    for dims in pattern_shapes(config, sm_count):
        for variant in _variants_for(dims, [ch.variant for ch in channels]):
            for fam in FAMILIES:
                entry = index.get((pattern_id(fam, dims), variant))
                if entry is None:
                    out.append(make_pattern(fam, dims, variant))
                else:
                    out.append(_load_file(directory / entry.file, entry))
    return out


def pattern_shapes(config: Config, sm_count: int | None = None) -> list[tuple[int, int, int]]:
    """The (M, N, K) shapes any channel's self-tests run (`load_patterns` loads them all):
    each channel's `channel_pattern_shapes`, in channel order, without repeats."""
    shapes: list[tuple[int, int, int]] = []
    for ch in config.channels or []:
        shapes += [s for s in channel_pattern_shapes(config, ch, sm_count) if s not in shapes]
    return shapes or config.patterns.shapes()


def channel_pattern_shapes(
    config: Config, channel: ChannelConfig, sm_count: int | None = None
) -> list[tuple[int, int, int]]:
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
    # by output size, so size with the tile of a large output and resolve again.
    d = cover_dims(sm_count, channel.variant.to_variant(1024, 1024).tile)
    d = cover_dims(sm_count, channel.variant.to_variant(d.m, d.n).tile)
    shapes = [(d.m, d.n, d.k)]
    if "dims" in config.patterns.model_fields_set:
        shapes += [s for s in config.patterns.shapes() if s not in shapes]
    return shapes


def verify_patterns(directory: str | Path) -> list[str]:
    """Check a store thoroughly; an empty list means it is sound.

    Beyond what `load_patterns` checks (manifest, presence, SHA-256, array shapes), every
    pattern's inputs are regenerated and its expected C and ES recomputed with the NumPy
    reference, so a store built by a faulty machine or an older reference is caught. Files
    in the directory that the manifest does not list are reported too.

    Returns:
        One human-readable line per problem, each naming the file concerned.
    """
    d = Path(directory)
    try:
        version, entries = _read_manifest(d)
    except PatternError as exc:
        return [str(exc)]
    problems: list[str] = []
    if version != GENERATOR_VERSION:
        problems.append(
            f"{d / MANIFEST_NAME}: generator version {version}, this safemon uses {GENERATOR_VERSION}"
        )
    listed = {e.file for e in entries}
    seen_keys: set[tuple[str, Variant]] = set()
    for e in entries:
        if (e.id, e.variant) in seen_keys:
            problems.append(f"{d / MANIFEST_NAME}: {e.id} for {e.variant.name} listed twice")
        seen_keys.add((e.id, e.variant))
        try:
            pat = _load_file(_check_file(d, e), e)
        except PatternError as exc:
            problems.append(str(exc))
            continue
        path = d / e.file
        if version == GENERATOR_VERSION:
            a, b = generate_inputs(e.family, e.dims)
            if not (_same_bits(pat.a, a) and _same_bits(pat.b, b)):
                problems.append(f"{path}: inputs differ from the generator's")
                continue
        ref = run_variant(pat.a, pat.b, e.variant, backend="numpy")
        if not pat.check(np.asarray(ref.c), np.asarray(ref.es)):
            problems.append(f"{path}: expected C/ES differ from the NumPy reference")
    for extra in sorted(p.name for p in d.glob("*.npz") if p.name not in listed):
        problems.append(f"{d / extra}: not listed in the manifest")
    return problems
