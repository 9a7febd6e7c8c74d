"""The selection rule and the IEC 61508-2 requirement table, against hand-written evidence."""

from __future__ import annotations

import pytest

from safemon.evidence.inkernel_schema import SCOPES, InKernelRecord
from safemon.evidence.select import (
    REQUIREMENTS,
    requirement,
    selection_table_markdown,
)
from safemon.evidence.select import select_variant as _select_variant
from safemon.evidence.select import selection_table as _selection_table
from safemon.evidence.store import BenchRow, DcRecord
from tests.evidence.helpers import CATALOG, bench_row, dc_rec, ik_rec

D = "80x80x80"


def _evidence(catalog=CATALOG, inkernel=None):  # type: ignore[no-untyped-def]
    """DC and bench records; by default every variant also has all three in-kernel campaigns
    with 3000 of 3000 dangerous faults detected (so the input-flip figure decides)."""
    dc = {}
    bench = {}
    for v, d, o in catalog:
        r = DcRecord.model_validate(dc_rec(v, d))
        b = BenchRow.model_validate(bench_row(v, o))
        dc[(r.name, r.dims)] = r
        bench[(b.name, b.dims)] = b
    _INKERNEL.clear()
    for v, _, _ in catalog:
        for scope in SCOPES:
            n, k = (inkernel or {}).get((v, scope), (3000, 3000))
            if n is None:
                continue
            rec = InKernelRecord.model_validate(ik_rec(v, scope, n, k))
            _INKERNEL[(rec.name, rec.dims, rec.scope)] = rec
    return dc, bench


_INKERNEL: dict[tuple[str, str, str], InKernelRecord] = {}


def select_variant(*args, **kwargs):  # type: ignore[no-untyped-def]
    """The rule with the in-kernel evidence `_evidence` built last."""
    return _select_variant(*args[:5], _INKERNEL, **kwargs)


def selection_table(*args, **kwargs):  # type: ignore[no-untyped-def]
    return _selection_table(*args[:3], _INKERNEL, **kwargs)


def test_requirement_table_is_iec_61508_2_type_b() -> None:
    """Every (SIL, HFT) cell of IEC 61508-2 Table 3 (type B), inverted to a minimum DC."""
    expect = {
        (4, 0): None, (4, 1): 99.0, (4, 2): 90.0,
        (3, 0): 99.0, (3, 1): 90.0, (3, 2): 60.0,
        (2, 0): 90.0, (2, 1): 60.0, (2, 2): 0.0,
        (1, 0): 60.0, (1, 1): 0.0, (1, 2): 0.0,
    }
    assert {k: r.min_dc for k, r in REQUIREMENTS.items()} == expect
    assert requirement(1, 2).band == "not specified"
    with pytest.raises(ValueError):
        requirement(5, 0)
    with pytest.raises(ValueError):
        requirement(1, 3)


@pytest.mark.parametrize(
    ("sil", "hft", "want"),
    [
        (3, 0, "ones/I/fma/small"),    # high: ones/I (1.50×) beats crc32c/I (9×)
        (2, 0, "twos/I/fma/small"),    # medium: twos/I 95.7 % at 1.30×
        (1, 0, "ones/M/fma/small"),    # low: ones/M 62.5 % at 1.04× is cheaper than twos/M 1.05×
        (4, 1, "ones/I/fma/small"),
        (3, 1, "twos/I/fma/small"),
        (2, 1, "ones/M/fma/small"),
        (1, 1, "xor/E/fma/small"),     # DC < 60 % allowed: the cheapest with any DC
        (3, 2, "ones/M/fma/small"),
        (4, 2, "twos/I/fma/small"),
    ],
)
def test_cheapest_variant_meeting_the_band(sil: int, hft: int, want: str) -> None:
    dc, bench = _evidence()
    s = select_variant(sil, hft, D, dc, bench)
    assert s.achievable and s.variant == want


def test_sil4_hft0_is_never_achievable() -> None:
    dc, bench = _evidence()
    s = select_variant(4, 0, D, dc, bench)
    assert not s.achievable and "HFT" in s.reason


def test_dc_too_low_says_the_best_measured() -> None:
    dc, bench = _evidence([("xor/M", 50.0, 1.01), ("twos/I", 95.7, 1.3)])
    s = select_variant(3, 0, D, dc, bench)
    assert not s.achievable
    assert "twos/I/fma/small" in s.reason and "input-flip" in s.reason


def test_budget_excludes_expensive_variants() -> None:
    dc, bench = _evidence()
    assert select_variant(3, 0, D, dc, bench, budget=2.0).variant == "ones/I/fma/small"
    s = select_variant(3, 0, D, dc, bench, budget=1.2)
    assert not s.achievable and "budget" in s.reason and "ones/I/fma/small" in s.reason
    with pytest.raises(ValueError):
        select_variant(3, 0, D, dc, bench, budget=0)


