"""Issue 16's targets read from runtime-bench evidence (`safemon.bench.targets`): each
figure is the one the evidence implies, judged against its limit, and a run off an H100 is
said not to count. Synthetic evidence is made up for the arithmetic; one committed file
(evidence/h200-2026-12-07-stop62, call 9) checks the reading of a real run."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest

from safemon.bench.runtime import runtime_markdown
from safemon.bench.targets import counts_for_issue, target_rows, targets_markdown

ROOT = Path(__file__).resolve().parents[2]


def _stats(p50: float, p99: float | None = None) -> dict[str, float]:
    return {"p50_us": p50, "p99_us": 2 * p50 if p99 is None else p99, "n": 10}


def _evidence(device: str = "NVIDIA H100 80GB HBM3") -> dict:
    return {"device": device, "when": "T", "transport": "ipc", "paths": ["cuda-ipc"],
            "policy": "2oo3",
            "variant": "", "model": "mlp", "mps": "on",
            "baselines": {"direct": {"80x80x80": _stats(40.0), "1024x1024x64": _stats(50.0)},
                          "model_three_graphs": _stats(1000.0),
                          "model_cupy_matmul": _stats(300.0)},
            "placements": [{"placement": "inline", "spin_s": 0.005, "faults": {
                "80x80x80": {"injected": 5, "released": 5, "errors": 0, "wrong_released": 0},
                "model": {"injected": 5, "released": 4, "errors": 1, "wrong_released": 0}},
                "runs": [
                    {"path": "cuda-ipc", "request": "80x80x80", "round_trip": _stats(400.0),
                     "kernel": _stats(100.0), "overhead": _stats(140.0, 510.0)},
                    {"path": "cuda-ipc", "request": "1024x1024x64",
                     "round_trip": _stats(75.0), "kernel": _stats(60.0),
                     "overhead": _stats(15.0)},
                    {"path": "cuda-ipc", "request": "model", "round_trip": _stats(1200.0),
                     "kernel": _stats(900.0), "overhead": _stats(300.0)}]}]}


def test_each_target_is_its_figure_against_its_limit() -> None:
    rows = {t.target: t for t in target_rows(_evidence())}
    assert rows["80³ overhead p50"].figure == 140.0 and rows["80³ overhead p50"].met
    assert rows["80³ overhead p99"].figure == 510.0 and not rows["80³ overhead p99"].met
    assert rows["1024×1024×64 ÷ direct kernel"].figure == pytest.approx(1.5)
    assert rows["1024×1024×64 ÷ direct kernel"].met  # the limit itself is met
    assert rows["MLP ÷ 3 channels' passes back to back"].figure == pytest.approx(1.2)
    assert rows["MLP ÷ one cupy.matmul forward"].figure == pytest.approx(4.0)
    assert not rows["MLP ÷ one cupy.matmul forward"].met
    assert rows["wrong outputs released with faults"].figure == 0.0
    assert rows["wrong outputs released with faults"].met


def test_one_wrong_output_fails_the_fault_target() -> None:
    ev = _evidence()
    ev["placements"][0]["faults"]["model"]["wrong_released"] = 1
    rows = {t.target: t for t in target_rows(ev)}
    assert not rows["wrong outputs released with faults"].met


def test_a_run_off_an_h100_is_said_not_to_count() -> None:
    assert counts_for_issue(_evidence())
    h200 = _evidence("NVIDIA H200")
    assert not counts_for_issue(h200)
    assert "is not met for the issue" in targets_markdown(h200)
    assert "this run was that;" in targets_markdown(_evidence())
    other_policy = _evidence()
    other_policy["policy"] = "1oo2D"
    assert not counts_for_issue(other_policy)


def test_a_target_whose_baseline_is_missing_is_left_out() -> None:
    """Older evidence without the captured passes: that ratio is absent, not guessed."""
    ev = _evidence()
    del ev["baselines"]["model_three_graphs"]
    names = [t.target for t in target_rows(ev)]
    assert "MLP ÷ 3 channels' passes back to back" not in names
    assert "MLP ÷ one cupy.matmul forward" in names


def test_the_runtime_report_ends_with_the_targets() -> None:
    text = runtime_markdown(_evidence())
    assert text.index("Faults (bitflip-c") < text.index("Issue 16's targets")
    assert "| inline (spin 5 ms) | cuda-ipc | 80³ overhead p99 | 510 µs | 500 µs | no |" in text
    assert "| inline (spin 5 ms) | all | wrong outputs released with faults | 0 | 0 | yes |" in text


def test_a_committed_run_reads_as_its_report_says() -> None:
    """evidence/h200-2026-12-07-stop62/call9: its report gives the 80³ overhead as
    1,156 / 1,434 µs and the 1024×1024×64 ratio as 20.46×."""
    with tarfile.open(ROOT / "evidence/h200-2026-12-07-stop62/call9/stop.tgz") as tar:
        member = tar.extractfile("./vote-inline-spin5.json")
        assert member is not None
        ev = json.load(member)
    rows = {t.target: t for t in target_rows(ev)}
    assert round(rows["80³ overhead p50"].figure) == 1156
    assert round(rows["80³ overhead p99"].figure) == 1434
    assert rows["1024×1024×64 ÷ direct kernel"].figure == pytest.approx(20.46, abs=0.005)
    assert not counts_for_issue(ev)


def test_host_path_rows_and_missing_figures_are_not_judged() -> None:
    """Rows of arrays through host memory are not issue 16's device-resident requests; an
    80³ run without its overhead figure is left out, not guessed."""
    ev = _evidence()
    runs = ev["placements"][0]["runs"]
    runs.append({**runs[0], "path": "host", "overhead": _stats(10.0)})
    del runs[0]["overhead"]
    rows = target_rows(ev)
    assert all(t.path in ("cuda-ipc", "all") for t in rows)
    assert not any(t.target.startswith("80³") for t in rows)
