"""scripts/checked_frontier.py: the frontier rule, and the claims docs/RMT.md makes from the
committed evidence (no ABFT variant reaches every in-kernel bound ≥ 99 %; ones/T does)."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

from tests.script_module import load_script

REPO = Path(__file__).resolve().parents[2]
STORE = REPO / "evidence/h100-2026-11-22-rmt2/store/nvidia-h100-80gb-hbm3"
BENCH = REPO / "evidence/h100-2026-11-24-verify/bench"


def _script() -> ModuleType:
    return load_script("checked_frontier")


def test_frontier_keeps_exactly_the_points_nothing_dominates() -> None:
    front = _script().frontier({
        "cheap": (10.0, 1.0), "better": (50.0, 1.2), "dominated": (40.0, 1.3),
        "tie_worse": (50.0, 1.4), "best": (99.9, 2.0),
    })
    assert front == {"cheap", "better", "best"}


def test_committed_evidence_gives_the_frontier_docs_state() -> None:
    mod = _script()
    dc, dims = mod.load_dc(STORE, "fma")
    assert dims == {"80x80x80"}
    overheads, _ = mod.load_overheads(
        [BENCH / "bench_checked.json", BENCH / "bench_checked_inf.json"], "fma")
    _, result = mod.tables(dc, overheads)
    assert set(result) == {"4096x4096x4096", "64x4096x4096", "1x4096x4096", "256x1024x4096"}
    for dims, r in result.items():
        abft_worst = [lb for v, (lb, _) in r["points"].items() if "abft" in v]
        assert abft_worst and max(abft_worst) < 99.0, dims
        high = [v for v in r["frontier"] if r["points"][v][0] >= 99.0]
        cheapest = min(high, key=lambda v: r["points"][v][1])
        assert cheapest in ("ones/T", "fletcher/T"), (dims, cheapest)
    assert result["4096x4096x4096"]["meets_target"] == []
    for dims in ("64x4096x4096", "1x4096x4096", "256x1024x4096"):
        assert "ones/T" in result[dims]["meets_target"], dims