def test_tie_on_overhead_prefers_higher_dc() -> None:
    dc, bench = _evidence([("twos/M", 61.7, 1.05), ("ones/M", 62.5, 1.05)])
    assert select_variant(1, 0, D, dc, bench).variant == "ones/M/fma/small"


def test_missing_evidence_is_explained() -> None:
    dc, bench = _evidence()
    s = select_variant(2, 0, "40x40x40", dc, bench)
    assert not s.achievable and "no DC evidence" in s.reason
    s = select_variant(2, 0, D, dc, {})
    assert not s.achievable and "no overhead" in s.reason


def test_modes_are_ranked_on_one_baseline() -> None:
    """An exact variant's overhead is a ratio to the slower unprotected exact kernel: ones/T
    exact at 1.05× of a 20 µs baseline (21 µs) costs more than ones/T fma at 1.09× of 10 µs
    (10.9 µs), so the rule must pick fma although its overhead ratio is the larger."""
    dc, bench = {}, {}
    for mode, unprot, overhead in (("exact", 0.020, 1.05), ("fma", 0.010, 1.09)):
        r = DcRecord.model_validate(dc_rec("ones/T", 100.0, mode=mode))
        row = bench_row("ones/T", overhead, mode=mode)
        row["unprotected_ms"] = unprot
        row["protected_ms"] = prot = unprot * overhead
        row["vs_cublas"] = prot / row["cublas_ms"]
        row["tflops_protected"] = row["tflops_protected"] * 0.010 * overhead / prot
        row["tflops_unprotected"] = row["tflops_unprotected"] * 0.010 / unprot
        b = BenchRow.model_validate(row)
        dc[(r.name, r.dims)] = r
        bench[(b.name, b.dims)] = b
    _INKERNEL.clear()
    for mode in ("exact", "fma"):
        for scope in SCOPES:
            rec = InKernelRecord.model_validate(ik_rec("ones/T", scope, 3000, 3000, mode=mode))
            _INKERNEL[(rec.name, rec.dims, rec.scope)] = rec
    s = select_variant(3, 0, D, dc, bench)
    assert s.variant == "ones/T/fma/small" and s.overhead == pytest.approx(1.09)
    assert s.vs_cublas == pytest.approx(0.010 * 1.09 / 0.008)  # the cost it was ranked by
    assert select_variant(3, 0, D, dc, bench, mode="exact").variant == "ones/T/exact/small"
    # The budget still bounds the overhead ratio, whichever variant is cheaper.
    assert select_variant(3, 0, D, dc, bench, budget=1.06).variant == "ones/T/exact/small"


def test_mode_filter() -> None:
    dc, bench = _evidence()
    assert not select_variant(2, 0, D, dc, bench, mode="exact").achievable
    assert select_variant(2, 0, D, dc, bench, mode="fma").achievable


def test_generated_table4_has_every_cell() -> None:
    dc, bench = _evidence()
    table = selection_table(D, dc, bench)
    assert len(table) == 12
    md = selection_table_markdown(table)
    assert "not achievable (not allowed)" in md
    assert "ones/I/fma/small (1.50×, 99.9 %) (iv)" in md  # 3000/3000 in-kernel bound


def test_a_variant_without_in_kernel_evidence_is_not_selectable() -> None:
    """ones/I lacks its block-permanent campaign: crc32c/I (9×) is chosen, and with only
    ones/I at hand the answer names the campaign to run."""
    dc, bench = _evidence(inkernel={("ones/I", "block"): (None, None)})
    s = select_variant(3, 0, D, dc, bench)
    assert s.variant == "crc32c/I/fma/small"
    assert [b.name for b in s.blind] == ["ones/I/fma/small"]
    dc, bench = _evidence([("ones/I", 100.0, 1.5)], inkernel={("ones/I", "block"): (None, None)})
    s = select_variant(3, 0, D, dc, bench)
    assert not s.achievable
    assert "in-kernel block" in s.reason and "--inkernel 3000 --scope block" in s.reason


def test_in_kernel_coverage_limits_a_variant_blind_to_arithmetic_faults() -> None:
    """Input-flip DC 100 % but 0 of 5,029 transient accumulator faults detected (the schema-1
    "M" finding): the variant is not picked for any band above 'none'."""
    dc, bench = _evidence([("ones/F", 100.0, 1.3), ("ones/I", 100.0, 3.4)],
                          inkernel={("ones/F", "transient"): (5029, 0)})
    s = select_variant(3, 0, D, dc, bench)
    assert s.variant == "ones/I/fma/small"
    s = select_variant(3, 0, D, dc, bench)
    assert s.coverage is not None and s.coverage.selection_dc is not None


def test_the_lower_bound_not_the_point_value_meets_the_band() -> None:
    """299/299 dangerous faults detected bounds DC above 99 %, 298/298 does not."""
    for n, ok in [(299, True), (298, False)]:
        dc, bench = _evidence([("ones/I", 100.0, 1.5)], inkernel={("ones/I", "thread"): (n, n)})
        s = select_variant(3, 0, D, dc, bench)
        assert s.achievable is ok, n
        if not ok:
            assert "in-kernel thread" in s.reason and "298 of 298" in s.reason


