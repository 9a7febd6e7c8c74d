"""`safemon bench vote --runtime` end to end on a GPU, as a user runs it: a real daemon per
placement, device-resident and host-path requests and whole-model requests, the in-process
baselines of the same run, faults injected into one channel. Checked: the report's shape
and that no wrong output was released; no timing is asserted (figures come from the
benchmark report, docs/RUNTIME.md)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _needs_cupy_gpu() -> None:
    cp = pytest.importorskip("cupy")
    if cp.cuda.runtime.getDeviceCount() < 1:
        pytest.skip("no CUDA device")


def test_the_runtime_vote_benchmark_reports_every_row_and_releases_nothing_wrong(
        tmp_path: Path) -> None:
    out = tmp_path / "vote.json"
    md = tmp_path / "vote.md"
    done = subprocess.run(
        [sys.executable, "-m", "safemon", "bench", "vote", "--runtime", "--backend", "cupy",
         "--sizes", "80x80x80", "--requests", "20", "--warmup", "3", "--model", "8x256x2",
         "--model-requests", "5", "--placements", "process,inline", "--paths", "cuda-ipc,host",
         "--json", str(out), "--markdown", str(md)],
        cwd=ROOT, capture_output=True, text=True, timeout=540)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    report = json.loads(out.read_text())
    assert report["format"].startswith("safemon.bench_runtime/")
    assert report["device"] and report["policy"] == "2oo3"
    assert {"direct", "model_direct", "model_three_graphs"} <= set(report["baselines"])
    placements = {p["placement"]: p for p in report["placements"]}
    assert set(placements) == {"process", "inline"}
    for name, p in placements.items():
        rows = {(r["path"], r["request"]) for r in p["runs"]}
        assert rows == {(path, req) for path in ("cuda-ipc", "host")
                        for req in ("80x80x80", "model")}, (name, rows)
        for r in p["runs"]:
            assert r["round_trip"]["n"] > 0 and r["round_trip"]["p50_us"] > 0, (name, r)
        assert p["faults"], name
        text = md.read_text()
        for request, f in p["faults"].items():
            assert f["injected"] > 0 and f["released"] > 0, (name, request, f, text)
            assert f["wrong_released"] == 0, (name, request, f)
    assert "| inline | cuda-ipc | 80x80x80 |" in text and "| process | host | model |" in text
