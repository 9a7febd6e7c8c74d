"""Evidence files: the JSON schema, validation, reading/writing, and the per-device store.

Two kinds of file (docs/SAFETY.md, "Evidence files", shows both with every field):

* ``safemon.dc/2`` — results of exhaustive input campaigns (`safemon dc`): one record per
  (variant, dims) with the injection count, the ES-detected, C-visible, latent and escape
  counts, and the percentages derived from them.
* ``safemon.bench/2`` — the overhead benchmark (`safemon bench`): one row per
  (variant, dims) with medians of the protected, unprotected (same shape and K-slices) and cuBLAS runs
  and their ratios, plus the device, clocks and versions.

Validation is strict: unknown fields are refused, and the derived numbers (percentages,
ratios) must agree with the counts and medians they come from, so a hand-edited file that
no longer adds up is rejected with a clear error instead of being used for a selection.

A third, ``safemon.inkernel/2`` (in-kernel campaigns), is defined in
`safemon.evidence.inkernel_schema` and read through the same `load_evidence`.

Store layout: ``<root>/<device-slug>/dc_<MxNxK>_<mode>_<backend>.json``,
``<root>/<device-slug>/inkernel_<MxNxK>_<mode>_<scope>.json`` and
``<root>/<device-slug>/bench_<UTC timestamp>.json``. Loading merges every file of a device;
for a (variant, dims) present twice the newer file wins.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import re
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from safemon.dims import Dims, parse_dims
from safemon.errors import SafemonError

__all__ = [
    "BENCH_SCHEMA",
    "DC_SCHEMA",
    "ApiRow",
    "BenchEvidence",
    "BenchRow",
    "DcEvidence",
    "DcRecord",
    "EvidenceError",
    "EvidenceStore",
    "dc_evidence",
    "dc_record",
    "dc_table_markdown",
    "device_slug",
    "evidence_dict",
    "load_evidence",
    "now_utc",
    "write_evidence",
]

DC_SCHEMA = "safemon.dc/2"
BENCH_SCHEMA = "safemon.bench/2"
#: Schema 1 files named today's levels F and T "M" and "E"; they are refused, never relabelled.
_SCHEMA_1 = ("safemon.dc/1", "safemon.bench/1")

#: Tolerance for derived floating-point fields (they are rounded by JSON writers at most).
_REL = 1e-6


class EvidenceError(SafemonError, ValueError):
    """An evidence file is missing, unreadable, or does not satisfy the schema."""


def now_utc() -> str:
    """The current time as ISO 8601 UTC with seconds, e.g. "2026-05-01T12:00:00Z"."""
    return _dt.datetime.now(_dt.UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=_REL, abs_tol=1e-9)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _check_dims(text: str) -> Dims:
    try:
        return parse_dims(text)
    except ValueError as exc:
        raise ValueError(f"dims {text!r}: {exc}") from exc


class DcRecord(_Strict):
    """One exhaustive input campaign: `variant` at `dims`.

    Counts are numbers of single-bit faults; percentages are 100·count/injections.
    """

    variant: str = Field(description='seed-style label, e.g. "ones/I" or "xor_fletcher"')
    name: str = Field(description='full variant name, e.g. "ones/I/exact/small"')
    checksum: str | None
    level: str | None
    mode: Literal["exact", "fma"]
    tile: str
    dims: str = Field(description="MxNxK")
    injections: int = Field(gt=0)
    detected_es: int = Field(ge=0)
    visible_c: int = Field(ge=0)
    latent: int = Field(ge=0, description="ES differs, C unchanged")
    escapes: int = Field(ge=0, description="C differs, ES unchanged")
    dc_percent: float = Field(ge=0, le=100)
    visible_percent: float = Field(ge=0, le=100)
    latent_percent: float = Field(ge=0, le=100)
    escapes_percent: float = Field(ge=0, le=100)
    seconds: float = Field(ge=0)

    @model_validator(mode="after")
    def _consistent(self) -> DcRecord:
        d = _check_dims(self.dims)
        if self.injections != d.input_bits:
            raise ValueError(
                f"{self.name} at {self.dims}: an exhaustive campaign has {d.input_bits} "
                f"injections, the record says {self.injections}"
            )
        for field in ("detected_es", "visible_c", "latent", "escapes"):
            if getattr(self, field) > self.injections:
                raise ValueError(f"{self.name} at {self.dims}: {field} exceeds injections")
        # both = detected − latent = visible − escapes
        if self.detected_es - self.latent != self.visible_c - self.escapes or self.latent > self.detected_es:
            raise ValueError(
                f"{self.name} at {self.dims}: latent/escapes do not add up "
                "(detected − latent must equal visible − escapes)"
            )
        for count, pct in (
            ("detected_es", "dc_percent"),
            ("visible_c", "visible_percent"),
            ("latent", "latent_percent"),
            ("escapes", "escapes_percent"),
        ):
            want = 100.0 * getattr(self, count) / self.injections
            if not _close(getattr(self, pct), want):
                raise ValueError(f"{self.name} at {self.dims}: {pct} is not 100·{count}/injections")
        return self


class DcEvidence(_Strict):
    """A `safemon.dc/2` file: campaigns run together on one device with one seed."""

    schema_: Literal["safemon.dc/2"] = Field(alias="schema")
    safemon_version: str
    date: str = Field(description="ISO 8601 UTC")
    device: str
    backend: Literal["numpy", "cupy"]
    seed: int
    results: list[DcRecord] = Field(min_length=1)

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class BenchRow(_Strict):
    """Medians (milliseconds) of one variant at one size, all measured in the same run."""

    variant: str
    name: str
    checksum: str | None
    level: str | None
    mode: Literal["exact", "fma"]
    tile: str
    dims: str
    repeats: int = Field(gt=0)
    protected_ms: float = Field(gt=0)
    unprotected_ms: float = Field(gt=0)
    cublas_ms: float = Field(gt=0)
    overhead: float = Field(gt=0, description="protected_ms / unprotected_ms")
    vs_cublas: float = Field(gt=0, description="protected_ms / cublas_ms")
    tflops_protected: float = Field(gt=0)
    tflops_unprotected: float = Field(gt=0)
    tflops_cublas: float = Field(gt=0)
    #: (lane map, MAC order) of the protected and of the unprotected build
    #: (`Variant.kernel_schedule`): they change neither C nor ES, so `name` does not carry them,
    #: but they change the time. None in files written before stop 48.
    schedule: tuple[int, int] | None = None
    unprotected_schedule: tuple[int, int] | None = None

    @model_validator(mode="after")
    def _consistent(self) -> BenchRow:
        d = _check_dims(self.dims)
        if not _close(self.overhead, self.protected_ms / self.unprotected_ms):
            raise ValueError(f"{self.name} at {self.dims}: overhead is not protected/unprotected")
        if not _close(self.vs_cublas, self.protected_ms / self.cublas_ms):
            raise ValueError(f"{self.name} at {self.dims}: vs_cublas is not protected/cublas")
        for ms, tf in (
            ("protected_ms", "tflops_protected"),
            ("unprotected_ms", "tflops_unprotected"),
            ("cublas_ms", "tflops_cublas"),
        ):
            if not _close(getattr(self, tf), d.flops / (getattr(self, ms) * 1e-3) / 1e12):
                raise ValueError(f"{self.name} at {self.dims}: {tf} does not match {ms}")
        return self


class EccMmmRow(_Strict):
    """ECC-verified B then the kernel, against the kernel alone (same run)."""

    name: str
    dims: str
    repeats: int = Field(gt=0)
    mmm_ms: float = Field(gt=0)
    verified_mmm_ms: float = Field(gt=0)
    ratio: float = Field(gt=0, description="verified_mmm_ms / mmm_ms")

    @model_validator(mode="after")
    def _consistent(self) -> EccMmmRow:
        _check_dims(self.dims)
        if not _close(self.ratio, self.verified_mmm_ms / self.mmm_ms):
            raise ValueError(f"{self.name} at {self.dims}: ratio is not verified/mmm")
        return self


class ApiRow(_Strict):
    """What a user pays for one call at one size: wall clock with device arrays in and out
    (the call, then a stream synchronisation), next to the CUDA-event time of the kernels
    the call launches, and against `cupy.matmul` at the same size in the same run."""

    call: str = Field(description="cupy.matmul, safemon.matmul or protected_matmul ... ")
    variant: str | None = Field(description="the variant's name; None for cupy.matmul")
    dims: str
    repeats: int = Field(gt=0)
    wall_p50_us: float = Field(gt=0)
    wall_p99_us: float = Field(gt=0)
    kernel_us: float = Field(gt=0, description="median CUDA-event time of the kernels alone")
    cupy_wall_p50_us: float = Field(gt=0)
    vs_cupy: float = Field(gt=0, description="wall_p50_us / cupy_wall_p50_us")

    @model_validator(mode="after")
    def _consistent(self) -> ApiRow:
        _check_dims(self.dims)
        if not _close(self.vs_cupy, self.wall_p50_us / self.cupy_wall_p50_us):
            raise ValueError(f"{self.call} at {self.dims}: vs_cupy is not wall / cupy wall")
        if self.wall_p99_us < self.wall_p50_us:
            raise ValueError(f"{self.call} at {self.dims}: p99 below p50")
        return self


class BenchEvidence(_Strict):
    """A `safemon.bench/2` file."""

    schema_: Literal["safemon.bench/2"] = Field(alias="schema")
    safemon_version: str
    date: str
    device: str
    clocks: dict[str, str] = Field(description="read-only nvidia-smi / device attribute values")
    cuda_runtime: int
    cuda_driver: int
    cupy: str
    rows: list[BenchRow]
    ecc: dict[str, Any] | None = Field(default=None, description="run_ecc_bench's result")
    ecc_mmm: list[EccMmmRow] = Field(default_factory=list)
    api: list[ApiRow] = Field(default_factory=list)

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


if TYPE_CHECKING:
    from safemon.evidence.inkernel_schema import InKernelEvidence

Evidence = Union[DcEvidence, BenchEvidence, "InKernelEvidence"]


def _validate(data: Any, origin: str) -> Evidence:
    from safemon.evidence.inkernel_schema import INKERNEL_SCHEMA, InKernelEvidence

    if not isinstance(data, dict):
        raise EvidenceError(f"{origin}: an evidence file holds a JSON object, not {type(data).__name__}")
    schema = data.get("schema")
    model: type[DcEvidence] | type[BenchEvidence] | type[InKernelEvidence]
    if schema == DC_SCHEMA:
        model = DcEvidence
    elif schema == BENCH_SCHEMA:
        model = BenchEvidence
    elif schema == INKERNEL_SCHEMA:
        model = InKernelEvidence
    elif schema == "safemon.inkernel/1":
        raise EvidenceError(
            f"{origin}: schema 'safemon.inkernel/1' counted ES-word flips as detected and used "
            f"the old level names; it is not read as {INKERNEL_SCHEMA!r}: run the campaign again"
        )
    elif schema in _SCHEMA_1:
        raise EvidenceError(
            f"{origin}: schema {schema!r} predates the paper's levels: its M and E were the "
            "levels now called F and T (docs/SIGNATURES.md), so it is not read as "
            f"{DC_SCHEMA!r}/{BENCH_SCHEMA!r}; run the campaign or benchmark again"
        )
    else:
        raise EvidenceError(
            f"{origin}: unknown schema {schema!r}; expected {DC_SCHEMA!r} or {BENCH_SCHEMA!r}"
        )
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise EvidenceError(f"{origin}: not a valid {schema} file:\n{exc}") from exc


def load_evidence(path: Path | str) -> Evidence:
    """Read and validate one evidence file.

    Raises:
        EvidenceError: missing file, invalid JSON, unknown schema, or a schema violation.
    """
    p = Path(path)
    try:
        data = json.loads(p.read_text())
    except FileNotFoundError as exc:
        raise EvidenceError(f"{p}: no such evidence file") from exc
    except (OSError, json.JSONDecodeError) as exc:
        raise EvidenceError(f"{p}: cannot read JSON: {exc}") from exc
    return _validate(data, str(p))


def evidence_dict(ev: Evidence) -> dict[str, Any]:
    """The JSON-ready dict of a model (field `schema` under its real name)."""
    return ev.model_dump(mode="json", by_alias=True)


def write_evidence(ev: Evidence, path: Path | str) -> Path:
    """Validate again and write `ev` as indented JSON; parent directories are created."""
    data = evidence_dict(ev)
    _validate(data, "evidence being written")
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(p.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=False) + "\n")
    tmp.replace(p)
    return p


def device_slug(device: str) -> str:
    """A directory name for a device: lower case, runs of other characters become "-"."""
    slug = re.sub(r"[^a-z0-9]+", "-", device.lower()).strip("-")
    if not slug:
        raise EvidenceError(f"device name {device!r} has no usable characters")
    return slug


class EvidenceStore:
    """Evidence of many devices under one user-chosen root directory (layout: module docstring)."""

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)

    def device_dir(self, device: str) -> Path:
        return self.root / device_slug(device)

    def devices(self) -> list[str]:
        """Slugs of the device directories that hold at least one evidence file."""
        if not self.root.is_dir():
            return []
        return sorted(
            d.name for d in self.root.iterdir() if d.is_dir() and any(d.glob("*.json"))
        )

    def save_dc(self, ev: DcEvidence) -> list[Path]:
        """Write one file per (dims, mode) of `ev` (a later campaign of the same key replaces it)."""
        groups: dict[tuple[str, str], list[DcRecord]] = {}
        for r in ev.results:
            groups.setdefault((r.dims, r.mode), []).append(r)
        out = []
        for (dims, mode), recs in sorted(groups.items()):
            part = ev.model_copy(update={"results": recs})
            name = f"dc_{dims}_{mode}_{ev.backend}.json"
            out.append(write_evidence(part, self.device_dir(ev.device) / name))
        return out

    def save_bench(self, ev: BenchEvidence) -> Path:
        stamp = re.sub(r"[^0-9TZ]", "", ev.date)
        return write_evidence(ev, self.device_dir(ev.device) / f"bench_{stamp}.json")

    def _files(self, slug: str) -> list[Evidence]:
        d = self.root / slug
        if not d.is_dir():
            known = ", ".join(self.devices()) or "none"
            raise EvidenceError(f"no evidence for device {slug!r} under {self.root} (devices: {known})")
        loaded = [load_evidence(p) for p in sorted(d.glob("*.json"))]
        return sorted(loaded, key=lambda e: e.date)

    def dc_records(self, device: str) -> dict[tuple[str, str], DcRecord]:
        """{(variant name, dims): record} for a device; newer files win."""
        out: dict[tuple[str, str], DcRecord] = {}
        for ev in self._files(device_slug(device)):
            if isinstance(ev, DcEvidence):
                for r in ev.results:
                    out[(r.name, r.dims)] = r
        return out

    def save_inkernel(self, ev: InKernelEvidence) -> list[Path]:
        """Write one file per (dims, mode, scope) of `ev`; a later campaign of the key replaces it."""
        groups: dict[tuple[str, str, str], list[Any]] = {}
        for r in ev.results:
            groups.setdefault((r.dims, r.mode, r.scope), []).append(r)
        out = []
        for (dims, mode, scope), recs in sorted(groups.items()):
            part = ev.model_copy(update={"results": recs})
            name = f"inkernel_{dims}_{mode}_{scope}.json"
            out.append(write_evidence(part, self.device_dir(ev.device) / name))
        return out

    def inkernel_records(self, device: str) -> dict[tuple[str, str, str], Any]:
        """{(variant name, dims, scope): InKernelRecord} for a device; newer files win."""
        from safemon.evidence.inkernel_schema import InKernelEvidence

        out: dict[tuple[str, str, str], Any] = {}
        for ev in self._files(device_slug(device)):
            if isinstance(ev, InKernelEvidence):
                for r in ev.results:
                    out[(r.name, r.dims, r.scope)] = r
        return out

    def bench_rows(self, device: str) -> dict[tuple[str, str], BenchRow]:
        """{(variant name, dims): row} for a device; newer files win."""
        out: dict[tuple[str, str], BenchRow] = {}
        for ev in self._files(device_slug(device)):
            if isinstance(ev, BenchEvidence):
                for r in ev.rows:
                    out[(r.name, r.dims)] = r
        return out


def dc_table_markdown(records: Iterable[DcRecord], *, field: str = "dc_percent") -> str:
    """A Table-3-style Markdown table: one row per variant, one column per size (percent).

    `field` picks the number shown ("dc_percent", "visible_percent", "latent_percent",
    "escapes_percent").
    """
    recs = list(records)
    if not recs:
        return "(no DC records)"
    dims_order = sorted({r.dims for r in recs}, key=lambda s: (parse_dims(s).input_bits, s))
    variants: list[str] = []
    for r in recs:
        if r.name not in variants:
            variants.append(r.name)
    cell = {(r.name, r.dims): getattr(r, field) for r in recs}
    head = "| variant | " + " | ".join(parse_dims(d).label for d in dims_order) + " |"
    lines = [head, "|---|" + "---:|" * len(dims_order)]
    for v in variants:
        vals = [f"{cell[(v, d)]:.1f}" if (v, d) in cell else "—" for d in dims_order]
        lines.append(f"| {v} | " + " | ".join(vals) + " |")
    return "\n".join(lines)


def dc_record(result: Any) -> DcRecord:
    """The evidence record of a `campaign.CampaignResult`."""
    from safemon.evidence.campaign import CampaignResult, variant_label

    if not isinstance(result, CampaignResult):
        raise TypeError(f"expected a CampaignResult, not {type(result).__name__}")
    v = result.variant
    return DcRecord(
        variant=variant_label(v),
        name=v.name,
        checksum=v.checksum,
        level=v.level,
        mode=v.mode,  # type: ignore[arg-type]
        tile=v.tile.name,
        dims=result.dims.key,
        injections=result.injections,
        detected_es=result.detected_es,
        visible_c=result.visible_c,
        latent=result.latent,
        escapes=result.escapes,
        dc_percent=result.dc_percent,
        visible_percent=result.percent(result.visible_c),
        latent_percent=result.percent(result.latent),
        escapes_percent=result.percent(result.escapes),
        seconds=result.seconds,
    )


def dc_evidence(results: Iterable[Any], *, device: str, backend: str, seed: int) -> DcEvidence:
    """A validated `safemon.dc/2` document for campaign results run together."""
    from safemon import __version__

    return DcEvidence.model_validate(
        {
            "schema": DC_SCHEMA,
            "safemon_version": __version__,
            "date": now_utc(),
            "device": device,
            "backend": backend,
            "seed": seed,
            "results": [dc_record(r).model_dump() for r in results],
        }
    )
