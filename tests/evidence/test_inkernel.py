"""In-kernel fault sites: sampling and classification (CPU), campaigns (GPU)."""

from __future__ import annotations

import numpy as np
import pytest

from safemon.dims import Dims
from safemon.evidence.campaign import parse_variants
from safemon.evidence.inkernel import classify, run_inkernel_campaign, sample_sites
from safemon.faults.launch import FIELDS, TARGETS, injection_rows

V = parse_variants("ones_fletcher", "exact", "small")[0]
D = Dims(40, 36, 12)


def col(rows: np.ndarray, name: str) -> np.ndarray:  # type: ignore[type-arg]
    return rows[:, FIELDS.index(name)]


def test_sites_are_seeded_and_in_range() -> None:
    r1 = sample_sites(V, D, 2000, seed=4)
    assert np.array_equal(r1, sample_sites(V, D, 2000, seed=4))
    assert not np.array_equal(r1, sample_sites(V, D, 2000, seed=5))
    t = V.tile
    threads = t.total_threads(D.m, D.n)
    assert set(np.unique(col(r1, "target")).tolist()) == {1, 2, 3, 4}
    assert col(r1, "thread").min() >= 0 and col(r1, "thread").max() < threads
    assert col(r1, "kstep").max() < t.k_padded(D.k)
    assert col(r1, "bit").max() <= 31
    for name, limit in (("operand_a", t.tm), ("operand_b", t.tn),
                        ("accumulator", t.tm * t.tn), ("es_word", V.words)):
        idx = col(r1, "index")[col(r1, "target") == TARGETS[name]]
        assert idx.min() >= 0 and idx.max() < limit
    assert (col(r1, "block") == col(r1, "thread") // t.threads).all()


def test_permanent_block_sites() -> None:
    rows = sample_sites(V, D, 50, seed=1, targets=("accumulator",), scope="block")
    assert (col(rows, "thread") == -1).all() and (col(rows, "scope") == 2).all()
    assert (col(rows, "kstep") == -1).all()
    with pytest.raises(ValueError, match="es_word"):
        sample_sites(V, D, 5, scope="thread")
    with pytest.raises(ValueError, match="scope"):
        sample_sites(V, D, 5, scope="forever")
    with pytest.raises(ValueError):
        sample_sites(V, D, 0)


def test_classify_and_rows() -> None:
    assert classify([0, 1, 2, 3]).tolist() == ["masked", "detected", "sdc", "detected"]
    with pytest.raises(ValueError, match="bit"):
        injection_rows(1, target=1, bit=32)


@pytest.mark.gpu
def test_gpu_es_word_flips_are_always_detected_and_counts_add_up() -> None:
    r = run_inkernel_campaign(V, D, 3000, seed=3)
    counts = r.counts()
    assert sum(counts["all"].values()) == 3000
    es = counts["es_word"]
    assert es["detected"] == sum(es.values())
    # Operand flips at the I level fold the flipped register: they cannot escape as SDC.
    assert counts["operand_a"]["sdc"] == 0 and counts["operand_b"]["sdc"] == 0


@pytest.mark.gpu
@pytest.mark.parametrize("scope", ["thread", "block"])
def test_gpu_permanent_faults_run(scope: str) -> None:
    r = run_inkernel_campaign(V, D, 500, seed=1, targets=("operand_a", "accumulator"), scope=scope)
    assert sum(r.counts()["all"].values()) == 500
