"""Pick a diagnostic for a SIL and an HFT from measured evidence (the seed's Table 4, generated).

The requirement table (the one place it lives)
-----------------------------------------------
IEC 61508-2:2010, Table 3 ("maximum allowable SIL for a safety function carried out by a
type B safety-related element or subsystem") gives, for each safe failure fraction (SFF)
band and hardware fault tolerance (HFT), the highest SIL that may be claimed. A GPU is a
type B element (its failure modes are not completely defined). Following the seed paper we
read the SFF bands as the diagnostic-coverage bands of IEC 61508-2 (low ≥ 60 %, medium
≥ 90 %, high ≥ 99 %) and invert the table: the *minimum* DC needed for a SIL at an HFT.

=====  ===================  ===================  ===================
SIL    HFT 0                HFT 1                HFT 2
=====  ===================  ===================  ===================
4      not allowed          high (≥ 99 %)        medium (≥ 90 %)
3      high (≥ 99 %)        medium (≥ 90 %)      low (≥ 60 %)
2      medium (≥ 90 %)      low (≥ 60 %)         none (< 60 % allowed)
1      low (≥ 60 %)         none (< 60 % allowed) not specified
=====  ===================  ===================  ===================

"none" means the standard accepts an SFF below 60 %; the seed notes that careful designs
still aim close to 60 %, so the rule picks the cheapest variant with any DC above zero and
says so. "not specified": the standard sets no SFF constraint there.

The selection rule
------------------
Among the variants with input-flip DC evidence at the requested dims (and arithmetic mode),
the candidates are those with a check: an ES checksum, intra-warp RMT or ABFT (docs/RMT.md;
"ones/M/abft", "unprotected/rmt-warp" and the like compete with the ES-only variants). A
variant is *selectable* only with all three in-kernel campaigns (transient, thread- and
block-permanent) at those dims and an overhead measurement (`safemon.evidence.coverage`). Its
selection DC is the minimum of the four one-sided 95 % Clopper–Pearson lower bounds. Keep the
selectable variants whose selection DC meets the minimum and whose overhead (protected /
unprotected median, same shape and K-slices, same run) is within the budget; pick the lowest cost, ties
broken by higher selection DC, then by name. The cost is the protected time over cuBLAS's in
the same run (`BenchRow.vs_cublas`), not the overhead: the overhead of an `exact` variant is
a ratio to the unprotected `exact` kernel, which runs two instructions per MAC where `fma`
runs one, so overheads of the two modes are ratios to different baselines and ranking them
together would prefer the slower mode. Within one mode and tiling of one run the two orders
are the same. If nothing qualifies, the answer is "not
achievable" with the reason (no evidence, which campaign is missing, the best bound is too
low and which campaign limits it, or the cheapest qualifying variant is over budget).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from safemon.evidence.coverage import VariantCoverage, variant_coverage
from safemon.evidence.inkernel_schema import InKernelRecord
from safemon.evidence.store import BenchRow, DcRecord

__all__ = [
    "BANDS",
    "REQUIREMENTS",
    "Requirement",
    "Selection",
    "has_check",
    "requirement",
    "select_variant",
    "selection_table",
    "selection_table_markdown",
]

#: IEC 61508-2 DC bands, minimum percent.
BANDS: dict[str, float] = {"low": 60.0, "medium": 90.0, "high": 99.0}


@dataclass(frozen=True)
class Requirement:
    """What a (SIL, HFT) pair asks of the diagnostic.

    Attributes:
        band: "high" | "medium" | "low" | "none" | "not specified" | "not allowed".
        min_dc: minimum DC in percent (0.0 for "none" and "not specified"); None when the
            combination is not allowed at all.
    """

    sil: int
    hft: int
    band: str
    min_dc: float | None

    @property
    def allowed(self) -> bool:
        return self.min_dc is not None


def _req(sil: int, hft: int, band: str) -> Requirement:
    if band == "not allowed":
        return Requirement(sil, hft, band, None)
    return Requirement(sil, hft, band, BANDS.get(band, 0.0))


#: (SIL, HFT) → requirement: IEC 61508-2 Table 3, type B, inverted (module docstring).
REQUIREMENTS: dict[tuple[int, int], Requirement] = {
    (sil, hft): _req(sil, hft, band)
    for (sil, hft), band in {
        (4, 0): "not allowed", (4, 1): "high", (4, 2): "medium",
        (3, 0): "high", (3, 1): "medium", (3, 2): "low",
        (2, 0): "medium", (2, 1): "low", (2, 2): "none",
        (1, 0): "low", (1, 1): "none", (1, 2): "not specified",
    }.items()
}


def requirement(sil: int, hft: int) -> Requirement:
    """The requirement of (SIL, HFT).

    Raises:
        ValueError: SIL outside 1..4 or HFT outside 0..2.
    """
    if sil not in (1, 2, 3, 4):
        raise ValueError(f"SIL must be 1, 2, 3 or 4, not {sil}")
    if hft not in (0, 1, 2):
        raise ValueError(f"HFT must be 0, 1 or 2, not {hft}")
    return REQUIREMENTS[(sil, hft)]


@dataclass(frozen=True)
class Selection:
    """The answer for one (SIL, HFT): a variant with its evidence, or why there is none.

    `dc_percent` is the selection DC (min of the four lower bounds) of the chosen variant;
    `coverage` holds its four figures. `overhead` is its time over the unprotected kernel of
    its own mode and tiling; `vs_cublas` its time over cuBLAS's in the same run, the cost the
    rule ranks by. `blind` lists the variants set aside for missing in-kernel evidence, with
    the campaigns that would supply it.
    """

    requirement: Requirement
    dims: str
    variant: str | None
    dc_percent: float | None
    overhead: float | None
    reason: str
    coverage: VariantCoverage | None = None
    blind: tuple[VariantCoverage, ...] = ()
    vs_cublas: float | None = None

    @property
    def achievable(self) -> bool:
        return self.variant is not None


def has_check(rec: DcRecord) -> bool:
    """True when the record's variant detects anything: an ES checksum, RMT or ABFT (the
    unprotected kernel is the baseline, never a candidate)."""
    if rec.checksum is not None:
        return True
    from safemon.kernels.catalog import split_check_suffix

    _, rmt, abft = split_check_suffix(rec.name)
    return rmt != "none" or abft != "none"


def _candidates(
    dims: str,
    dc: Mapping[tuple[str, str], DcRecord],
    bench: Mapping[tuple[str, str], BenchRow],
    inkernel: Mapping[tuple[str, str, str], InKernelRecord],
    mode: str | None,
) -> tuple[list[tuple[float, float, str, VariantCoverage, float]], list[VariantCoverage], list[str]]:
    """(selectable as (cost, −DC, name, coverage, overhead), blind variants, variants without
    overhead); cost = protected time / cuBLAS time of the same run (module docstring)."""
    ok: list[tuple[float, float, str, VariantCoverage, float]] = []
    blind: list[VariantCoverage] = []
    no_bench: list[str] = []
    for (name, d), rec in sorted(dc.items()):
        if d != dims or not has_check(rec) or (mode is not None and rec.mode != mode):
            continue
        cov = variant_coverage(name, dims, dc, inkernel)
        row = bench.get((name, d))
        if not cov.selectable or cov.selection_dc is None:
            blind.append(cov)
        elif row is None:
            no_bench.append(name)
        else:
            ok.append((row.vs_cublas, -cov.selection_dc, name, cov, row.overhead))
    return sorted(ok, key=lambda c: (c[0], c[1], c[2])), blind, no_bench


def select_variant(
    sil: int,
    hft: int,
    dims: str,
    dc: Mapping[tuple[str, str], DcRecord],
    bench: Mapping[tuple[str, str], BenchRow],
    inkernel: Mapping[tuple[str, str, str], InKernelRecord] | None = None,
    *,
    mode: str | None = None,
    budget: float | None = None,
) -> Selection:
    """Apply the selection rule (module docstring) to one device's evidence.

    Args:
        dims: "MxNxK" key.
        dc, bench: {(variant name, dims): record} as `EvidenceStore.dc_records/bench_rows` give.
        inkernel: {(variant name, dims, scope): record} (`EvidenceStore.inkernel_records`);
            None or empty: no variant is selectable.
        mode: only variants of this arithmetic mode ("exact"/"fma"); None: any.
        budget: maximum overhead ratio (protected / unprotected); None: unlimited.

    Raises:
        ValueError: bad SIL/HFT, or a non-positive budget.
    """
    req = requirement(sil, hft)
    if budget is not None and budget <= 0:
        raise ValueError(f"budget must be a positive ratio, not {budget}")
    if not req.allowed:
        return Selection(req, dims, None, None, None,
                         f"not achievable: IEC 61508-2 allows no SIL {sil} with HFT {hft} "
                         "for a type B element, whatever the DC; add a channel (HFT ≥ 1)")
    ok, blind, no_bench = _candidates(dims, dc, bench, inkernel or {}, mode)
    blind_t = tuple(blind)
    if not ok:
        return Selection(req, dims, None, None, None, _why_none(dims, mode, blind, no_bench),
                         blind=blind_t)
    min_dc = req.min_dc if req.min_dc is not None else 0.0
    meets = [c for c in ok if -c[1] >= min_dc and -c[1] > 0]
    if not meets:
        best = min(ok, key=lambda c: c[1])[3]
        lim = best.limiting
        assert lim is not None  # selectable coverage always has a limiting figure
        return Selection(req, dims, None, None, None,
                         f"not achievable: needs DC ≥ {min_dc:g} % ({req.band}) as a 95 % lower "
                         f"bound; the best at {dims} is {best.name} with {best.selection_dc:.2f} %, "
                         f"limited by its {lim.source} campaign ({lim.detected} of {lim.dangerous} "
                         f"dangerous faults detected, {lim.percent:.2f} %)",
                         coverage=best, blind=blind_t)
    within = [c for c in meets if budget is None or c[4] <= budget]
    if not within:
        cheapest = min(meets, key=lambda c: c[4])  # the least overhead, for the budget's sake
        return Selection(req, dims, None, None, None,
                         f"not achievable within budget {budget:g}×: the cheapest variant with "
                         f"DC ≥ {min_dc:g} % is {cheapest[2]} at {cheapest[4]:.2f}×", blind=blind_t)
    cost, neg_dc, name, cov, overhead = within[0]
    note = {
        "none": "IEC 61508-2 accepts DC < 60 % here; the cheapest variant with any DC is shown",
        "not specified": "IEC 61508-2 sets no requirement here; the cheapest variant is shown",
    }.get(req.band, f"meets the {req.band} band (every DC lower bound ≥ {min_dc:g} %)")
    return Selection(req, dims, name, -neg_dc, overhead, note, coverage=cov, blind=blind_t,
                     vs_cublas=cost)


def _why_none(dims: str, mode: str | None, blind: list[VariantCoverage], no_bench: list[str]) -> str:
    suffix = f" (mode {mode})" if mode else ""
    if blind:
        first = blind[0]
        return (f"not achievable from the evidence{suffix}: no variant at {dims} has all four "
                f"DC campaigns ({len(blind)} lack some; {first.name} lacks "
                f"{', '.join(first.missing)}); run e.g. `{first.missing_campaigns()[0]}`")
    if no_bench:
        return (f"not achievable from the evidence{suffix}: DC evidence for "
                f"{', '.join(sorted(no_bench))} but no overhead measured at {dims}; run `safemon bench`")
    return f"not achievable from the evidence{suffix}: no DC evidence at {dims}; run `safemon dc`"


def selection_table(
    dims: str,
    dc: Mapping[tuple[str, str], DcRecord],
    bench: Mapping[tuple[str, str], BenchRow],
    inkernel: Mapping[tuple[str, str, str], InKernelRecord] | None = None,
    *,
    mode: str | None = None,
    budget: float | None = None,
) -> list[Selection]:
    """Every (SIL 4..1, HFT 0..2) selection: the seed's Table 4 from the rule."""
    return [
        select_variant(sil, hft, dims, dc, bench, inkernel, mode=mode, budget=budget)
        for sil in (4, 3, 2, 1)
        for hft in (0, 1, 2)
    ]


