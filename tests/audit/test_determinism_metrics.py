"""The determinism audit's metrics against hand-made arrays and orderings (no GPU)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from safemon.audit.determinism import (
    differing_elements,
    kendall_tau,
    ranks_from_order,
    tau_summary,
)


def test_differing_elements_counts_bitwise_differences() -> None:
    a = np.array([1.0, -0.0, 3.0, np.float32(1e-40)], dtype=np.float32)
    b = np.array([1.0, 0.0, 3.0000002, np.float32(1e-40)], dtype=np.float32)
    # -0.0 vs +0.0 differ in bits; 3.0 vs its successor differ; the subnormal is equal.
    assert differing_elements(a, b) == 2
    assert differing_elements(a, a.copy()) == 0


def test_differing_elements_same_nan_payload_is_equal() -> None:
    a = np.array([np.nan], dtype=np.float32)
    assert differing_elements(a, a.copy()) == 0


def test_differing_elements_rejects_shape_and_dtype_mismatch() -> None:
    with pytest.raises(ValueError, match="shapes"):
        differing_elements(np.zeros(3, np.float32), np.zeros(4, np.float32))
    with pytest.raises(ValueError, match="dtypes"):
        differing_elements(np.zeros(3, np.float32), np.zeros(3, np.float64))


def test_kendall_tau_identity_reverse_and_one_swap() -> None:
    ident = [0, 1, 2, 3, 4]
    assert kendall_tau(ident, ident) == 1.0
    assert kendall_tau(ident, ident[::-1]) == -1.0
    # One adjacent swap: 1 discordant pair of 10 -> (9 - 1) / 10.
    assert kendall_tau(ident, [1, 0, 2, 3, 4]) == pytest.approx(0.8)


def test_kendall_tau_matches_pair_count_on_all_permutations_of_five() -> None:
    ident = np.arange(5)
    for perm in itertools.permutations(range(5)):
        p = np.array(perm)
        conc = disc = 0
        for i, j in itertools.combinations(range(5), 2):
            s = (ident[i] - ident[j]) * (p[i] - p[j])
            conc += s > 0
            disc += s < 0
        assert kendall_tau(ident, p) == pytest.approx((conc - disc) / 10)


def test_kendall_tau_is_symmetric_on_random_orderings() -> None:
    rng = np.random.default_rng(1)
    a, b = rng.permutation(300), rng.permutation(300)
    assert kendall_tau(a, b) == pytest.approx(kendall_tau(b, a))
    assert abs(kendall_tau(a, b)) < 0.2  # independent orderings are nearly uncorrelated


def test_kendall_tau_rejects_non_permutations() -> None:
    with pytest.raises(ValueError, match="permutation"):
        kendall_tau([0, 1, 1], [0, 1, 2])
    with pytest.raises(ValueError, match="lengths"):
        kendall_tau([0, 1], [0, 1, 2])
    with pytest.raises(ValueError, match="two items"):
        kendall_tau([0], [0])


def test_ranks_from_order_inverts_the_arrival_sequence() -> None:
    # Block 2 arrived first, then 0, then 1.
    assert ranks_from_order([2, 0, 1]).tolist() == [1, 2, 0]


def test_tau_summary_reports_identical_and_reversed_runs() -> None:
    runs = np.array([[0, 1, 2, 3], [0, 1, 2, 3], [3, 2, 1, 0]])
    s = tau_summary(runs)
    assert s["identical_orderings"] == 1
    assert s["tau_vs_first_max"] == 1.0
    assert s["tau_vs_first_min"] == -1.0
    assert s["tau_vs_index_min"] == -1.0
    with pytest.raises(ValueError, match="two runs"):
        tau_summary(runs[:1])


def test_each_shipped_build_gets_a_row_label_of_its_own() -> None:
    """`wide64` and `wide64` reading Aᵀ share a variant name but are two builds: the report
    keeps one row per build (on the H100, 2026-11-25, a name-keyed report lost one)."""
    from safemon.audit.determinism_run import build_label, shipped_variants
    from safemon.kernels.gpu import build_for

    variants = shipped_variants()
    labels = [build_label(v) for v in variants]
    assert len(set(labels)) == len(labels) == len({build_for(v) for v in variants})
    for v, label in zip(variants, labels, strict=True):
        assert label.startswith(v.name)
        assert label.endswith("(reads A^T)") == v.reads_a_transposed


def _plot_inputs(rows: list[dict], keys: tuple[str, ...]) -> tuple[dict, dict]:
    """A two-run determinism report with `rows`, and orderings under exactly `keys` (plus the
    atomic-sum contrast), as `run_determinism` writes them."""
    ranks = np.array([[0, 1, 2], [1, 0, 2]])
    runs = {"runs": 2, "distinct_results": 1}
    doc = {"variants": rows, "device": {"name": "test"}, "date": "d", "size": 3, "repeats": 2,
           "contrasts": {k: {"alone": runs, "load": runs}
                         for k in ("atomic_sum", "cupy_sum", "cublas_matmul")}}
    arrays = {f"{key}|{cond}": ranks for cond in ("alone", "load") for key in (*keys, "atomic_sum")}
    return doc, arrays


def test_the_orderings_plot_and_summary_go_by_build(tmp_path) -> None:
    """Two rows of one variant name, arrays keyed by build only (as `run_determinism` writes
    them): the plot finds each build's orderings and the summary names both builds."""
    pytest.importorskip("matplotlib")
    from safemon.audit.determinism_plot import _summary_lines, plot_orderings

    builds = ("unprotected/exact/wide64", "unprotected/exact/wide64 (reads A^T)")
    rows = [{"variant": "unprotected/exact/wide64", "build": b, "differing_max": 0}
            for b in reversed(builds)]
    doc, arrays = _plot_inputs(rows, builds)
    plot_orderings(doc, arrays, tmp_path / "o.png")
    assert (tmp_path / "o.png").stat().st_size > 0
    lines = _summary_lines(doc)
    assert any(line.startswith("unprotected/exact/wide64 (reads A^T)") for line in lines)
    assert sum(line.startswith("unprotected/exact/wide64 ") for line in lines) == 2


def test_a_report_written_before_build_labels_still_plots(tmp_path) -> None:
    pytest.importorskip("matplotlib")
    from safemon.audit.determinism_plot import plot_orderings

    doc, arrays = _plot_inputs([{"variant": "ones/I/exact/small", "differing_max": 0}],
                               ("ones/I/exact/small",))
    plot_orderings(doc, arrays, tmp_path / "o.png")
    assert (tmp_path / "o.png").stat().st_size > 0
