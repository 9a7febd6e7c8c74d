"""The API wall-time section of `safemon bench`: evidence rows and the Markdown table."""

from __future__ import annotations

from typing import Any

import pytest

from safemon.bench.api import api_markdown
from safemon.evidence.store import BenchEvidence, EvidenceError, load_evidence, write_evidence
from tests.evidence.helpers import bench_doc


def _api_row(call: str, wall: float, cupy: float, *, variant: str | None = "ones/F/fma/wide/split9",
             dims: str = "1x4096x4096") -> dict[str, Any]:
    return {"call": call, "variant": variant, "dims": dims, "repeats": 50,
            "wall_p50_us": wall, "wall_p99_us": wall * 1.2, "kernel_us": wall * 0.8,
            "cupy_wall_p50_us": cupy, "vs_cupy": wall / cupy}


def test_api_rows_round_trip_and_render(tmp_path: Any) -> None:
    rows = [_api_row("cupy.matmul", 48.0, 48.0, variant=None),
            _api_row("safemon.matmul fma", 60.0, 48.0, variant="unprotected/fma/wide/split9")]
    doc = {**bench_doc([]), "api": rows}
    ev = BenchEvidence.model_validate(doc)
    path = write_evidence(ev, tmp_path / "b.json")
    back = load_evidence(path)
    assert isinstance(back, BenchEvidence) and back.api == ev.api
    md = api_markdown(ev.api)
    assert "| 1x4096x4096 | 48 (1.00×) | 60 (1.25×) |" in md
    assert "wide/split9" in md


def test_api_ratio_must_match_the_walls(tmp_path: Any) -> None:
    bad = {**_api_row("safemon.matmul fma", 60.0, 48.0), "vs_cupy": 1.0}
    path = tmp_path / "bad.json"
    import json

    path.write_text(json.dumps({**bench_doc([]), "api": [bad]}))
    with pytest.raises(EvidenceError, match="vs_cupy"):
        load_evidence(path)


def test_older_bench_files_without_api_rows_stay_valid() -> None:
    assert BenchEvidence.model_validate(bench_doc([])).api == []
