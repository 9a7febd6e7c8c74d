"""Issue 16's targets read from runtime-bench evidence (`safemon.bench.targets`): each
figure is the one the evidence implies, judged against its limit; a run that is not 2oo3 on
an H100 with protected channels is said not to count; what the file does not hold is left
out. Synthetic evidence is made up for the arithmetic; one committed file
(evidence/h200-2026-12-07-stop62, call 9) checks the reading of a real run."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest

from safemon.bench import targets as tg
from safemon.bench.runtime import DEFAULT_VARIANT_LABEL, ModelShape, runtime_markdown
from safemon.bench.targets import counts_for_issue, format_figure, target_rows, targets_markdown

ROOT = Path(__file__).resolve().parents[2]


def _stats(p50: float, p99: float | None = None) -> dict[str, float]:
    return {"p50_us": p50, "p99_us": 2 * p50 if p99 is None else p99, "n": 10}


def _evidence(device: str = "NVIDIA H100 80GB HBM3") -> dict:
    return {"device": device, "when": "T", "transport": "ipc", "paths": ["cuda-ipc"],
            "policy": "2oo3", "variant": "default (ones/T/fma)", "model": tg.ISSUE_MODEL,
            "mps": "on",
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


def _by_name(ev: dict) -> dict[str, tg.TargetRow]:
    return {t.target: t for t in target_rows(ev)}


def test_each_target_is_its_figure_against_its_limit() -> None:
    rows = _by_name(_evidence())
    assert rows[tg.OVERHEAD_P50].figure == 140.0 and rows[tg.OVERHEAD_P50].met
    assert rows[tg.OVERHEAD_P99].figure == 510.0 and not rows[tg.OVERHEAD_P99].met
    assert rows[tg.WIDE].figure == pytest.approx(1.5)
    assert rows[tg.WIDE].met  # the limit itself is met
    assert rows[tg.MLP_GPU].figure == pytest.approx(1.2)
    assert rows[tg.MLP_CUPY].figure == pytest.approx(4.0)
    assert not rows[tg.MLP_CUPY].met
    assert rows[tg.FAULTS].figure == 0.0 and rows[tg.FAULTS].met
    assert rows[tg.FAULTS].injected == 10


def test_one_wrong_output_fails_the_fault_target() -> None:
    ev = _evidence()
    ev["placements"][0]["faults"]["model"]["wrong_released"] = 1
    assert not _by_name(ev)[tg.FAULTS].met


def test_a_run_with_no_faulted_request_has_no_fault_row() -> None:
    """Nothing injected is missing data, not a target met."""
    ev = _evidence()
    for f in ev["placements"][0]["faults"].values():
        f["injected"] = f["released"] = 0
    assert tg.FAULTS not in _by_name(ev)
    ev["placements"][0]["faults"] = {}
    assert tg.FAULTS not in _by_name(ev)


def test_a_run_that_is_not_2oo3_on_an_h100_with_protected_channels_does_not_count() -> None:
    assert counts_for_issue(_evidence())
    assert "this run: 2oo3 on NVIDIA H100 80GB HBM3, channel variant default (ones/T/fma);" \
        in targets_markdown(_evidence())
    h200 = _evidence("NVIDIA H200")
    assert not counts_for_issue(h200)
    assert "so a target met here is not met for the issue" in targets_markdown(h200)
    for key, value in (("policy", "1oo2D"), ("variant", "unprotected/fma")):
        ev = _evidence()
        ev[key] = value
        assert not counts_for_issue(ev)


def test_an_mlp_of_another_shape_is_not_judged_against_the_mlp_targets() -> None:
    ev = _evidence()
    ev["model"] = "mlp2x256/batch8"
    names = _by_name(ev)
    assert tg.MLP_GPU not in names and tg.MLP_CUPY not in names
    assert tg.OVERHEAD_P50 in names


def test_a_target_whose_baseline_is_missing_is_left_out() -> None:
    """Older evidence without the captured passes or the direct kernel: those ratios are
    absent, not guessed."""
    ev = _evidence()
    del ev["baselines"]["model_three_graphs"]
    del ev["baselines"]["direct"]["1024x1024x64"]
    names = _by_name(ev)
    assert tg.MLP_GPU not in names and tg.WIDE not in names
    assert tg.MLP_CUPY in names


def test_host_path_rows_and_missing_figures_are_not_judged() -> None:
    """Rows of arrays through host memory are not issue 16's device-resident requests; an
    80³ run without its overhead figure is left out, not guessed."""
    ev = _evidence()
    runs = ev["placements"][0]["runs"]
    runs.append({**runs[0], "path": "host", "overhead": _stats(10.0)})
    del runs[0]["overhead"]
    rows = target_rows(ev)
    assert all(t.path == "cuda-ipc" for t in rows)
    assert not any(t.target.startswith("80³") for t in rows)


def test_the_fault_row_names_the_path_the_faults_took() -> None:
    """The bench faults device-resident requests when the run has that path, else host ones."""
    ev = _evidence()
    ev["paths"] = ["host"]
    for r in ev["placements"][0]["runs"]:
        r["path"] = "host"
    rows = target_rows(ev)
    assert [(t.target, t.path) for t in rows] == [(tg.FAULTS, "host")]


def test_a_rounded_figure_never_reads_as_its_limit_when_it_is_not() -> None:
    assert format_figure(150.4, "µs", 150.0) == "150.4 µs"
    assert format_figure(499.6, "µs", 500.0) == "499.6 µs"
    assert format_figure(150.0, "µs", 150.0) == "150 µs"
    assert format_figure(1.2049, "×", 1.2) == "1.205×"
    assert format_figure(1353.2, "µs", 150.0) == "1,353 µs"


def test_the_runtime_report_ends_with_the_targets_per_placement() -> None:
    ev = _evidence()
    ev["placements"].append({**ev["placements"][0], "placement": "stream", "spin_s": 0.0,
                             "client_spin_s": 0.005})
    text = runtime_markdown(ev)
    assert text.index("Faults (bitflip-c") < text.index("Issue 16's targets")
    assert "| inline (spin 5 ms) | cuda-ipc | 80³ overhead p99 | 510 µs | 500 µs | no |" in text
    assert ("| inline (spin 5 ms) | cuda-ipc | wrong outputs released with faults "
            "(10 faulted requests) | 0 | 0 | yes |") in text
    # the same placement label as the report's own table
    assert "| stream (client spin 5 ms) | cuda-ipc | 80³ overhead p50 | 140 µs |" in text


def test_a_committed_run_reads_as_its_report_says() -> None:
    """evidence/h200-2026-12-07-stop62/call9: its report gives the 80³ overhead as
    1,156 / 1,434 µs and the 1024×1024×64 ratio as 20.46×."""
    with tarfile.open(ROOT / "evidence/h200-2026-12-07-stop62/call9/stop.tgz") as tar:
        member = tar.extractfile("./vote-inline-spin5.json")
        assert member is not None
        ev = json.load(member)
    rows = _by_name(ev)
    assert round(rows[tg.OVERHEAD_P50].figure) == 1156
    assert round(rows[tg.OVERHEAD_P99].figure) == 1434
    assert rows[tg.WIDE].figure == pytest.approx(20.46, abs=0.005)
    assert rows[tg.MLP_CUPY].figure == pytest.approx(7.42, abs=0.005)
    assert not counts_for_issue(ev)


def test_the_issue_model_and_the_default_variant_are_the_benchs_own_labels() -> None:
    """The constants the targets judge by are what the bench writes for its defaults."""
    assert ModelShape().label == tg.ISSUE_MODEL
    assert not DEFAULT_VARIANT_LABEL.startswith("unprotected")