def test_es_word_flips_are_safe_faults_not_detections() -> None:
    """ES-word sites are counted apart and never enter the DC; one changing C is refused."""
    rec = InKernelRecord.model_validate(ik_rec("ones/I", "transient", 100, 90, es_word=40))
    assert rec.safe_es_word == 40 and rec.dc_percent == 90.0 and rec.sites == 140
    bad = ik_rec("ones/I", "transient", 100, 90, es_word=40)
    bad["counts"]["es_word"] = {"neither": 0, "es_only": 39, "c_only": 0, "both": 1}
    with pytest.raises(ValueError, match="ES-word flip cannot change C"):
        InKernelRecord.model_validate(bad)


def test_table3_vs_seed_marks_differences_over_five_points() -> None:
    from safemon.evidence.seed_table3 import table3_vs_seed

    recs = [DcRecord.model_validate(dc_rec("ones/E", 24.7, dims="20x20x20", mode="exact")),
            DcRecord.model_validate(dc_rec("ones/M", 61.9, dims="20x20x20", mode="exact"))]
    md = table3_vs_seed(recs)
    ones_e = next(line for line in md.splitlines() if line.startswith("| ones/E |"))
    ones_m = next(line for line in md.splitlines() if line.startswith("| ones/M |"))
    assert "24.7 | 10.0 | **+14.7**" in ones_e
    assert "61.9 | 62.5 | -0.6 |" in ones_m


def test_rmt_and_abft_variants_compete_with_the_es_catalog() -> None:
    """A checked variant (ES-M + RMT + ABFT) with every bound ≥ 99 % at 2.5× beats ones/I at
    3.4× for the high band; ones/M/abft at 1.4× wins the low band it meets."""
    dc, bench = _evidence([("ones/M", 62.5, 1.04), ("ones/I", 100.0, 3.4),
                           ("ones/M/abft", 82.5, 1.4), ("ones/M/rmt-warp/abft", 99.9, 2.5)],
                          inkernel={("ones/M", "transient"): (3000, 1500),
                                    ("ones/M/abft", "transient"): (3000, 2500)})
    s = select_variant(3, 0, D, dc, bench)
    assert s.variant == "ones/M/fma/small/rmt-warp/abft"
    s = select_variant(3, 2, D, dc, bench)
    assert s.variant == "ones/M/fma/small/abft"
    md = selection_table_markdown(selection_table(D, dc, bench))
    assert "ones/M/fma/small/rmt-warp/abft (2.50×" in md


def test_an_rmt_only_variant_blind_to_input_flips_is_never_selected() -> None:
    """unprotected/rmt-warp detects no input flip (outside its sphere of replication): its
    selection DC is 0, so even the 'none' band (any DC above zero) takes ES-M instead."""
    dc, bench = _evidence([("unprotected/rmt-warp", 0.0, 1.9), ("ones/M", 62.5, 2.0)])
    s = select_variant(2, 2, D, dc, bench)
    assert s.variant == "ones/M/fma/small"


def test_unprotected_with_abft_is_a_candidate_but_the_plain_kernel_is_not() -> None:
    """unprotected/abft carries a check and is selected where it is cheapest; the plain
    unprotected kernel (the overhead baseline) never is, whatever its record says."""
    dc, bench = _evidence([("unprotected/abft", 70.0, 1.2), ("ones/M", 62.5, 1.3)])
    assert select_variant(1, 0, D, dc, bench).variant == "unprotected/fma/small/abft"
    base = DcRecord.model_validate(dict(dc_rec("ones/M", 70.0), variant="unprotected",
                                        name="unprotected/fma/small", checksum=None, level=None))
    dc[(base.name, base.dims)] = base
    bench[(base.name, base.dims)] = BenchRow.model_validate(
        dict(bench_row("ones/M", 1.0), variant="unprotected", name="unprotected/fma/small",
             checksum=None, level=None))
    assert select_variant(1, 0, D, dc, bench).variant == "unprotected/fma/small/abft"


def test_missing_campaigns_of_a_checked_variant_name_its_label_and_the_gpu() -> None:
    """A blind ABFT variant's suggested commands use its label and the cupy backend (the
    NumPy input campaign refuses ABFT)."""
    dc, bench = _evidence([("ones/M/rmt-warp/abft", 99.9, 2.5)],
                          inkernel={("ones/M/rmt-warp/abft", "block"): (None, None)})
    s = select_variant(3, 0, D, dc, bench)
    assert not s.achievable
    cmd = s.blind[0].missing_campaigns()[0]
    assert "--variants ones/M/rmt-warp/abft " in cmd and "--scope block" in cmd
    assert "--mode fma --tile small" in cmd
