"""The golden-pattern file store: build, load and verify a directory of patterns.

The patterns themselves (inputs, expected values, the deterministic generator) are
`safemon.patterns.golden`, which does no I/O; this module reads and writes them.

Store layout (a directory)
--------------------------
- `manifest.json`: `{"format": "safemon-golden", "generator_version": int, "patterns": [...]}`;
  each entry has `id`, `family`, `dims` ("MxNxK"), `variant` (`Variant.as_dict()`),
  `variant_name`, `file` (a bare file name in the directory) and `sha256` (hex of the file).
- one `.npz` per (id, variant) with the arrays `a`, `b` (float32), `expected_c` (float32),
  `expected_es` (uint32). Written without compression and with fixed zip timestamps, so the
  same generator version produces byte-identical files (and SHA-256 sums) on every machine.
  Read with `allow_pickle=False`: no pickle, anywhere.

The built-in store (package data, `safemon/golden_store/data/`) holds the embedded default's
patterns (16x16x16, the default variant, all four families).
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import numpy as np

from safemon.dims import Dims, as_dims
from safemon.errors import PatternError
from safemon.kernels.api import run_variant
from safemon.kernels.catalog import TILES, TileConfig, Variant, make_variant
from safemon.patterns.golden import (
    ARRAYS,
    FAMILIES,
    GENERATOR_VERSION,
    GoldenPattern,
    generate_inputs,
    make_pattern,
    pattern_id,
    pattern_shapes,
    same_bits,
)

if TYPE_CHECKING:
    from safemon.config import Config, VariantConfig

__all__ = [
    "BUILTIN_DIR",
    "MANIFEST_NAME",
    "build_patterns",
    "load_patterns",
    "verify_patterns",
]

MANIFEST_NAME: Final = "manifest.json"
MANIFEST_FORMAT: Final = "safemon-golden"
#: The package's own store (the embedded default's patterns).
BUILTIN_DIR: Final = Path(__file__).resolve().parent / "data"

#: 1980-01-01 is the earliest zip timestamp; any fixed value makes the bytes reproducible.
_ZIP_TIME: Final = (1980, 1, 1, 0, 0, 0)


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
        concrete = v if isinstance(v, Variant) else v.to_variant(dims[0], dims[1], dims[2])
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
        dims = as_dims(raw)
        for variant in _variants_for(dims, variants):
            for fam in families:
                p = make_pattern(fam, dims, variant)
                name = _file_name(p.id, variant)
                if name in seen:
                    continue  # the same shape listed twice
                seen.add(name)
                data = _npz_bytes({n: getattr(p, n) for n in ARRAYS})
                (out_dir / name).write_bytes(data)
                entries.append(
                    {
                        "id": p.id,
                        "family": fam,
                        "dims": dims.key,
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
    # A catalog tile's own entry, so that a stored pattern runs the production kernel build
    # (the catalog's implementation choices, such as asynchronous copies, included).
    catalog = TILES.get(tile.name)
    if catalog == tile:  # equal dimensions (equality leaves implementation choices out)
        tile = catalog
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
                dims = as_dims(str(e["dims"]))
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
            if not (same_bits(pat.a, a) and same_bits(pat.b, b)):
                problems.append(f"{path}: inputs differ from the generator's")
                continue
        ref = run_variant(pat.a, pat.b, e.variant, backend="numpy")
        if not pat.check(np.asarray(ref.c), np.asarray(ref.es)):
            problems.append(f"{path}: expected C/ES differ from the NumPy reference")
    for extra in sorted(p.name for p in d.glob("*.npz") if p.name not in listed):
        problems.append(f"{d / extra}: not listed in the manifest")
    return problems
