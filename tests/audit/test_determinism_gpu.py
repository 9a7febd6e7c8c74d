"""The determinism audit on the device: shipped variants are bit-identical run to run.

Runs `run_determinism` with few repeats, under both conditions (alone; load from another
stream and another process), and checks the document it writes. Skips without a GPU.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from safemon.kernels.compiler import cuda_available

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not cuda_available(), reason="no CUDA device")]


def test_shipped_variants_are_bit_identical_alone_and_under_load(tmp_path: Path) -> None:
    from safemon.audit.determinism_run import (
        CONDITIONS,
        build_label,
        run_determinism,
        shipped_variants,
    )
    from safemon.kernels.catalog import TILES

    # The smallest size that gives every tile (the largest one included) two blocks or more.
    size = max(max(t.bm, t.bn) for t in TILES.values()) + 32
    doc = run_determinism(repeats=4, size=size, out_dir=tmp_path)
    # One row per shipped build, `wide64` and the same tile reading Aᵀ included.
    assert [v["build"] for v in doc["variants"]] == [build_label(v) for v in shipped_variants()]
    for row in doc["variants"]:
        assert row["differing_max"] == 0, row["build"]
        for cond in CONDITIONS:
            r = row[cond]
            assert r["instrumented_matches_shipped"], (row["build"], cond)
            assert -1.0 <= r["tau_vs_first_min"] <= r["tau_vs_first_max"] <= 1.0
    for cond in CONDITIONS:
        assert doc["contrasts"]["atomic_sum"][cond]["runs"] == 4
    saved = json.loads((tmp_path / "determinism.json").read_text())
    assert saved["device"]["name"] == doc["device"]["name"]
    assert (tmp_path / "orderings.png").stat().st_size > 0
