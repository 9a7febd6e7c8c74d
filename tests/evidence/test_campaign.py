"""Exhaustive input campaigns: complete 20² runs, checked fault by fault against brute force."""

from __future__ import annotations

import numpy as np
import pytest

from safemon.dims import Dims
from safemon.evidence.campaign import (
    C_DIFFERS,
    ES_DIFFERS,
    brute_force_verdict,
    describe_fault,
    inputs_for,
    parse_variants,
    run_input_campaign,
)
from safemon.kernels.catalog import make_variant
from safemon.kernels.reference import reference_matmul

D20 = Dims(20, 20, 20)
CI_VARIANTS = ("ones/I", "xor/I", "crc32c/I", "twos/E")


def _sample(dims: Dims, n: int, seed: int) -> list[int]:
    """Random faults plus every exponent-top-bit (30) and sign-bit (31) flip of a few elements."""
    rng = np.random.default_rng(seed)
    picks = set(rng.choice(dims.input_bits, n, replace=False).tolist())
    for elem in rng.choice(dims.input_bits // 32, 6, replace=False).tolist():
        picks |= {elem * 32 + 30, elem * 32 + 31, elem * 32}
    return sorted(picks)


@pytest.fixture(scope="module", params=CI_VARIANTS)
def campaign20(request: pytest.FixtureRequest):  # type: ignore[no-untyped-def]
    v = parse_variants(request.param, "exact", "small")[0]
    return run_input_campaign(v, D20, seed=0, backend="numpy")


def test_campaign_is_complete_and_consistent(campaign20) -> None:  # type: ignore[no-untyped-def]
    """Every one of the 25,600 faults gets a verdict; the derived counts add up."""
    r = campaign20
    assert r.injections == 25_600 == D20.input_bits
    assert set(np.unique(r.verdicts).tolist()) <= {0, ES_DIFFERS, C_DIFFERS, ES_DIFFERS | C_DIFFERS}
    both = int(np.count_nonzero(r.verdicts == 3))
    assert r.detected_es == r.latent + both
    assert r.visible_c == r.escapes + both
    assert r.dc_percent == pytest.approx(100.0 * r.detected_es / r.injections)


def test_campaign_verdicts_equal_brute_force(campaign20) -> None:  # type: ignore[no-untyped-def]
    """The incremental, packed campaign agrees with full runs on the flipped inputs."""
    r = campaign20
    a, b = inputs_for(D20, 0)
    golden = reference_matmul(a, b, r.variant)
    for f in _sample(D20, 25, seed=sum(r.variant.name.encode())):
        assert brute_force_verdict(a, b, r.variant, f, golden) == r.verdicts[f], describe_fault(D20, f)


def test_full_signature_checksums_detect_every_input_flip(campaign20) -> None:  # type: ignore[no-untyped-def]
    """ones(I) and crc32c(I) fold every operand word once per MAC: no single flip escapes them."""
    r = campaign20
    if r.variant.checksum in ("ones", "crc32c"):
        assert r.dc_percent == 100.0
    assert r.escapes <= r.visible_c


@pytest.mark.parametrize(
    ("spec", "dims", "mode"),
    [("xor/M", Dims(40, 36, 12), "exact"), ("twos_fletcher", Dims(33, 40, 9), "exact"),
     ("xor/E", Dims(8, 70, 5), "exact")],
)
def test_multi_block_strips_match_brute_force(spec: str, dims: Dims, mode: str) -> None:
    """With several block rows and columns (and ragged edges), strips map to the right threads."""
    v = parse_variants(spec, mode, "small")[0]
    r = run_input_campaign(v, dims, seed=5)
    a, b = inputs_for(dims, 5)
    golden = reference_matmul(a, b, v)
    for f in _sample(dims, 30, seed=7):
        assert brute_force_verdict(a, b, v, f, golden) == r.verdicts[f], describe_fault(dims, f)


def test_campaign_is_reproducible_from_the_seed() -> None:
    v = parse_variants("twos/M", "exact", "small")[0]
    d = Dims(8, 12, 4)
    r1, r2 = run_input_campaign(v, d, seed=3), run_input_campaign(v, d, seed=3)
    assert np.array_equal(r1.verdicts, r2.verdicts)
    a1, _ = inputs_for(d, 3)
    a2, _ = inputs_for(d, 4)
    assert not np.array_equal(a1, a2)


def test_fault_numbering() -> None:
    d = Dims(2, 3, 4)
    assert describe_fault(d, 0) == ("A", 0, 0, 0)
    assert describe_fault(d, 32 * 5 + 7) == ("A", 1, 1, 7)
    assert describe_fault(d, 32 * 8) == ("B", 0, 0, 0)
    assert describe_fault(d, 32 * 8 + 32 * 4 + 31) == ("B", 1, 1, 31)
    with pytest.raises(ValueError):
        describe_fault(d, d.input_bits)


def test_bad_arguments_raise() -> None:
    with pytest.raises(ValueError, match="unknown variant"):
        parse_variants("nope/I", "exact", "small")
    with pytest.raises(ValueError, match="needs a level"):
        parse_variants("ones", "exact", "small")
    with pytest.raises(ValueError):
        parse_variants("ones/Q", "exact", "small")
    v = parse_variants("ones/I", "exact", "small")[0]
    with pytest.raises(ValueError, match="backend"):
        run_input_campaign(v, Dims(4, 4, 4), backend="tpu")
    with pytest.raises(ValueError, match="batch"):
        run_input_campaign(v, Dims(4, 4, 4), batch=0)


def test_parse_variants_expands_standard() -> None:
    vs = parse_variants("standard", "fma", "small")
    assert len(vs) == 28
    assert parse_variants("xor_fletcher", "exact", "small")[0].level == "I+M"


@pytest.mark.gpu
@pytest.mark.parametrize("spec", CI_VARIANTS)
def test_gpu_campaign_equals_cpu_campaign(spec: str) -> None:
    """The batched injection build gives the same verdict for every one of the 25,600 faults."""
    v = parse_variants(spec, "exact", "small")[0]
    cpu = run_input_campaign(v, D20, seed=0, backend="numpy")
    gpu = run_input_campaign(v, D20, seed=0, backend="cupy", batch=4096)
    assert np.array_equal(cpu.verdicts, gpu.verdicts)


@pytest.mark.gpu
def test_gpu_campaign_equals_cpu_fma_multi_block() -> None:
    v = parse_variants("ones_fletcher", "fma", "small")[0]
    d = Dims(40, 36, 12)
    cpu = run_input_campaign(v, d, seed=2, backend="numpy")
    gpu = run_input_campaign(v, d, seed=2, backend="cupy")
    assert np.array_equal(cpu.verdicts, gpu.verdicts)


@pytest.mark.parametrize("level", ["M", "E"])
def test_paper_levels_at_20_detect_only_flips_that_reach_their_accumulator_word(level: str) -> None:
    """20² campaign with the paper's levels (small tile, 4x4 per thread): M folds acc[3][j],
    so a detected A flip lies in a row ≡ 3 (mod 4); E folds acc[3][3], so a detected flip
    lies in such a row of A or a column ≡ 3 (mod 4) of B. I detects every flip that changes C."""
    d = Dims(20, 20, 20)
    res = run_input_campaign(make_variant("ones", level, "exact", "small"), d, seed=2)
    det = (res.verdicts & ES_DIFFERS) != 0
    n_a = 32 * d.m * d.k
    a_rows = (np.arange(n_a) // 32) // d.k
    b_cols = (np.arange(res.injections - n_a) // 32) % d.n
    assert not det[:n_a][a_rows % 4 != 3].any()
    if level == "E":
        assert not det[n_a:][b_cols % 4 != 3].any()
    else:
        assert det[n_a:].mean() > 0.9  # every B column reaches some acc[3][j]
    assert det.any()
    full = run_input_campaign(make_variant("ones", "I", "exact", "small"), d, seed=2)
    visible = (full.verdicts & C_DIFFERS) != 0
    assert ((full.verdicts & ES_DIFFERS) != 0)[visible].all()
    assert full.detected_es > res.detected_es
