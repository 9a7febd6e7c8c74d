"""A variant's diagnostic coverage for selection: four campaign figures, each as a lower bound.

The DC that `safemon select` compares with the IEC 61508-2 bands is the minimum of

1. the input-flip DC (the seed's Table 3 method: every single-bit flip of A and B, detected
   when the ES differs; every injected fault counts as dangerous, as in the seed);
2. the in-kernel DC for transient faults (one register flip at one k step);
3. the in-kernel DC for thread-permanent faults (the same flip at every k step of one thread);
4. the in-kernel DC for block-permanent faults (every thread of one block),

where the in-kernel DC counts only faults that changed C as dangerous
(`safemon.evidence.inkernel_schema`), and each figure is taken as its one-sided 95 %
Clopper–Pearson lower bound. A variant lacking any of the four at the deployment's dims (the
variant name carries mode and tile) has no selection DC: it is not selectable, and
`missing_campaigns` names the command that would supply the evidence.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from safemon.evidence.bounds import DEFAULT_CONFIDENCE, lower_bound_percent
from safemon.evidence.inkernel_schema import SCOPES, InKernelRecord
from safemon.evidence.store import DcRecord

__all__ = ["INPUT_FLIP", "DcFigure", "VariantCoverage", "variant_coverage"]

#: The source name of the input-flip figure; in-kernel figures are named "in-kernel <scope>".
INPUT_FLIP = "input-flip"
#: Sites per variant and scope that `safemon select` suggests for a missing campaign: with no
#: escape among ≥ 300 dangerous faults the 95 % lower bound passes 99 %.
SUGGESTED_SITES = 3000


@dataclass(frozen=True)
class DcFigure:
    """One campaign's DC: `detected` of `dangerous` faults, the point value and its bound (%)."""

    source: str
    detected: int
    dangerous: int
    sites: int
    percent: float
    lower_percent: float
    confidence: float = DEFAULT_CONFIDENCE

    def as_dict(self) -> dict[str, object]:
        return {"source": self.source, "detected": self.detected, "dangerous": self.dangerous,
                "sites": self.sites, "dc_percent": self.percent,
                "dc_lower_percent": self.lower_percent, "confidence": self.confidence}


@dataclass(frozen=True)
class VariantCoverage:
    """The four figures of one variant at one size, and what is missing."""

    name: str
    dims: str
    figures: tuple[DcFigure, ...]
    missing: tuple[str, ...]

    @property
    def selectable(self) -> bool:
        return not self.missing

    @property
    def limiting(self) -> DcFigure | None:
        """The figure with the lowest bound (None while evidence is missing)."""
        if self.missing or not self.figures:
            return None
        return min(self.figures, key=lambda f: f.lower_percent)

    @property
    def selection_dc(self) -> float | None:
        """min of the four lower bounds, percent; None when not selectable."""
        lim = self.limiting
        return None if lim is None else lim.lower_percent

    def missing_campaigns(self, store: str = "DIR") -> list[str]:
        """The commands that would supply the missing evidence."""
        from safemon.evidence.campaign import variant_label
        from safemon.kernels.catalog import variant_from_name

        out = []
        v = variant_from_name(self.name)
        # `safemon dc --variants` takes the label: "ones/I", "ones_fletcher", "ones/M/abft".
        variant, mode, tile = variant_label(v), v.mode, v.tile.name
        for m in self.missing:
            if m == INPUT_FLIP:
                backend = " --backend cupy" if v.abft else ""
                out.append(f"safemon dc --variants {variant} --dims {self.dims} --mode {mode} "
                           f"--tile {tile}{backend} --evidence {store}")
            else:
                scope = m.removeprefix("in-kernel ")
                out.append(f"safemon dc --inkernel {SUGGESTED_SITES} --scope {scope} "
                           f"--variants {variant} --dims {self.dims} --mode {mode} --tile {tile} "
                           f"--backend cupy --evidence {store}")
        return out

    def as_dict(self) -> dict[str, object]:
        lim = self.limiting
        return {"variant": self.name, "dims": self.dims, "selectable": self.selectable,
                "selection_dc_percent": self.selection_dc,
                "limited_by": None if lim is None else lim.source,
                "figures": [f.as_dict() for f in self.figures], "missing": list(self.missing)}


def variant_coverage(
    name: str,
    dims: str,
    dc: Mapping[tuple[str, str], DcRecord],
    inkernel: Mapping[tuple[str, str, str], InKernelRecord],
) -> VariantCoverage:
    """Gather the four figures of variant `name` at `dims` from a device's evidence."""
    figures: list[DcFigure] = []
    missing: list[str] = []
    rec = dc.get((name, dims))
    if rec is None:
        missing.append(INPUT_FLIP)
    else:
        figures.append(DcFigure(INPUT_FLIP, rec.detected_es, rec.injections, rec.injections,
                                rec.dc_percent, lower_bound_percent(rec.detected_es, rec.injections)))
    for scope in SCOPES:
        source = f"in-kernel {scope}"
        ik = inkernel.get((name, dims, scope))
        if ik is None or ik.dangerous == 0 or ik.dc_percent is None or ik.dc_lower_percent is None:
            missing.append(source)
            continue
        figures.append(DcFigure(source, ik.detected_dangerous, ik.dangerous, ik.sites,
                                ik.dc_percent, ik.dc_lower_percent, ik.confidence))
    return VariantCoverage(name, dims, tuple(figures), tuple(missing))
