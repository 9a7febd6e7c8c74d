"""In-kernel campaign evidence (`safemon.inkernel/2`): schema, derived DC and its bound.

One record per (variant, dims, scope) of `safemon dc --inkernel N --scope S`. Per sampled
target it keeps the four verdict classes of `inkernel.EFFECTS`:

- ``neither`` — ES and C both equal golden (masked);
- ``es_only`` — ES differs, C does not (a false alarm or a latent detection);
- ``c_only`` — C differs, ES does not: silent data corruption, an *escape*;
- ``both`` — C differs and the ES shows it: a detected dangerous fault.

The dangerous faults are those that corrupt a released result: C differs (``c_only`` +
``both``) at an operand or accumulator site. The in-kernel DC is ``both / dangerous`` and the
figure used for selection is its one-sided 95 % Clopper–Pearson lower bound. A flip of an ES
word never changes C: it is a *safe* fault, reported apart (``safe_es_word``) and never counted
as detected (schema 1, written before 2026-11-22 evening, counted those as "detected": it is not
read). Masked operand/accumulator faults are reported apart as ``no_effect``.

Validation recomputes every derived field from the counts, so a hand-edited file that does
not add up is refused.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import ConfigDict, Field, model_validator

from safemon.evidence.bounds import DEFAULT_CONFIDENCE, lower_bound_percent
from safemon.evidence.store import _close, _Strict

__all__ = [
    "DANGEROUS_TARGETS",
    "INKERNEL_SCHEMA",
    "SCOPES",
    "InKernelEvidence",
    "InKernelRecord",
    "TargetCounts",
    "inkernel_evidence",
    "inkernel_record",
]

INKERNEL_SCHEMA = "safemon.inkernel/2"
SCOPES: tuple[str, ...] = ("transient", "thread", "block")
#: Targets whose faults can change C; the ES word is not one of them.
DANGEROUS_TARGETS: tuple[str, ...] = ("operand_a", "operand_b", "accumulator")
Target = Literal["operand_a", "operand_b", "accumulator", "es_word"]


class TargetCounts(_Strict):
    """Verdict classes of the sites drawn for one target."""

    neither: int = Field(ge=0)
    es_only: int = Field(ge=0)
    c_only: int = Field(ge=0)
    both: int = Field(ge=0)

    @property
    def total(self) -> int:
        return self.neither + self.es_only + self.c_only + self.both


class InKernelRecord(_Strict):
    """One sampled in-kernel campaign of `name` at `dims` with fault `scope`."""

    variant: str = Field(description='seed-style label, e.g. "ones/I"')
    name: str = Field(description='full variant name, e.g. "ones/I/exact/small"')
    checksum: str | None
    level: str | None
    mode: Literal["exact", "fma"]
    tile: str
    dims: str = Field(description="MxNxK")
    scope: Literal["transient", "thread", "block"]
    seed: int
    sites: int = Field(gt=0)
    counts: dict[Target, TargetCounts]
    dangerous: int = Field(ge=0, description="sites whose C differs (operand/accumulator)")
    detected_dangerous: int = Field(ge=0, description="dangerous sites whose ES differs too")
    escapes: int = Field(ge=0, description="dangerous sites the ES missed")
    no_effect: int = Field(ge=0, description="operand/accumulator sites changing neither C nor ES")
    latent: int = Field(ge=0, description="operand/accumulator sites changing the ES only")
    safe_es_word: int = Field(ge=0, description="ES-word flips: safe faults, never dangerous")
    dc_percent: float | None = Field(description="100·detected_dangerous/dangerous; None if none")
    dc_lower_percent: float | None = Field(description="one-sided Clopper–Pearson lower bound")
    confidence: float = Field(gt=0, lt=1)
    seconds: float = Field(ge=0)

    @model_validator(mode="after")
    def _consistent(self) -> InKernelRecord:
        where = f"{self.name} at {self.dims} ({self.scope})"
        if sum(c.total for c in self.counts.values()) != self.sites:
            raise ValueError(f"{where}: the target counts do not add up to {self.sites} sites")
        es = self.counts.get("es_word")
        if es is not None and (es.c_only or es.both):
            raise ValueError(f"{where}: an ES-word flip cannot change C")
        if es is not None and self.scope != "transient":
            raise ValueError(f"{where}: ES-word faults exist only in the transient scope")
        dang = [self.counts[t] for t in DANGEROUS_TARGETS if t in self.counts]
        want = {
            "dangerous": sum(c.c_only + c.both for c in dang),
            "detected_dangerous": sum(c.both for c in dang),
            "escapes": sum(c.c_only for c in dang),
            "no_effect": sum(c.neither for c in dang),
            "latent": sum(c.es_only for c in dang),
            "safe_es_word": es.total if es is not None else 0,
        }
        for field, value in want.items():
            if getattr(self, field) != value:
                raise ValueError(f"{where}: {field} is {getattr(self, field)}, the counts give {value}")
        n, k = want["dangerous"], want["detected_dangerous"]
        if n == 0:
            if self.dc_percent is not None or self.dc_lower_percent is not None:
                raise ValueError(f"{where}: no dangerous fault, so no DC")
            return self
        if self.dc_percent is None or not _close(self.dc_percent, 100.0 * k / n):
            raise ValueError(f"{where}: dc_percent is not 100·detected_dangerous/dangerous")
        bound = lower_bound_percent(k, n, self.confidence)
        if self.dc_lower_percent is None or abs(self.dc_lower_percent - bound) > 1e-6:
            raise ValueError(f"{where}: dc_lower_percent is not the Clopper–Pearson bound ({bound:.6f})")
        return self


class InKernelEvidence(_Strict):
    """A `safemon.inkernel/2` file: in-kernel campaigns run together on one device."""

    schema_: Literal["safemon.inkernel/2"] = Field(alias="schema")
    safemon_version: str
    date: str = Field(description="ISO 8601 UTC")
    device: str
    backend: Literal["cupy"]
    results: list[InKernelRecord] = Field(min_length=1)

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


def inkernel_record(result: object, *, confidence: float = DEFAULT_CONFIDENCE) -> InKernelRecord:
    """The evidence record of an `inkernel.InKernelResult` (derived fields computed here)."""
    from safemon.evidence.campaign import variant_label
    from safemon.evidence.inkernel import InKernelResult

    if not isinstance(result, InKernelResult):
        raise TypeError(f"expected an InKernelResult, not {type(result).__name__}")
    v = result.variant
    counts = result.effect_counts()
    dang = [counts[t] for t in DANGEROUS_TARGETS if t in counts]
    n = sum(c["c_only"] + c["both"] for c in dang)
    k = sum(c["both"] for c in dang)
    es = counts.get("es_word")
    return InKernelRecord(
        variant=variant_label(v), name=v.name, checksum=v.checksum, level=v.level,
        mode=v.mode,  # type: ignore[arg-type]
        tile=v.tile.name, dims=result.dims.key,
        scope=result.scope,  # type: ignore[arg-type]
        seed=result.seed, sites=int(result.rows.shape[0]),
        counts={t: TargetCounts(**c) for t, c in counts.items()},  # type: ignore[misc]
        dangerous=n, detected_dangerous=k, escapes=n - k,
        no_effect=sum(c["neither"] for c in dang), latent=sum(c["es_only"] for c in dang),
        safe_es_word=sum(es.values()) if es is not None else 0,
        dc_percent=100.0 * k / n if n else None,
        dc_lower_percent=lower_bound_percent(k, n, confidence) if n else None,
        confidence=confidence, seconds=result.seconds,
    )


def inkernel_evidence(results: Sequence[object], *, device: str) -> InKernelEvidence:
    """A validated `safemon.inkernel/2` document for in-kernel results run together."""
    from safemon import __version__
    from safemon.evidence.store import now_utc

    return InKernelEvidence.model_validate({
        "schema": INKERNEL_SCHEMA, "safemon_version": __version__, "date": now_utc(),
        "device": device, "backend": "cupy",
        "results": [inkernel_record(r).model_dump() for r in results],
    })