def _band_of(dc: float) -> str:
    if dc >= BANDS["high"]:
        return "iv"
    if dc >= BANDS["medium"]:
        return "iii"
    if dc >= BANDS["low"]:
        return "ii"
    return "i"


def selection_table_markdown(selections: list[Selection]) -> str:
    """Render `selection_table` as Markdown: cells "variant (overhead×, selection DC %) (band)";
    the selection DC is the minimum of the four 95 % lower bounds.

    Band marks follow the seed: (i) DC < 60 %, (ii) 60–90 %, (iii) 90–99 %, (iv) ≥ 99 %.
    """
    by = {(s.requirement.sil, s.requirement.hft): s for s in selections}
    dims = selections[0].dims if selections else "?"
    lines = [f"Selected variants at {dims} (overhead vs unprotected; DC = min of the input-flip and "
             "three in-kernel 95 % lower bounds):", "",
             "| SIL | HFT 0 | HFT 1 | HFT 2 |", "|---|---|---|---|"]
    for sil in (4, 3, 2, 1):
        cells = []
        for hft in (0, 1, 2):
            s = by.get((sil, hft))
            if s is None:
                cells.append("—")
            elif s.achievable and s.dc_percent is not None and s.overhead is not None:
                cells.append(f"{s.variant} ({s.overhead:.2f}×, {s.dc_percent:.1f} %) ({_band_of(s.dc_percent)})")
            elif s.requirement.band == "not allowed":
                cells.append("not achievable (not allowed)")
            else:
                cells.append("not achievable")
        lines.append(f"| {sil} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
