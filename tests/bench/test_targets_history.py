"""scripts/targets_history.py: every targets run under an evidence tree, loose or in a .tgz,
listed once and oldest first, with the inline placement's figures as
`safemon.bench.targets` reads them; what `--skip` and `--since` leave out is named."""

from __future__ import annotations

import io
import json
import sys
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
    return {"device": device, "when": when, "mps": "on", "policy": "2oo3",
            "paths": ["cuda-ipc"], "variant": "default (ones/T/fma)",
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


def _tree(tmp_path: Path, mod: ModuleType) -> tuple[dict, dict]:
    late = _run("2026-12-07T08:00:00Z", "NVIDIA H100 80GB HBM3", 140.0)
    early = _run("2026-12-06T08:00:00Z", "NVIDIA H200", 800.0)
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / mod.NAME).write_text(json.dumps(late))
    _add_to_tgz(tmp_path / "b.tgz", mod.NAME, early)
    _add_to_tgz(tmp_path / "c.tgz", mod.NAME, early)  # the same run in a second archive
    _add_to_tgz(tmp_path / "d.tgz", "other.json", late)  # not a targets run
    return early, late


def test_runs_are_found_loose_and_archived_once_each_oldest_first(tmp_path: Path) -> None:
    mod = _script()
    early, late = _tree(tmp_path, mod)
    runs = mod.find_runs(tmp_path)
    assert [ev["when"] for _w, ev in runs] == [early["when"], late["when"]]
    assert runs[0][0] == "b.tgz" and runs[1][0] == "a"
    text = mod.table(runs)
    assert "| H200 | on | 800 / 1,600 |" in text
    assert "| H100 80GB HBM3 | on | **140** / **280** | — |" in text  # met: in bold
    assert text.count("| **0** / 5 |") == 2


def test_skip_and_since_say_what_they_leave_out(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    mod = _script()
    _tree(tmp_path, mod)

    def main(*args: str) -> int:
        monkeypatch.setattr(sys, "argv", ["targets_history.py", "--evidence", str(tmp_path),
                                          *args])
        return int(mod.main())

    assert main("--skip", "a") == 0
    out = capsys.readouterr().out
    assert "| a |" not in out and "| b.tgz |" in out and "Left out: a (--skip)." in out
    assert main("--since", "2026-12-07") == 0
    out = capsys.readouterr().out
    assert "| b.tgz |" not in out and "1 older than 2026-12-07 not shown." in out
    assert main("--skip", "typo") == 2
    assert "--skip names no run" in capsys.readouterr().err
    assert main("--skip", "a", "--skip", "b.tgz") == 1
    assert "every one left out" in capsys.readouterr().err


def test_a_failed_run_says_so_and_two_inline_placements_are_refused() -> None:
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


def test_the_inline_placement_is_read_wherever_it_stands() -> None:
    """A process placement listed first, with a wrong output and another overhead, changes
    nothing in the row: the inline placement's figures and faults are the ones shown."""
    mod = _script()
    ev = _run("2026-12-06T08:00:00Z", "NVIDIA H100 80GB HBM3", 140.0)
    process = json.loads(json.dumps(ev["placements"][0]))
    process["placement"] = "process"
    process["runs"][0]["overhead"] = _stats(999.0)
    process["faults"]["80x80x80"]["wrong_released"] = 1
    ev["placements"].insert(0, process)
    text = mod.table([("z", ev)])
    assert "| **140** / **280** |" in text and "| **0** / 5 |" in text


def test_a_run_without_faulted_requests_shows_none_and_a_variant_is_named() -> None:
    mod = _script()
    ev = _run("2026-12-06T08:00:00Z", "NVIDIA H100 80GB HBM3", 140.0)
    ev["placements"][0]["faults"] = {}
    ev["variant"] = "ones/M/fma"
    text = mod.table([("z", ev)])
    assert text.rstrip().endswith("| — | — | — | — |")
    assert "| H100 80GB HBM3, ones/M/fma | on |" in text
