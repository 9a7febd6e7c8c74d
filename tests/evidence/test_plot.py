"""The trade-off plot (seed Figure 7) is written as a PNG."""

from __future__ import annotations

from pathlib import Path

import pytest

from safemon.evidence.plot import plot_tradeoff, tradeoff_points
from safemon.evidence.store import BenchRow, DcRecord
from tests.evidence.helpers import CATALOG, bench_row, dc_rec


def test_plot_file_is_produced(tmp_path: Path) -> None:
    dc = {}
    bench = {}
    for v, d, o in CATALOG:
        r = DcRecord.model_validate(dc_rec(v, d))
        dc[(r.name, r.dims)] = r
        bench[(r.name, r.dims)] = BenchRow.model_validate(bench_row(v, o))
    points = tradeoff_points("80x80x80", dc, bench)
    assert {p.label for p in points} == {v for v, _, _ in CATALOG}
    out = plot_tradeoff(points, tmp_path / "fig" / "tradeoff.png", title="test")
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
    assert tradeoff_points("20x20x20", dc, bench) == []


def test_plot_without_points_raises(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="nothing to plot"):
        plot_tradeoff([], tmp_path / "x.png", title="t")
