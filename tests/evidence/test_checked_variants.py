"""The RMT and ABFT variants as catalog entries: labels, names and parsing (docs/RMT.md)."""

from __future__ import annotations

import pytest

from safemon.dims import Dims
from safemon.evidence.campaign import parse_variants, run_input_campaign, variant_label
from safemon.kernels.catalog import (
    IN_KERNEL_CHECKS,
    checked_variants,
    make_variant,
    standard_variants,
    variant_from_name,
)


def test_checked_variants_are_rmt_and_abft_alone_and_with_es_m() -> None:
    """`checked` expands to the nine issue-15 variants, each with the check it names."""
    vs = parse_variants("checked", "fma", "small")
    assert [variant_label(v) for v in vs] == [
        "unprotected/rmt-warp", "unprotected/abft", "ones/M/rmt-warp", "ones/M/abft",
        "ones/M/rmt-warp/abft", "unprotected/rmt-block", "ones/M/rmt-block",
        "unprotected/abft-rows", "ones/M/abft-rows"]
    assert [v.abft_kind for v in vs] == ["none", "full", "none", "full", "full", "none",
                                         "none", "rows", "rows"]
    assert len(vs) == len(IN_KERNEL_CHECKS)
    assert vs == checked_variants("fma", "small")


@pytest.mark.parametrize("label", ["ones/M/rmt-warp/abft", "unprotected/abft", "xor_fletcher/abft",
                                   "twos/I/rmt-warp", "ones/I", "ones/M/rmt-block/abft",
                                   "unprotected/rmt-block", "unprotected/abft-rows",
                                   "ones/M/rmt-warp/abft-rows"])
def test_a_label_parses_back_to_itself(label: str) -> None:
    """variant_label ∘ parse_variants is the identity on labels with check suffixes."""
    v = parse_variants(label, "exact", "large")[0]
    assert variant_label(v) == label
    assert v.rmt == ("warp" if "rmt-warp" in label else "block" if "rmt-block" in label
                     else "none")
    assert v.abft_kind == ("full" if label.endswith("/abft") else
                           "rows" if label.endswith("/abft-rows") else "none")
    assert v.abft == (v.abft_kind != "none")


@pytest.mark.parametrize("bad", ["unprotected", "ones/M/abft/rmt-warp", "ones/M/rmt-grid",
                                 "ones/abft", "ones/M/abft-cols", "ones/M/abft-rows/abft"])
def test_malformed_check_labels_are_refused(bad: str) -> None:
    """The plain unprotected kernel, checks out of order, unknown RMT kinds and a missing
    level are clear errors."""
    with pytest.raises(ValueError):
        parse_variants(bad, "fma", "small")


def test_variant_from_name_inverts_every_name() -> None:
    """Every standard and checked variant, at every tile, with and without split, round-trips."""
    for tile in ("small", "large", "wide"):
        for split in (1, 9):
            for mode in ("exact", "fma"):
                for v in standard_variants(mode, tile, split) + checked_variants(mode, tile, split):
                    assert variant_from_name(v.name) == v
    v = make_variant(None, None, "fma", "small")
    assert variant_from_name(v.name) == v


@pytest.mark.parametrize("bad", ["ones/I", "ones/I/fma", "ones/I/fma/huge", "unprotected/fma",
                                 "ones/I/fma/small/abft/x", "ones/I/fma/small/split1",
                                 "ones/I/fma/small/abft-cols"])
def test_variant_from_name_refuses_what_no_variant_is_named(bad: str) -> None:
    with pytest.raises(ValueError):
        variant_from_name(bad)


def test_the_numpy_input_campaign_refuses_abft() -> None:
    """The NumPy campaign packs several faults per tile, so it cannot judge a tile-wide ABFT
    check fault by fault: a clear error, never an undercounted DC."""
    v = make_variant("ones", "M", "fma", "small", abft=True)
    with pytest.raises(ValueError, match="cupy backend"):
        run_input_campaign(v, Dims(8, 8, 8), backend="numpy")


def test_the_numpy_input_campaign_of_rmt_equals_its_es_only_variant() -> None:
    """An input flip reaches both replicas (outside the sphere), so the RMT variant's verdicts
    are those of the same variant without RMT."""
    d = Dims(8, 8, 8)
    with_rmt = run_input_campaign(make_variant("ones", "M", "fma", "small", rmt="warp"), d)
    without = run_input_campaign(make_variant("ones", "M", "fma", "small"), d)
    assert (with_rmt.verdicts == without.verdicts).all()
