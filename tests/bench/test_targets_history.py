"""scripts/targets_history.py: every targets run under an evidence tree, loose or in a .tgz,
listed once and oldest first, with its figures as `safemon.bench.targets` reads them."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path
from types import ModuleType

import pytest

from tests.script_module import load_script


def _script() -> ModuleType:
    return load_script("targets_history")


def _stats(p50: float) -> dict[str, float]:
    return {"p50_us": p50, "p99_us": 2 * p50, "n": 10}


def _run(when: str, device: str, overhead: float) -> dict:
    return {"device": device, "when": when, "mps": "on",
            "baselines": {"direct": {"80x80x80": _stats(40.0)}},
            "placements": [{"placement": "inline", "spin_s": 0.005, "faults": {
                "80x80x80": {"injected": 5, "released": 5, "errors": 0, "wrong_released": 0}},
                "runs": [{"path": "cuda-ipc", "request": "80x80x80",
                          "round_trip": _stats(900.0), "kernel": _stats(100.0),
                          "overhead": _stats(overhead)}]}]}


def _add_to_tgz(path: Path, name: str, ev: dict) -> None:
    data = json.dumps(ev).encode()
    with tarfile.open(path, "w:gz") as tar:
        info = tarfile.TarInfo(f"./{name}")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))


def test_runs_are_found_loose_and_archived_once_each_oldest_first(tmp_path: Path) -> None:
    mod = _script()
    late = _run("2026-12-07T08:00:00Z", "NVIDIA H100 80GB HBM3", 140.0)
    early = _run("2026-12-06T08:00:00Z", "NVIDIA H200", 800.0)
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / mod.NAME).write_text(json.dumps(late))
    _add_to_tgz(tmp_path / "b.tgz", mod.NAME, early)
    _add_to_tgz(tmp_path / "c.tgz", mod.NAME, early)  # the same run in a second archive
    _add_to_tgz(tmp_path / "d.tgz", "other.json", late)  # not a targets run
    runs = mod.find_runs(tmp_path)
    assert [ev["when"] for _w, ev in runs] == [early["when"], late["when"]]
    assert runs[0][0] == "b.tgz" and runs[1][0] == "a"
    text = mod.table(runs)
    assert "| H200 | on | 800 / 1,600 |" in text
    assert "| H100 80GB HBM3 | on | **140** / **280** | — |" in text  # met: in bold
    assert text.count("| 0 / 5 |") == 2


def test_a_failed_run_says_so_and_two_inline_placements_are_refused(tmp_path: Path) -> None:
    mod = _script()
    failed = _run("2026-12-06T08:00:00Z", "NVIDIA H100 80GB HBM3", 140.0)
    failed["placements"] = []
    failed["failed"] = {"inline": "channels not all UP"}
    text = mod.table([("x", failed)])
    assert "no inline figures (failed: inline: channels not all UP)" in text
    twice = _run("2026-12-06T08:00:00Z", "NVIDIA H100 80GB HBM3", 140.0)
    twice["placements"] *= 2
    with pytest.raises(ValueError, match="2 inline placements"):
        mod.table([("y", twice)])


def test_faulted_requests_are_counted_for_the_inline_placement_only() -> None:
    mod = _script()
    ev = _run("2026-12-06T08:00:00Z", "NVIDIA H100 80GB HBM3", 140.0)
    ev["placements"].append({**ev["placements"][0], "placement": "process", "faults": {
        "80x80x80": {"injected": 5, "released": 5, "errors": 0, "wrong_released": 1}}})
    assert "| 0 / 5 |" in mod.table([("z", ev)])
